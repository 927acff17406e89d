#!/usr/bin/env bash
# The trace reader's mutation campaign (analyzer/tests/fuzz_reader.rs) with a longer
# budget than CI's, in the release profile: run before a release. Every mutant must be
# read without a panic or a hang, and one that changes the file must be reported
# (damaged, cut short or refused) or read exactly as its seed.
#
#   scripts/fuzz-reader.sh            # 200000 mutants (a few minutes on two cores)
#   scripts/fuzz-reader.sh 1000000    # another budget
#
# Mutant i is the same on every run, and CI's mutants are the first of any campaign, so
# a failure names a mutant that any run of at least that many reproduces.
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUTRACE_FUZZ_MUTANTS="${1:-${GPUTRACE_FUZZ_MUTANTS:-200000}}"
exec cargo test --release -p gputrace-analyzer --test fuzz_reader -- --nocapture
