#!/usr/bin/env python3
"""Fails when modules of one crate import each other in a circle.

For every crate of the workspace, each `crate::…`, `super::…` and `self::…` path in non-test code
is resolved to a module path. A path from module A to module B is an edge between the two
siblings under their common parent (`forward::internal` → `pipeline::…` is an edge
`forward` → `pipeline` at the crate root). A path through a re-export (`pub use schema::*;` in
lib.rs makes `crate::Record` a path to `schema`) is followed to the module that defines the item.
Any cycle among siblings is reported.

Usage: scripts/check-module-cycles.py [crate dir …]   (default: every crate in the workspace)
       scripts/check-module-cycles.py --self-test       (the checker on crates made for it)
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = [
    "proxy/server",
    "proxy/analysis",
    "proxy/record",
    "proxy/probe-protocol",
    "proxy/report",
    "proxy/telemetry",
    "proxy/bench",
    "examples/mock-provider",
    "tests",
    "browser-probe",
]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_RE = re.compile(r"\b(crate|super|self)((?:::" + IDENT + r")*)(::\{([^;]*?)\})?")


def module_path(src: Path, file: Path) -> list[str]:
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts in (["lib"], ["main"]):
        return []
    if parts[0] == "bin":
        return None  # binaries are crates of their own
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def strip_tests(text: str) -> str:
    # Drop line comments and everything from an inline `#[cfg(test)] mod tests {` to the end.
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def targets(module: list[str], text: str):
    for m in PATH_RE.finditer(text):
        head, rest, _group, group_body = m.group(1), m.group(2), m.group(3), m.group(4)
        segs = [s for s in rest.split("::") if s]
        if head == "crate":
            base = []
        elif head == "self":
            base = list(module)
        else:  # super: count repeated super:: segments
            base = list(module[:-1])
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        if segs:
            yield base + segs
        elif group_body is not None:
            for item in re.split(r",(?![^{]*\})", group_body):
                first = item.strip().split("::")[0].strip("{} ")
                if re.fullmatch(IDENT, first or "") and first != "self":
                    yield base + [first]
        else:
            yield base


DEF_RE = re.compile(r"\bpub(?:\([^)]*\))?\s+(?:async\s+)?(?:unsafe\s+)?(?:struct|enum|fn|const|static|type|trait|mod|union|macro)\s+(" + IDENT + ")")
REEXPORT_RE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")


def reexports(module: list[str], text: str):
    """(name or "*", path) for every `pub use` of the module: the path as `targets` resolves it."""
    for m in REEXPORT_RE.finditer(text):
        body = m.group(1).strip()
        for path in expand_use(body):
            segs = path
            name = segs[-1]
            alias = None
            if " as " in name:
                name, alias = [x.strip() for x in name.split(" as ")]
                segs = segs[:-1] + [name]
            resolved = list(targets(list(module), "::".join(segs)))
            if not resolved:
                # A path relative to the module (`pub use schema::X;` inside lib.rs).
                resolved = [list(module) + segs]
            yield (alias or name), resolved[0]


def expand_use(body: str) -> list[list[str]]:
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]]."""
    body = body.strip()
    brace = body.find("{")
    if brace < 0:
        return [[s.strip() for s in body.split("::") if s.strip()]]
    prefix = [s.strip() for s in body[:brace].split("::") if s.strip()]
    inner = body[brace + 1 : body.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip() and part.strip() != "self":
            out += [prefix + rest for rest in expand_use(part)]
    return out


def resolve(target: list[str], known: set, defs: dict, exports: dict, depth: int = 0) -> list[str]:
    """The module a path reaches: truncated to a known module, and through that module's re-exports
    (named or glob) to the module that defines the item."""
    k = len(target)
    while k and tuple(target[:k]) not in known:
        k -= 1
    module, rest = list(target[:k]), list(target[k:])
    if not rest or depth > 8 or rest[0] in defs.get(tuple(module), ()):
        return module
    name = rest[0]
    for exported, path in exports.get(tuple(module), ()):
        if exported == name:
            return resolve(path + rest[1:], known, defs, exports, depth + 1)
    for exported, path in exports.get(tuple(module), ()):
        if exported == "*":
            source = resolve(path, known, defs, exports, depth + 1)
            if source != module and (
                name in defs.get(tuple(source), ())
                or any(e == name for e, _ in exports.get(tuple(source), ()))
            ):
                return resolve(source + rest, known, defs, exports, depth + 1)
    return module


def check_crate(crate: Path, label: str | None = None) -> list[str]:
    src = crate / "src"
    if not src.is_dir():
        return []
    modules = {}
    for file in src.rglob("*.rs"):
        path = module_path(src, file)
        if path is None or file.name == "tests.rs" or "tests" in path[-1:]:
            continue
        modules[tuple(path)] = strip_tests(file.read_text())
    known = set(modules)
    defs = {m: set(DEF_RE.findall(text)) for m, text in modules.items()}
    exports = {m: list(reexports(list(m), text)) for m, text in modules.items()}
    edges = defaultdict(set)  # parent -> {(a, b)}
    for module, text in modules.items():
        for target in targets(list(module), text):
            # The module the path reaches (the rest names items), through re-exports.
            target = resolve(target, known, defs, exports)
            k = 0
            while k < len(module) and k < len(target) and module[k] == target[k]:
                k += 1
            if k < len(module) and k < len(target):
                edges[tuple(module[:k])].add((module[k], target[k]))
    problems = []
    for parent, pairs in edges.items():
        graph = defaultdict(set)
        for a, b in pairs:
            graph[a].add(b)
        for cycle in find_cycles(graph):
            where = "::".join(parent) or "crate root"
            problems.append(f"{label or crate.relative_to(ROOT)}: modules under {where} import each other: {' -> '.join(cycle)}")
    return problems


def find_cycles(graph):
    seen, stack, on_stack, cycles = set(), [], set(), []

    def visit(node):
        seen.add(node)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in seen:
                visit(nxt)
        stack.pop()
        on_stack.discard(node)

    for node in sorted(graph):
        if node not in seen:
            visit(node)
    return cycles


def self_test():
    """The checker on small crates made for it: a cycle only visible through re-exports is found,
    and the same crate without it passes."""
    import tempfile

    cases = {
        # schema -> turn (a direct path), turn -> schema through the root's glob re-export.
        "glob re-export": ({
            "lib.rs": "pub mod schema;\npub mod turn;\npub use schema::*;\n",
            "schema.rs": "pub struct Record { pub turn: Option<crate::turn::TurnRef> }\n",
            "turn/mod.rs": "pub mod refs;\npub use refs::TurnRef;\n",
            "turn/refs.rs": "pub struct TurnRef;\nfn f(_: crate::Record) {}\n",
        }, ["schema -> turn -> schema"]),
        # The same through a named re-export of a renamed item.
        "named re-export": ({
            "lib.rs": "pub mod a;\npub mod b;\npub use a::{Thing as Alias, Other};\n",
            "a.rs": "pub struct Thing;\npub struct Other(crate::b::B);\n",
            "b.rs": "pub struct B(crate::Alias);\n",
        }, ["a -> b -> a"]),
        # No cycle: the root re-exports, but nothing points back.
        "no cycle": ({
            "lib.rs": "pub mod a;\npub mod b;\npub use a::*;\n",
            "a.rs": "pub struct Thing;\n",
            "b.rs": "pub struct B(crate::Thing);\n",
        }, []),
    }
    failed = 0
    for name, (files, expected) in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            crate = Path(tmp)
            for rel, text in files.items():
                path = crate / "src" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            found = [p.rsplit(": ", 1)[1] for p in check_crate(crate, label=name)]
            if found != expected:
                failed += 1
                print(f"self-test {name}: expected {expected}, found {found}")
    if failed:
        sys.exit(1)
    print(f"module cycle checker: {len(cases)} self-test cases pass")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    crates = [ROOT / c for c in (sys.argv[1:] or CRATES)]
    problems = [p for c in crates for p in check_crate(c)]
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"module cycles: none in {len(crates)} crates")


if __name__ == "__main__":
    main()
