#!/usr/bin/env bash
# Instructions per forwarded streamed event and per non-streaming request, counted by valgrind's
# callgrind for nginx, tokentap with recording on and tokentap with recording off (the same
# in-process upstream and clients as scripts/bench-proxy.sh; tests/src/bin/proxy-bench/callgrind.rs).
# Repeatable on a shared machine, where CPU time is not; user-space instructions only.
# Installs valgrind (a bench-only dependency) when it is missing. Prints the tables and writes
# them into BENCHMARKS.md between the callgrind markers.
#
#   scripts/bench-callgrind.sh                                        # the default run (a few minutes)
#   TOKENTAP_BEFORE=/path/to/old/tokentap scripts/bench-callgrind.sh  # also an older build
#   BENCH_WRITE=0 scripts/bench-callgrind.sh --callgrind-streams 50   # any proxy-bench flags; print only
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || scripts/setup.sh test
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
  sudo_or=()
  [ "$(id -u)" = 0 ] || sudo_or=(sudo)
  "${sudo_or[@]}" apt-get update -qq
  "${sudo_or[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind
fi
cargo build --release --locked -p tokentap -p tokentap-e2e --bin tokentap --bin proxy-bench
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
args=()
if [ -n "${TOKENTAP_BEFORE:-}" ]; then
  args+=(--tokentap "before=$TOKENTAP_BEFORE" --tokentap "after=target/release/tokentap")
fi
profiles="${CALLGRIND_DIR:-$(mktemp -d)}"
out="$(mktemp)"
target/release/proxy-bench --callgrind "$profiles" \
  --callgrind-requests 300 \
  --callgrind-inclusive "ProxyHttp>::upstream_response_body_filter,ProxyHttp>::response_body_filter,pipeline::run_worker,forward::tail::run,ProxyHttp>::logging" \
  "${args[@]}" "$@" | tee "$out"
echo "[bench] callgrind profiles in $profiles (callgrind_annotate FILE)" >&2
if [ "${BENCH_WRITE:-1}" = 1 ]; then
  python3 - "$out" <<'PY'
import sys, re
table = open(sys.argv[1]).read().strip()
path = "BENCHMARKS.md"
text = open(path).read()
begin, end = "<!-- callgrind:begin -->", "<!-- callgrind:end -->"
block = f"{begin}\n{table}\n{end}"
if begin in text and end in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = text.rstrip() + "\n\n## Proxy: instructions per event and per request (latest run of scripts/bench-callgrind.sh)\n\n" + block + "\n"
open(path, "w").write(text)
print(f"[bench] wrote the tables into {path}")
PY
fi
rm -f "$out"
