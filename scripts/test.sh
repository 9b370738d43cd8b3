#!/usr/bin/env bash
# The test command: builds if needed, then runs the whole ctest suite and
# prints the output of any failing test, then the fuzzers for a bounded time
# (scripts/fuzz.sh, 15 s each, one per core at a time; FUZZ_SECONDS=0 skips them). Non-zero on any
# failure.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L jobs (no fuzzing
#   when ctest arguments are given)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build.sh
build_dir=${BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure -j "${TEST_JOBS:-$(nproc)}" "$@"
cd "$root"
fuzz_seconds=${FUZZ_SECONDS:-15}
if [[ $# -eq 0 && $fuzz_seconds != 0 ]]; then
  scripts/fuzz.sh "$fuzz_seconds"
fi
