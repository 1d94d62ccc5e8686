#!/usr/bin/env bash
# Installs what tokentap's demo or test suite needs, idempotently: Debian packages, the Python SDK
# virtualenv for the tests. Safe to run again; it only installs what is missing.
#
#   scripts/setup.sh demo   # what `tokentap demo` needs to build
#   scripts/setup.sh probe  # plus the toolchain that rebuilds the browser probe (scripts/build-probe.sh)
#   scripts/setup.sh test   # plus what the test suite needs (which includes the probe toolchain)
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

# The test command runs cargo fmt --check and cargo clippy.
if [ "$mode" = test ]; then
  for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
      say "adding the $component component"
      rustup component add "$component"
    fi
  done
fi

# pingora's zlib-ng build needs cmake; a C compiler builds ring and friends.
ensure_apt cmake gcc g++ make pkg-config

# The browser probe's toolchain: tokentap embeds the built probe, so only rebuilding it (and the
# staleness test) needs this. The wasm-bindgen CLI must be the exact version the crate pins.
if [ "$mode" = probe ] || [ "$mode" = test ]; then
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
  bindgen_version="$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' "$root/browser-probe/Cargo.toml")"
  bindgen="$(command -v wasm-bindgen || echo "${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen")"
  if [ "$("$bindgen" --version 2>/dev/null | awk '{print $2}')" != "$bindgen_version" ]; then
    # Not --locked: the CLI's lockfile can name versions the registry mirror does not have yet.
    say "installing wasm-bindgen-cli $bindgen_version (a few minutes)"
    cargo install --quiet --force wasm-bindgen-cli --version "$bindgen_version"
  fi
  # wasm-opt (binaryen) and playwright-core, pinned by tests/browser/package-lock.json. Debian's
  # binaryen is too old: its wasm-opt output fails to load.
  command -v npm >/dev/null || ensure_apt nodejs npm
  lock="$root/tests/browser/package-lock.json"
  want="$(sha256sum "$lock" | cut -d' ' -f1)"
  have="$(cat "$root/tests/browser/node_modules/.lock.sha256" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    say "installing Node tools from tests/browser/package-lock.json"
    (cd "$root/tests/browser" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$root/tests/browser/node_modules/.lock.sha256"
  fi
fi

if [ "$mode" = test ]; then
  # Headless Chromium for the browser probe tests (driven by playwright-core, never downloaded).
  ensure_apt chromium chromium-driver
  # promtool lints tokentap's /metrics, and a real Prometheus scrapes it (tests/tests/prometheus.rs).
  ensure_apt prometheus
  # A real nginx in front of tokentap for the re-buffering verdict tests (tests/tests/hops_nginx.rs).
  ensure_apt nginx
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
