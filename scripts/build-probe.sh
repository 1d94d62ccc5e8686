#!/usr/bin/env bash
# Builds the browser probe (browser-probe/, Rust → wasm32) into the artifacts tokentap embeds and
# serves at /_tokentap/probe/: probe.js (the module apps import), tokentap_probe.js (wasm-bindgen's
# glue) and tokentap_probe_bg.wasm. Prints their sizes, raw and gzipped. The same three files are
# the npm package's (browser-probe/npm/, whose package.json, types and README are committed): one
# build serves both.
#
#   scripts/build-probe.sh                 # writes proxy/server/assets/probe/ (commit the result) and
#                                          # copies it into browser-probe/npm/
#   scripts/build-probe.sh --out-dir DIR   # writes DIR instead (the staleness test does this)
#   scripts/build-probe.sh --package-only  # copies the committed proxy/server/assets/probe/ into
#                                          # browser-probe/npm/ without building (no toolchain)
#
# Needs: the wasm32-unknown-unknown target, wasm-bindgen-cli at the exact version the crate pins,
# and binaryen's wasm-opt from tests/browser/node_modules. `scripts/setup.sh probe` installs them.
# The output depends only on the sources and tool versions, not on where the repository lives, so
# a fresh build can be compared byte for byte with the committed artifacts.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
assets="$root/proxy/server/assets/probe"
out_dir="$assets"
package_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out-dir) out_dir="$2"; shift 2 ;;
    --package-only) package_only=1; shift ;;
    *) echo "usage: $0 [--out-dir DIR | --package-only]" >&2; exit 2 ;;
  esac
done

say() { printf '[build-probe] %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# The npm package's built files: those tokentap embeds, byte for byte.
package_dir="$root/browser-probe/npm"
fill_package() {
  for f in probe.js tokentap_probe.js tokentap_probe_bg.wasm; do
    cp "$assets/$f" "$package_dir/$f"
  done
  say "copied the build into ${package_dir#"$root"/}"
}
if [ "$package_only" = 1 ]; then
  fill_package
  exit 0
fi

# The wasm-bindgen CLI must match the crate's exact pin, or the glue and the module disagree.
want_bindgen="$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' "$root/browser-probe/Cargo.toml")"
[ -n "$want_bindgen" ] || fail "no exact wasm-bindgen pin in browser-probe/Cargo.toml"
bindgen="$(command -v wasm-bindgen || echo "${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen")"
[ -x "$bindgen" ] || fail "wasm-bindgen not found: run scripts/setup.sh probe"
have_bindgen="$("$bindgen" --version | awk '{print $2}')"
[ "$have_bindgen" = "$want_bindgen" ] || fail "wasm-bindgen $have_bindgen found, $want_bindgen needed: run scripts/setup.sh probe"
wasm_opt="$root/tests/browser/node_modules/.bin/wasm-opt"
[ -x "$wasm_opt" ] || fail "wasm-opt not found in tests/browser/node_modules: run scripts/setup.sh probe"

# Paths into the wasm (panic locations) are remapped so the module does not depend on where the
# repository or the cargo home is. The flags apply to the wasm target only: native builds and
# their caches are untouched.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="--remap-path-prefix=$root=/tokentap --remap-path-prefix=$cargo_home=/cargo"
say "cargo build (wasm32, profile probe)"
cargo build --quiet --locked -p tokentap-browser-probe --target wasm32-unknown-unknown --profile probe \
  --manifest-path "$root/Cargo.toml"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
module="$target_dir/wasm32-unknown-unknown/probe/tokentap_browser_probe.wasm"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say "wasm-bindgen $have_bindgen --target web"
"$bindgen" --target web --no-typescript --out-name tokentap_probe --out-dir "$work" "$module"
say "wasm-opt -Oz ($("$wasm_opt" --version))"
"$wasm_opt" -Oz --enable-reference-types --enable-bulk-memory --enable-nontrapping-float-to-int \
  --enable-sign-ext --enable-mutable-globals --strip-debug --strip-producers \
  "$work/tokentap_probe_bg.wasm" -o "$work/opt.wasm"

mkdir -p "$out_dir"
cp "$work/opt.wasm" "$out_dir/tokentap_probe_bg.wasm"
cp "$work/tokentap_probe.js" "$out_dir/tokentap_probe.js"
cp "$root/browser-probe/js/probe.js" "$out_dir/probe.js"

total_raw=0
total_gz=0
for f in probe.js tokentap_probe.js tokentap_probe_bg.wasm; do
  raw=$(wc -c < "$out_dir/$f")
  gz=$(gzip -9 -n -c "$out_dir/$f" | wc -c)
  total_raw=$((total_raw + raw))
  total_gz=$((total_gz + gz))
  printf '%-24s %7d bytes  %6d gzip\n' "$f" "$raw" "$gz"
done
printf '%-24s %7d bytes  %6d gzip (budget 78848)\n' "total" "$total_raw" "$total_gz"
say "wrote $out_dir"
if [ "$out_dir" = "$assets" ]; then
  fill_package
fi
