#!/usr/bin/env bash
# The test command: builds if needed, then runs the whole ctest suite and
# prints the output of any failing test. Non-zero on any failure.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L jobs
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build_dir=${BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure -j "${TEST_JOBS:-$(nproc)}" "$@"
