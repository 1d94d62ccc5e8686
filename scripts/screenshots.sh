#!/usr/bin/env bash
# Takes the README's dashboard screenshots (docs/images/dashboard-*.png): the Summary, a request,
# an agent turn and a voice turn, from real traffic of every kind (a streamed and a non-streaming
# chat, an openai SDK agent turn, a voice turn, a realtime session) through tokentap and the mock,
# in headless Chromium at 1,280 px. It runs the browser test that checks those pages
# (tests/tests/dashboard.rs, every_view_reads_cleanly_with_every_kind_of_traffic) and keeps its
# screenshots. Needs what `scripts/setup.sh test` installs.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cargo build -p tokentap -p tokentap-mock
TOKENTAP_SCREENSHOTS_DIR="$out" cargo nextest run -p tokentap-e2e --test dashboard \
  every_view_reads_cleanly_with_every_kind_of_traffic
mkdir -p docs/images
for name in summary request agent-turn voice-turn; do
  cp "$out/$name.png" "docs/images/dashboard-$name.png"
done
echo "wrote docs/images/dashboard-{summary,request,agent-turn,voice-turn}.png"
