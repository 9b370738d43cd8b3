#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (address and undefined
# behaviour sanitizers) into build-fuzz/ and runs each for a bounded time,
# starting from its seed corpus in fuzz/corpus/NAME. A crash, leak, timeout
# or sanitizer report fails the script; the reproducer is kept as
# build-fuzz/crashes/NAME-* (run it again with build-fuzz/NAME_fuzz FILE).
#   scripts/fuzz.sh [seconds per target, default 20] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
((${#targets[@]})) || targets=(codec job_file override store_protocol http safetensors quantized_tensors tokenizer checkpoint_index
                                chat_template config_json openai_request json_grammar peft_config)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  CXX=clang++ cmake -S fuzz -B "$build_dir" "${generator[@]}" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if ! cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" -- $(printf '%s_fuzz ' "${targets[@]}") \
    >"$build_dir/build.log" 2>&1; then
  echo "fuzz: building the targets failed:"
  grep -E -A3 "error|FAILED" "$build_dir/build.log" | head -40
  exit 1
fi
mkdir -p "$build_dir/crashes"
# One libFuzzer process per core (FUZZ_JOBS, default nproc): each is a
# single thread, so the targets run side by side and the wall time is
# about targets / cores × seconds. Results are reported in target order.
run_one() {  # target
  local t=$1 work="$build_dir/corpus/$1"  # grows across runs; the repo's seeds stay as they are
  local rc=0
  mkdir -p "$work"
  "$build_dir/${t}_fuzz" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build_dir/crashes/$t-" >"$build_dir/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build_dir/$t.rc"
}
jobs_max=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  rm -f "$build_dir/$t.rc"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  run_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  log="$build_dir/$t.log"
  if [[ $(cat "$build_dir/$t.rc" 2>/dev/null) == 0 ]]; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t: ${runs} runs in ${seconds} s, nothing found"
  else
    echo "fuzz: $t FAILED; reproducer: $(ls -t "$build_dir"/crashes/"$t"-* 2>/dev/null | head -1)"
    tail -40 "$log"
    failed+=("$t")
  fi
done
((${#failed[@]} == 0)) || { echo "fuzz: failures in ${failed[*]}"; exit 1; }
