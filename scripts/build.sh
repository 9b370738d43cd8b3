#!/usr/bin/env bash
# Configures (once) and builds cohort into build/ (Release, ccache when present).
#   scripts/build.sh [extra cmake -D options...]
# BUILD_DIR overrides the folder; JOBS the parallelism (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f $build_dir/CMakeCache.txt || $# -gt 0 ]]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build_dir" -j "$jobs"
