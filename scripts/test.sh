#!/usr/bin/env bash
# The test command (README): builds the preload library the end-to-end tests load,
# then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p gputrace-interpose
cargo test --workspace
