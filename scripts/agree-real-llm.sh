#!/usr/bin/env bash
# Does tokentap measure what an established benchmark client measures? Runs NVIDIA AIPerf
# (tests/llm/bench-requirements.txt, o200k_base tokenizer) against tokentap in front of llama.cpp's
# own server with SmolLM2-135M (one thread, one slot, all local), then compares each request's time
# to first token and output tokens/s from AIPerf's per-request export with tokentap's record of the
# same request (joined by AIPerf's X-Request-ID header). Exits non-zero when they disagree by more
# than the tolerances scripts/agree_real_llm.py states.
#   scripts/agree-real-llm.sh [--requests 20] [--isl 64] [--osl 64]   (TOKENTAP_BIN=PATH: this binary)
# Installs AIPerf into .cache/venv-bench on first use (about 1.2 GB, several minutes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
requests=20 isl=64 osl=64
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests="$2"; shift 2 ;;
    --isl) isl="$2"; shift 2 ;;
    --osl) osl="$2"; shift 2 ;;
    *) echo "usage: $0 [--requests N] [--isl N] [--osl N]" >&2; exit 2 ;;
  esac
done
say() { printf '[agree] %s\n' "$*"; }

scripts/setup.sh llm
bench="$root/.cache/venv-bench" req="$root/tests/llm/bench-requirements.txt"
[ -x "$bench/bin/python" ] || python3 -m venv "$bench"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ "$want" != "$(cat "$bench/.requirements.sha256" 2>/dev/null || true)" ]; then
  say "installing AIPerf from tests/llm/bench-requirements.txt (about 1.2 GB)"
  "$bench/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$bench/.requirements.sha256"
fi

# tiktoken would download o200k_base; the same file ships in the tiktoken-rs crate tokentap builds
# with. Its SHA-256 is the one tiktoken checks.
# TOKENTAP_BIN: an already built tokentap to measure instead of building the release one.
if [ -z "${TOKENTAP_BIN:-}" ]; then
  cargo build --release --locked -p tokentap
  TOKENTAP_BIN="${CARGO_TARGET_DIR:-$root/target}/release/tokentap"
fi
cargo fetch --locked -q
o200k="$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -path '*tiktoken-rs-*/assets/o200k_base.tiktoken' | head -1)"
[ -n "$o200k" ] || { say "o200k_base.tiktoken not found in the cargo registry"; exit 1; }
echo "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d  $o200k" | sha256sum -c --quiet -
work="$(mktemp -d)"
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export TIKTOKEN_CACHE_DIR="$work/tiktoken" HF_HUB_OFFLINE=1
mkdir -p "$TIKTOKEN_CACHE_DIR"
# tiktoken's cache key: the SHA-1 of the file's URL.
cp "$o200k" "$TIKTOKEN_CACHE_DIR/fb374d419588a4632f3f557e76b4b70aebbca790"

# Both servers print their address once they accept connections.
exec {llama_out}< <(exec "$root/.cache/venv-llm/bin/python" "$root/tests/llm/llama_server.py" 2> "$work/llama.log")
pids+=($!)
read -r line <&"$llama_out"
llama_url="$(echo "$line" | awk '{print $4}')"
model="$(echo "$line" | sed -n 's/.* model=\([^ ]*\).*/\1/p')"
exec {proxy_out}< <(exec "$TOKENTAP_BIN" serve --upstream "$llama_url" --listen 127.0.0.1:0 \
  --admin-listen 127.0.0.1:0 --data-dir "$work/data" --threads 1 2> "$work/tokentap.log")
pids+=($!)
read -r line <&"$proxy_out"
proxy="$(echo "$line" | sed -n 's/^tokentap listening on //p')"
say "llama.cpp ($model) at $llama_url, tokentap at $proxy"

say "AIPerf: $requests requests, concurrency 1, about $isl prompt and $osl output tokens"
"$bench/bin/aiperf" profile --model "$model" --url "$proxy" --endpoint-type chat --streaming \
  --tokenizer builtin --isl "$isl" --osl "$osl" --extra-inputs ignore_eos:true \
  --request-count "$requests" --warmup-request-count 2 --concurrency 1 \
  --artifact-dir "$work/aiperf" --ui-type none > "$work/aiperf.log" 2>&1 \
  || { cat "$work/aiperf.log"; exit 1; }
python3 "$root/scripts/agree_real_llm.py" "$work/aiperf/profile_export.jsonl" "$work/data/records.jsonl"
