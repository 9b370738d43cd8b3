#!/usr/bin/env bash
# The test command: builds if needed, then runs the whole ctest suite and
# prints the output of any failing test, then the fuzzers for a bounded time
# (scripts/fuzz.sh, 20 s each, one per core at a time; FUZZ_SECONDS=0 skips them;
# they build at low priority while the tests run). Non-zero on any failure.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L jobs (no fuzzing
#   when ctest arguments are given)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build.sh
build_dir=${BUILD_DIR:-build}
fuzzing=false
[[ $# -eq 0 && ${FUZZ_SECONDS:-20} != 0 ]] && fuzzing=true
fuzz_build=
if $fuzzing; then
  # The fuzz targets build at the lowest priority while the tests run, on
  # the cores the tests leave idle (a test waiting out a timeout, a serial
  # test): the tests keep their CPU, and the fuzzers start sooner after.
  fuzz_log=${FUZZ_BUILD_DIR:-build-fuzz}/test-sh-build.log
  mkdir -p "$(dirname "$fuzz_log")"
  # Its own process group, so that a failed test run stops the whole build.
  setsid nice -n 19 scripts/fuzz.sh --build-only >"$fuzz_log" 2>&1 &
  fuzz_build=$!
fi
tests_rc=0
(cd "$build_dir" && ctest --output-on-failure -j "${TEST_JOBS:-$(nproc)}" "$@") || tests_rc=$?
if [[ -n $fuzz_build ]]; then
  if ((tests_rc != 0)); then
    kill -- "-$fuzz_build" 2>/dev/null || true
    wait "$fuzz_build" 2>/dev/null || true
  elif ! wait "$fuzz_build"; then
    cat "$fuzz_log"
    exit 1
  fi
fi
((tests_rc == 0)) || exit "$tests_rc"
if $fuzzing; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
