#!/usr/bin/env bash
# Side-by-side forwarding benchmark: direct vs nginx vs tokentap (recording on and off), the
# proxy pinned to one core and the load generator to the other. Builds the release binaries,
# runs tests/src/bin/proxy-bench, prints the tables and writes them into BENCHMARKS.md between
# the proxy-bench markers.
#
#   scripts/bench-proxy.sh                                  # the full sweep (about 15 minutes)
#   scripts/bench-proxy.sh --levels 1,100 --rates 1000      # any proxy-bench flags
#   TOKENTAP_BEFORE=/path/to/old/tokentap scripts/bench-proxy.sh   # also an older build, side by side
#   BENCH_WRITE=0 scripts/bench-proxy.sh ...                # print only, leave BENCHMARKS.md alone
#   scripts/bench-proxy.sh --soak-minutes 30 --soak-streams 200   # the soak (printed, never written)
#   scripts/bench-proxy.sh --faults all                     # the fault table (printed, never written; needs root for disk-full)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || scripts/setup.sh test
cargo build --release --locked -p tokentap -p tokentap-e2e --bin tokentap --bin proxy-bench
# 5,000 streams need about 10,000 descriptors in the load generator and as many in the proxy.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
args=()
if [ -n "${TOKENTAP_BEFORE:-}" ]; then
  args+=(--tokentap "before=$TOKENTAP_BEFORE" --tokentap "after=target/release/tokentap")
fi
case " $* " in *" --soak-minutes "* | *" --faults "*) BENCH_WRITE=0 ;; esac
out="$(mktemp)"
target/release/proxy-bench "${args[@]}" "$@" | tee "$out"
if [ "${BENCH_WRITE:-1}" = 1 ]; then
  python3 - "$out" <<'PY'
import sys, re
table = open(sys.argv[1]).read().strip()
path = "BENCHMARKS.md"
text = open(path).read()
begin, end = "<!-- proxy-bench:begin -->", "<!-- proxy-bench:end -->"
block = f"{begin}\n{table}\n{end}"
if begin in text and end in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = text.rstrip() + "\n\n## Proxy: side by side with nginx (latest run of scripts/bench-proxy.sh)\n\n" + block + "\n"
open(path, "w").write(text)
print(f"[bench] wrote the tables into {path}")
PY
fi
rm -f "$out"
