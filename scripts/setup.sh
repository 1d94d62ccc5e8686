#!/usr/bin/env bash
# Installs what tokentap's demo or test suite needs, idempotently: Debian packages, the Python SDK
# virtualenv for the tests. Safe to run again; it only installs what is missing.
#
#   scripts/setup.sh demo   # what `tokentap demo` needs to build
#   scripts/setup.sh test   # plus what the test suite needs
set -euo pipefail
mode="${1:-test}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; exit 1; fi
}

apt_updated=0
ensure_apt() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    as_root apt-get update -qq
    apt_updated=1
  fi
  say "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

command -v cargo >/dev/null || { say "cargo not found: install Rust with rustup first"; exit 1; }

# pingora's zlib-ng build needs cmake; a C compiler builds ring and friends.
ensure_apt cmake gcc g++ make pkg-config

if [ "$mode" = test ]; then
  # The official Python SDKs the tests drive tokentap with.
  venv="$root/.cache/venv"
  req="$root/tests/sdk/requirements.txt"
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    mkdir -p "$root/.cache"
    python3 -m venv "$venv" 2>/dev/null || { ensure_apt python3-venv; python3 -m venv "$venv"; }
  fi
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    say "installing Python SDKs from tests/sdk/requirements.txt"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$venv/.requirements.sha256"
  fi
  if ! command -v cargo-nextest >/dev/null && ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest"
    cargo install --quiet cargo-nextest --locked
  fi
fi
say "ready ($mode)"
