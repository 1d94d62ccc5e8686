#!/usr/bin/env bash
# Runs tokentap's whole test suite on this machine, installing what is missing first.
# Builds the workspace once; the end-to-end tests reuse the built binaries.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh test
export TOKENTAP_PYTHON="$root/.cache/venv/bin/python"
export TOKENTAP_LLM_PYTHON="$root/.cache/venv-llm/bin/python"
export TOKENTAP_PIPECAT_PYTHON="$root/.cache/venv-pipecat/bin/python"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A clean clone gains nothing from incremental compilation, and its caches take gigabytes.
if [[ "${CI:-}" == "true" ]]; then
  export CARGO_INCREMENTAL=0
fi
# A full debug build of the workspace needs about 15 GiB; say so before cargo fails deep in a build script.
free_kib="$(df -Pk "$root" | awk 'NR == 2 { print $4 }')"
if [[ -n "$free_kib" && "$free_kib" -lt $((15 * 1024 * 1024)) ]]; then
  echo "[test] warning: only $((free_kib / 1024 / 1024)) GiB free under $root; a full build needs about 15 GiB" >&2
fi
echo "[test] checking formatting, lints and module cycles"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
python3 scripts/check-module-cycles.py --self-test
python3 scripts/check-module-cycles.py
echo "[test] checking for unused dependencies"
cargo machete
echo "[test] building the workspace (binaries and tests)"
cargo build --workspace --bins --tests --locked
echo "[test] running the suite"
cargo nextest run --workspace --locked --no-fail-fast "$@"
