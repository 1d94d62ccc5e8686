#!/usr/bin/env bash
# Runs every cargo-fuzz target of the repository for a stated time each, one after the other, and
# prints one line per target (executions, findings). Not part of CI: a budget spent on purpose.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]        (default 600)
#   FUZZ_TARGETS="realtime voice" scripts/fuzz.sh 60     (only these)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). The stable toolchain is used with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz's sanitizer flags); set FUZZ_TOOLCHAIN=nightly to use nightly.
# Findings land in proxy/<crate>/fuzz/artifacts/<target>/; each becomes a regression test (see
# FUZZING.md) before it is fixed. The script exits non-zero when any target found something.
set -euo pipefail

seconds="${1:-600}"
root="$(cd "$(dirname "$0")/.." && pwd)"
toolchain=()
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
    toolchain=("+${FUZZ_TOOLCHAIN}")
else
    export RUSTC_BOOTSTRAP=1
fi
if ! cargo "${toolchain[@]}" fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi

# Files in a findings folder (0 when it does not exist yet).
count_files() {
    if [[ -d "$1" ]]; then find "$1" -type f | wc -l; else echo 0; fi
}

found=0
for crate_dir in "$root"/proxy/*/fuzz; do
    crate="$(dirname "$crate_dir")"
    for target_file in "$crate_dir"/fuzz_targets/*.rs; do
        target="$(basename "$target_file" .rs)"
        if [[ -n "${FUZZ_TARGETS:-}" && " ${FUZZ_TARGETS} " != *" $target "* ]]; then
            continue
        fi
        log="$(mktemp)"
        artifacts="$crate_dir/artifacts/$target"
        before="$(count_files "$artifacts")"
        started="$(date +%s)"
        status=0
        (cd "$crate" && cargo "${toolchain[@]}" fuzz run "$target" -- -max_total_time="$seconds" -print_final_stats=1) \
            >"$log" 2>&1 || status=$?
        elapsed=$(($(date +%s) - started))
        after="$(count_files "$artifacts")"
        runs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)"
        new=$((after - before))
        echo "$(basename "$crate") $target: ${seconds} s budget, ${elapsed} s with the build, ${runs:-?} executions, ${new} new findings, exit ${status}"
        if [[ $status -ne 0 || $new -gt 0 ]]; then
            found=1
            echo "  log: $log; artifacts: $artifacts" >&2
            tail -n 30 "$log" >&2
        else
            rm -f "$log"
        fi
    done
done
exit "$found"
