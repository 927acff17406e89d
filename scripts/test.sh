#!/usr/bin/env bash
# The test command (README): builds the preload library the end-to-end tests load,
# then runs every test of the workspace. Benchmarks are apart (scripts/bench-*.sh, their
# results in bench/): nothing here is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
# No incremental compilation: these commands build from a clean tree or after a pull, where
# it saves nothing, and its files would double target/ (about 0.9 GB).
export CARGO_INCREMENTAL=0
# The whole workspace, in the dev profile as scripts/setup-and-run.sh builds it (the same
# features: nothing is built twice when the two alternate).
cargo build --workspace
# Among them the fault matrix (analyzer/tests/fault_matrix.rs: damaged variants of the
# bundled traces; its counts with `cargo test --test fault_matrix -- --nocapture`) and the
# SIGKILL test (tests/tests/kill.rs).
cargo test --workspace
# The fleet command's tests (feature fleet: DataFusion, a 4-minute build on 2 cores and
# 700 MB per test binary) are scripts/test-fleet.sh's, which CI runs after this.
# The analyzer's outputs of the bundled examples, byte for byte against the recorded
# sums (tests/golden/outputs.sha256).
scripts/check-identical.sh
# The HTML report opened in headless Chromium, its figures against --json's, for every
# bundled example (skipped without Chromium, except in CI: GPUTRACE_REQUIRE_BROWSER=1).
scripts/test-html.py target/debug/gputrace
# The gallery (docs/gallery.md): every bundled real trace's verdict and top findings, as
# the analyzer says them now.
scripts/gallery.py --check target/debug/gputrace
