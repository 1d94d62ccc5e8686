#!/usr/bin/env bash
# A fleet on one machine: the mock provider, N tokentap instances sharing a fleet key, and nginx in
# front of them with the conversation-affinity recipe (nginx-affinity.conf). Ctrl-C stops them all.
#   examples/fleet/run.sh [--instances 3] [--port 8080] [--round-robin]
#
# --round-robin: plain round robin instead of affinity (every step of a turn may land elsewhere;
# `tokentap report --records` over the instances' journals then rebuilds the split turns).
# Each instance's records go to $TMPDIR/tokentap-fleet/instance-K/records.jsonl; the script prints
# the `tokentap report --records …` command that reads them all.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
instances=3
port=8080
round_robin=0
while [ $# -gt 0 ]; do
  case "$1" in
    --instances) instances="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --round-robin) round_robin=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
nginx="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx" ] || { echo "nginx is not installed (scripts/setup.sh test installs it)" >&2; exit 1; }
cd "$root"
cargo build --release --locked -p tokentap -p tokentap-mock
work="${TMPDIR:-/tmp}/tokentap-fleet"
rm -rf "$work" && mkdir -p "$work/nginx"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT INT TERM

# The first line each prints is its address.
first_line() { local f="$1" pattern="$2"; for _ in $(seq 1 300); do grep -m1 -o "$pattern" "$f" 2>/dev/null && return 0; sleep 0.1; done; echo "no '$pattern' in $f" >&2; cat "$f" >&2; exit 1; }

target/release/tokentap-mock --listen 127.0.0.1:0 >"$work/mock.log" 2>&1 &
pids+=($!)
mock="$(first_line "$work/mock.log" 'http://127\.0\.0\.1:[0-9]*')"
export TOKENTAP_FLEET_KEY="${TOKENTAP_FLEET_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
servers=""
records=()
for k in $(seq 1 "$instances"); do
  dir="$work/instance-$k"
  mkdir -p "$dir"
  target/release/tokentap serve --upstream "$mock" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --data-dir "$dir" >"$dir/log" 2>&1 &
  pids+=($!)
  addr="$(first_line "$dir/log" 'listening on http://127\.0\.0\.1:[0-9]*' | sed 's#.*http://##')"
  admin="$(first_line "$dir/log" 'admin API on http://127\.0\.0\.1:[0-9]*' | sed 's#.*http://##')"
  echo "instance $k: proxy $addr, dashboard http://$admin/_tokentap/"
  servers="$servers server $addr;"
  records+=("$dir/records.jsonl")
done
conf="$work/nginx/nginx.conf"
sed -e "s#@PREFIX@#$work/nginx#g" -e "s#@PORT@#$port#g" -e "s#@SERVERS@#$servers#" \
  "$root/examples/fleet/nginx-affinity.conf" >"$conf"
if [ "$round_robin" = 1 ]; then
  sed -i 's#^\( *\)hash \$tokentap_affinity consistent;#\1\# round robin#' "$conf"
fi
"$nginx" -p "$work/nginx" -c "$conf" -e stderr &
pids+=($!)
echo "fleet: http://127.0.0.1:$port (nginx, $([ "$round_robin" = 1 ] && echo "round robin" || echo "conversation affinity")) in front of $instances instances and the mock at $mock"
echo "every instance's records: target/release/tokentap report --records ${records[*]}"
wait
