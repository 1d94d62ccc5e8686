#!/usr/bin/env python3
"""Fails when modules of one crate import each other in a circle.

For every crate of the workspace, each `crate::…`, `super::…` and `self::…` path in non-test code
is resolved to a module path. A path from module A to module B is an edge between the two
siblings under their common parent (`forward::internal` → `pipeline::…` is an edge
`forward` → `pipeline` at the crate root). Any cycle among siblings is reported.

Usage: scripts/check-module-cycles.py [crate dir …]   (default: every crate in the workspace)
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = [
    "proxy",
    "proxy/analysis",
    "proxy/record",
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


def check_crate(crate: Path) -> list[str]:
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
    edges = defaultdict(set)  # parent -> {(a, b)}
    for module, text in modules.items():
        for target in targets(list(module), text):
            # Truncate the target to a known module (the rest names items).
            while target and tuple(target) not in known:
                target = target[:-1]
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
            problems.append(f"{crate.relative_to(ROOT)}: modules under {where} import each other: {' -> '.join(cycle)}")
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


def main():
    crates = [ROOT / c for c in (sys.argv[1:] or CRATES)]
    problems = [p for c in crates for p in check_crate(c)]
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"module cycles: none in {len(crates)} crates")


if __name__ == "__main__":
    main()
