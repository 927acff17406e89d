#!/usr/bin/env bash
# One command: build gputrace, then run the main job.
#   scripts/setup-and-run.sh                 report on the bundled real H200 trace (and
#                                            gputrace-report.html, the same as a page)
#   scripts/setup-and-run.sh CMD ARGS...     trace CMD (needs a GPU) and report on it
set -euo pipefail
cd "$(dirname "$0")/.."
# No incremental compilation: these commands build from a clean tree or after a pull, where
# it saves nothing, and its files would double target/ (about 0.9 GB).
export CARGO_INCREMENTAL=0
if [ $# -eq 0 ]; then
  # The workspace in the dev profile, as scripts/test.sh builds it: the tests that follow
  # build nothing of it again.
  cargo build --workspace >&2
  G=target/debug/gputrace
  # A training loop starved by its DataLoader workers, with the host samples, Python call
  # sites and stack samples, and the environment file `gputrace run` wrote beside it. The
  # same report as a page to open in a browser: gputrace-report.html.
  echo "the report as a page: gputrace-report.html" >&2
  exec "$G" report --html gputrace-report.html --force examples/train/*.gtrace
fi
# Tracing a real job: the preload library and the command optimised.
cargo build --release -p gputrace-interpose -p gputrace-analyzer >&2
exec target/release/gputrace run -- "$@"
