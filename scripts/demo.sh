#!/usr/bin/env bash
# Runs the tokentap demo: tokentap in front of its built-in mock provider, a local record store and
# a demo chat page. No API key, no network. Installs what is missing first.
#   scripts/demo.sh [--listen 127.0.0.1:8787] [--admin-listen 127.0.0.1:8788] [--data-dir DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh demo
cargo build --release --locked -p tokentap
exec "$root/target/release/tokentap" demo "$@"
