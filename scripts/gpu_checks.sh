#!/usr/bin/env bash
# Runs cohort's GPU checks and benchmarks on a machine with GPUs, from a
# bundle of binaries built elsewhere (shared/tools/device-bundle into
# .device/cohort) or from a local build/.
#   scripts/gpu_checks.sh tests OUTDIR     GPU tests, the torchrun example, the quickstart, HF parity
#   scripts/gpu_checks.sh bench OUTDIR     collective, model, training and inference benchmarks
#   scripts/gpu_checks.sh precision OUTDIR mixed-precision tests, fp16/fp32 quickstarts, throughput by precision
#   scripts/gpu_checks.sh profile OUTDIR   GPU time per op of a training step (COHORT_CUDA_OP_TIMES;
#                                          PROFILE_PRESET, PROFILE_BATCHES)
#   scripts/gpu_checks.sh attention OUTDIR cuDNN's fused attention: its tests, then the training step
#                                          with cuDNN and with the flash kernels
#   scripts/gpu_checks.sh training OUTDIR  the training engine's checks: fused-block tests, 200-step loss
#                                          parity with PyTorch, then the engine benchmark beside transformers
#   scripts/gpu_checks.sh gpu_tests OUTDIR only the GPU test binaries (GPU_TESTS="a b" narrows them)
#   scripts/gpu_checks.sh redesign OUTDIR  spec × executor and GPU tests, HF parity, then training and decode
#                                          throughput before (BEFORE=folder of binaries) and after, alternating
#   scripts/gpu_checks.sh serve OUTDIR     the server's checks (bench/serve_checks.py): the KV cache sized by
#                                          GPU memory, structured output's cost on a 152k vocabulary
#   scripts/gpu_checks.sh prefill OUTDIR   prefill attention and the one-forward step: their GPU tests,
#                                          then offline prefill and bench/serve_speed.sh after and before
#                                          (BEFORE=folder of the earlier cohort-worker), one call
#   scripts/gpu_checks.sh lora OUTDIR      LoRA / QLoRA: NF4 expansion parity, bench/lora_bench.py beside PEFT
#   scripts/gpu_checks.sh adapters OUTDIR  served LoRA adapters: 64 streams with the base alone, then with
#                                          ADAPTER_COUNT (8) adapters taken in turn (bench/serve_speed.sh) on
#                                          ADAPTER_SHAPE's folder (qwen3-0.6b; qwen3-8b);
#                                          ADAPTER_PROFILE=1 adds the 64-row step's kernel times
#                                          (ADAPTER_SERVERS picks the servers: base adapters); first
#                                          bench/lora_rows_bench.cc, each adapted projection alone
#   scripts/gpu_checks.sh adapter_runs OUTDIR
#                                          served adapters' prompt rows: the LoRA parity and engine tests, then
#                                          a 2,048-token prompt and 64 streams with the base, 8 adapters in the
#                                          dense form, 8 through the LoRA kernels (ADAPTER_SHAPE, qwen3-8b)
#   scripts/gpu_checks.sh quant OUTDIR     quantized projections: kernel parity (the FP8 GEMM's too), each 8B
#                                          projection's µs, engine tokens, logits against transformers' FP8
#                                          model and fp32 (tests/infer/hf_quant_parity.py), decode tok/s per
#                                          format (QUANT_SHAPE, QUANT_BATCHES, QUANT_FORMATS)
#   scripts/gpu_checks.sh kv OUTDIR        the fp8 KV cache: kernel parity, engine tokens against the bf16
#                                          cache's, then 64 streams served with each (KV_SHAPE's folder)
#   scripts/gpu_checks.sh moe OUTDIR       mixtures of experts: sparse-layer kernel parity, graph engine tokens,
#                                          HF logits, the fused sparse training blocks (their test, tokens/s,
#                                          a 200-step curve against transformers), training beside
#                                          transformers (MOE_TRAIN=0 skips all training), then
#                                          Qwen3-30B-A3B-shaped decode (MOE_LAYERS, MOE_BATCHES); BEFORE=folder
#                                          of earlier binaries times their training and decode beside
#   scripts/gpu_checks.sh decode OUTDIR    the decode engine's checks: kernel parity, graph replay, tokens
#                                          against transformers at batch 1 and 64
#   scripts/gpu_checks.sh decode_bench OUTDIR
#                                          issue 16's benchmark: 0.6B at batch 1/8/64/256 beside transformers'
#                                          generate and continuous batching, contexts 128 and 2k, then the
#                                          1.7B and Llama-8B shapes (cohort only)
#   scripts/gpu_checks.sh decode_ab OUTDIR  the decode benchmark (cohort only) once per value in AB_VALUES of
#                                          the variable AB_VAR (default COHORT_INFER_ATTENTION: lanes tiles)
#   scripts/gpu_checks.sh decode_profile OUTDIR
#                                          per-kernel GPU time of decode steps under graph replay
#                                          (bench/kernel_times.cc), BATCHES="1,64" and NEW=128; PROFILE_ARGS
#                                          adds infer_bench.py arguments (--shape, --layers, --graphs-only);
#                                          PROFILE_WORK its folder (OUTDIR/work)
#   scripts/gpu_checks.sh decode_ncu OUTDIR
#                                          one decode kernel (KERNEL regex, default the attention) under
#                                          Nsight Compute after SKIP launches (5000), BATCHES=64 NEW=128;
#                                          NCU_ARGS adds infer_bench.py arguments (a prefill's kernel:
#                                          KERNEL=prefill_attention_kernel SKIP=120 BATCHES=16 NEW=2
#                                          NCU_ARGS="--prompt-lens 1984"; warm-up's launches come first)
#   scripts/gpu_checks.sh figures OUTDIR  the figures issues 37 and 40 are judged by (FIGURES picks parts:
#                                          serve06 offline serve8b serve8b_kv8 quant)
# Each step's output goes to OUTDIR/<step>.log; a summary line per step is printed.
set -u
phase=${1:?tests or bench}
out=${2:?output folder}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [[ -f .device/cohort/env.sh ]]; then
  source .device/cohort/env.sh
  # Test binaries find their sources and siblings where they were built
  # (/work/main, build/ or build-gpu/): point those paths at this copy and
  # the bundle.
  if [[ $root != /work/main && ! -e /work/main ]]; then mkdir -p /work && ln -s "$root" /work/main; fi
  # Binaries built in build/ or build-gpu/ look there for their helpers.
  for dir in build build-gpu; do
    [[ -e $dir/CMakeCache.txt ]] && continue  # a real build on this machine
    mkdir -p "$dir"
    ln -sfn "$root/.device/cohort/bin" "$dir/bin"
    ln -sfn "$root/.device/cohort/bin" "$dir/tests"
  done
  bin=$root/.device/cohort/bin
  tests=$bin
else
  bin=$root/build/bin
  tests=$root/build/tests
fi

# cuDNN (the fused attention, loaded at run time): the system's, or the one
# PyTorch's wheel carries, whose folder then joins the library path.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9 ' && [[ -z ${COHORT_CUDNN_LIBRARY:-} ]]; then
  cudnn_dir=$(python3 - <<'PY' 2>/dev/null
import glob, os, sys
for p in sys.path:
    for hit in glob.glob(os.path.join(p, "nvidia", "**", "libcudnn.so.9"), recursive=True):
        print(os.path.dirname(hit)); sys.exit()
PY
  )
  [[ -n $cudnn_dir ]] && export LD_LIBRARY_PATH="$cudnn_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "cuDNN: ${cudnn_dir:-not found}"
fi

step() {  # name command...   (STEP_TIMEOUT seconds bounds each step; default 300)
  local name=$1; shift
  local t0=$(date +%s)
  timeout "${STEP_TIMEOUT:-300}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(tail -1 "$out/$name.log" | cut -c1-120)"
}

if [[ $phase == tests ]]; then
  nvidia-smi -L
  for t in ${GPU_TESTS:-collective_gpu_test models_cuda_parity_test models_train_blocks_gpu_test models_train_kernels_gpu_test models_cudnn_attention_gpu_test models_decode_ops_parity_test models_fp8_gemm_gpu_test parallel_gpu_test infer_gpu_test}; do
    [[ -x $tests/$t ]] && step "$t" "$tests/$t"
  done
  step torchrun_example "$bin/cohort" run jobs/examples/torchrun.toml
  # The quickstart reads Debian's fortunes; a bundle may carry the file instead.
  data=/usr/share/games/fortunes/cookie
  [[ -f $data ]] || data=$root/.device/data/cookie
  step quickstart_gpu "$bin/cohort" run jobs/examples/quickstart.toml --set job.output_dir=/tmp/quickstart-gpu \
    --set train.data="$data"
  [[ -x $tests/models_hf_dump ]] && step hf_parity python3 tests/models/hf_parity.py --bin "$tests/models_hf_dump" --device cuda
  step hf_generate_parity python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker"
  step hf_generate_parity_tp2 python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker" --tp 2
elif [[ $phase == lora ]]; then
  # LoRA and QLoRA: the NF4 expansion kernels' parity, then bench/lora_bench.py (cohort bf16 and nf4
  # bases on the Llama-3.1-8B shape beside transformers + PEFT eager and compiled, and QLoRA on the
  # 70B shape; LORA_ARGS adds --skip-70b or --skip-peft).
  STEP_TIMEOUT=150 step lora_parity "$tests/models_decode_ops_parity_test" --gtest_filter='QuantGemv*:LoraRows*'
  grep -E "OK|FAILED|Failure" "$out/lora_parity.log" | head -20
  # Served adapters on the graph engine: its tokens against the CPU engine's.
  STEP_TIMEOUT=150 step lora_engine "$tests/infer_gpu_test" --gtest_filter='*ServedAdapters*'
  grep -E "parted|FAILED|Failure|Which is" "$out/lora_engine.log" | head -20
  STEP_TIMEOUT=${LORA_TIMEOUT:-540} step lora_bench python3 bench/lora_bench.py --cohort "$bin/cohort" \
    --work /tmp/lora-bench ${LORA_ARGS:-}
  grep -E "^\||^\{" "$out/lora_bench.log"
elif [[ $phase == adapters ]]; then
  # Served adapters' cost (issue 36): the 0.6B shape's server at 64 streams (512/256) with the base
  # alone, then with ADAPTER_COUNT (default 8) random rank-16 adapters that the requests take in turn.
  # First each adapted projection alone: the projection, then it and its LoRA kernel (bench/lora_rows_bench.cc).
  if [[ -x $bin/lora_rows_bench ]]; then
    STEP_TIMEOUT=120 step lora_rows_bench "$bin/lora_rows_bench" "${LORA_ROWS:-16,64}" 0,8 16 "${ADAPTER_SHAPE:-qwen3-0.6b}"
    grep -E "^\|" "$out/lora_rows_bench.log"
  fi
  shape=${ADAPTER_SHAPE:-qwen3-0.6b}
  folder=/tmp/$shape
  [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape "$shape" >"$out/folder.log" 2>&1
  # ADAPTER_PROFILE=1: each server under the kernel timer (bench/kernel_times.cc), then the kernels of
  # the graph replayed most, the 64-row decode step.
  for label in ${ADAPTER_SERVERS:-base adapters}; do
    count=0
    [[ $label == adapters ]] && count=${ADAPTER_COUNT:-8}
    (
      if [[ -n ${ADAPTER_PROFILE:-} ]]; then
        export KERNEL_TIMES="$out/kt-$label" LD_PRELOAD="$bin/libcohort_kernel_times.so"
      fi
      ADAPTERS="$count" LOADS=streams64 STEP_TIMES=1 STEP_TIMEOUT=200 step "serve_$label" \
        bench/serve_speed.sh "$bin/cohort-worker" "$folder" "$out/serve" "$label"
    )
    grep -E "^#|^[a-z0-9]+ \|" "$out/serve_$label.log"
    grep -E "decode steps of 64 rows: [0-9]+ timed" "$out/serve/$label.log" | cut -c1-140
    # The largest report: the server's (every process under the timer writes one).
    report=$(ls -S "$out/kt-$label".* 2>/dev/null | head -1)
    [[ -n $report ]] && awk '/^graph [0-9]+: [0-9]+ launches/ { keep = $3 + 0 > most; if (keep) { most = $3 + 0; text = "" } }
      keep && NF { text = text $0 "\n" } /^$/ { keep = 0 } END { printf "%s", text }' "$report" | head -24
    # The eager kernels: the prompt steps and the steps that mix prompt rows with decode rows.
    [[ -n $report ]] && sed -n '/outside graphs/,/^$/p' "$report" | head -24
  done
elif [[ $phase == adapter_runs ]]; then
  # Served adapters' prompt rows (issue 36): the LoRA kernels' parity tests and the engine test over every
  # prompt form, then on ADAPTER_SHAPE's folder (qwen3-8b) a 2,048-token prompt and 64 streams with the base
  # alone, with 8 adapters in the dense form (the default) and through the LoRA kernels
  # (COHORT_INFER_LORA_PROMPT=kernels, COHORT_INFER_LORA_DECODE=kernel); ADAPTER_LABELS picks and orders them
  # (base dense kernels; dense_decode / kernel_decode: every decode step in the dense form / the per-row kernel).
  STEP_TIMEOUT=120 step lora_parity "$tests/models_decode_ops_parity_test" --gtest_filter='LoraRows*'
  grep -E "^\[  (PASSED|FAILED|  OK) |Failure|Expected|Which is" "$out/lora_parity.log" | head -20
  STEP_TIMEOUT=150 step served_adapters_test "$tests/infer_gpu_test" --gtest_filter='*ServedAdapters*'
  grep -E "parted|PASSED|FAILED" "$out/served_adapters_test.log"
  shape=${ADAPTER_SHAPE:-qwen3-8b}
  folder=/tmp/$shape
  [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape "$shape" >"$out/folder.log" 2>&1
  for label in ${ADAPTER_LABELS:-base dense kernels}; do
    count=8 prompt="" decode=""
    [[ $label == base ]] && count=0
    [[ $label == kernels ]] && prompt=kernels decode=kernel
    [[ $label == dense_decode ]] && decode=dense
    [[ $label == kernel_decode ]] && decode=kernel
    ADAPTERS=$count LOADS=${ADAPTER_LOADS:-ttft2k+streams64} STEP_TIMES=1 COHORT_INFER_LORA_PROMPT=$prompt \
      COHORT_INFER_LORA_DECODE=$decode \
      STEP_TIMEOUT=200 step "serve_$label" bench/serve_speed.sh "$bin/cohort-worker" "$folder" "$out/serve" "$label"
    grep -E "^[a-z0-9]+ \||decode steps of 64 rows: [0-9]+ timed" "$out/serve_$label.log" | cut -c1-160
    # The eager steps (prompt chunks beside decode rows) and what the ITL budget made of them.
    grep -hE "eager steps of|steps took prompt tokens|around it" "$out/serve/$label.log" | cut -c16-260
  done
elif [[ $phase == quant ]]; then
  # Quantized projections: the kernels' parity and the engine's tokens
  # against the round-tripped bf16 model, then decode throughput per weight
  # format (QUANT_SHAPE, default qwen3-0.6b; QUANT_BATCHES, default 1,64).
  STEP_TIMEOUT=150 step quant_parity "$tests/models_decode_ops_parity_test" --gtest_filter='QuantGemv*'
  grep -E "OK|FAILED|Failure|Which is|Expected" "$out/quant_parity.log" | head -20
  # FP8 weights beyond 8 rows: the activation quantizer and cuBLASLt's block-scaled GEMM, then each
  # 8B projection alone per form and row count.
  STEP_TIMEOUT=120 step fp8_gemm "$tests/models_fp8_gemm_gpu_test"
  grep -E "PASSED|FAILED|SKIPPED|Failure" "$out/fp8_gemm.log" | head -10
  STEP_TIMEOUT=120 step quant_projections "$bin/quant_projection_bench" qwen3-8b 1,8,16,64,256
  grep -v '^|--' "$out/quant_projections.log" | head -60
  STEP_TIMEOUT=150 step quant_engine "$tests/infer_gpu_test" --gtest_filter='*Quantized*'
  grep -E "parted|FAILED|Failure" "$out/quant_engine.log" | head -20
  # A checkpoint quantized by transformers (FineGrainedFP8Config) and each quantize-on-load format
  # against the fp32 model of the same weights.
  STEP_TIMEOUT=240 step quant_hf_parity python3 tests/infer/hf_quant_parity.py --worker "$bin/cohort-worker"
  grep -E "^[a-z0-9-]+:|^  " "$out/quant_hf_parity.log" | head -30
  STEP_TIMEOUT=${QUANT_TIMEOUT:-400} step quant_bench python3 bench/infer_bench.py --worker "$bin/cohort-worker" \
    --no-transformers --shape "${QUANT_SHAPE:-qwen3-0.6b}" --batches "${QUANT_BATCHES:-1,64}" --prompt-lens 128 \
    --new 128 --quantize "${QUANT_FORMATS:-bf16,int4,int8,fp8}" --work /tmp/quant-bench
  grep -E "^\|" "$out/quant_bench.log"
elif [[ $phase == kv ]]; then
  # The fp8 KV cache (models/ops/kv_fp8.h): its kernels against the CPU references on the codes' values,
  # the engine's tokens against the bf16 cache's and twice the blocks in the same memory, then 64 streams
  # served with each cache by GPU memory (the startup line gives each cache's positions).
  STEP_TIMEOUT=150 step kv_parity "$tests/models_decode_ops_parity_test" --gtest_filter='*KvFp8*'
  grep -E "OK|FAILED|Failure|Which is|Expected" "$out/kv_parity.log" | head -20
  STEP_TIMEOUT=150 step kv_engine "$tests/infer_gpu_test" --gtest_filter='*Fp8Kv*'
  grep -E "parted|FAILED|Failure|Which is" "$out/kv_engine.log" | head -20
  folder=/tmp/${KV_SHAPE:-qwen3-0.6b}
  [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape "${KV_SHAPE:-qwen3-0.6b}" \
    >"$out/folder.log" 2>&1
  for dtype in bf16 fp8; do
    KV_DTYPE=$dtype LOADS=${KV_LOADS:-streams64} STEP_TIMEOUT=200 step "serve_kv_$dtype" bench/serve_speed.sh \
      "$bin/cohort-worker" "$folder" "$out/serve" "kv-$dtype"
    grep -E "^#|^[a-z0-9]+ \|" "$out/serve_kv_$dtype.log"
    grep -E "KV cache of|fp8 KV cache scales" "$out/serve/kv-$dtype.log" | cut -c1-240
  done
elif [[ $phase == moe ]]; then
  # Mixtures of experts: the graph engine's sparse-layer kernels against their CPU reference, its
  # tokens against the CPU engine's, the routing ops, logits against transformers (qwen3_moe,
  # mixtral), then decode on the Qwen3-30B-A3B shape (MOE_LAYERS of its 48 layers, default 12: the
  # disk holds the random folder) on the graph engine and op by op.
  STEP_TIMEOUT=150 step moe_parity "$tests/models_decode_ops_parity_test" --gtest_filter='MoeExperts*'
  grep -E "OK|FAILED|Failure|Which is|Expected" "$out/moe_parity.log" | head -20
  STEP_TIMEOUT=150 step moe_engine "$tests/infer_gpu_test" --gtest_filter='*MixtureOfExperts*'
  grep -E "parted|FAILED|Failure|Which is" "$out/moe_engine.log" | head -20
  STEP_TIMEOUT=150 step moe_routing "$tests/models_moe_gpu_test"
  [[ -x $tests/models_hf_dump ]] && step hf_parity python3 tests/models/hf_parity.py --bin "$tests/models_hf_dump" --device cuda
  grep -E "moe|mixtral" "$out/hf_parity.log" | head -8
  if [[ ${MOE_TRAIN:-1} != 0 ]]; then
    # The sparse layers in the fused training blocks (the default; COHORT_TRAIN_BLOCKS=dense: op by op): their equivalence
    # test, tokens/s against the op-by-op sparse layers, and the 200-step loss curve of a small
    # Qwen3-MoE against transformers.
    STEP_TIMEOUT=150 step moe_blocks_test "$tests/models_train_blocks_gpu_test" --gtest_filter='*Sparse*:*OpByOp*'
    grep -E "OK|FAILED|Failure|worst gradient" "$out/moe_blocks_test.log" | head -12
    for blocks in fused dense; do
      COHORT_TRAIN_BLOCKS=$blocks STEP_TIMEOUT=150 step "moe_train_$blocks" "$bin/models_train_bench" \
        qwen3-moe-2.4b-a0.6b 8 1024 8 cuda
    done
    # BEFORE (a folder of earlier binaries): its fused blocks beside, on this machine.
    if [[ -n ${BEFORE:-} ]]; then
      STEP_TIMEOUT=150 step moe_train_fused_before "$BEFORE/models_train_bench" qwen3-moe-2.4b-a0.6b 8 1024 8 cuda
    fi
    # The experts' forward and input-gradient GEMMs as cuBLAS grouped calls against one call an expert.
    COHORT_MOE_GEMMS=grouped STEP_TIMEOUT=150 step moe_train_grouped "$bin/models_train_bench" \
      qwen3-moe-2.4b-a0.6b 8 1024 8 cuda
    STEP_TIMEOUT=240 step moe_finetune_parity python3 tests/train/finetune_parity.py \
      --worker "$bin/cohort-worker" --shape qwen3-moe-small --steps 200 --work /tmp/moe-parity
    # Training on the qwen3-moe-2.4b-a0.6b preset beside transformers eager and compiled (issue 38).
    PATH=$bin:$PATH SHAPES=qwen3-moe-2.4b-a0.6b:8:1024 STEP_TIMEOUT=${MOE_TRAIN_TIMEOUT:-540} \
      step moe_train_bench bench/train_engine_bench.sh 20
    tail -6 "$out/moe_train_bench.log"
  fi
  for which in after ${BEFORE:+before}; do
    dir=$bin; [[ $which == before ]] && dir=$BEFORE
    STEP_TIMEOUT=${MOE_TIMEOUT:-420} step "moe_bench_$which" python3 bench/infer_bench.py --worker "$dir/cohort-worker" \
      --no-transformers --graphs-only --shape qwen3-30b-a3b --layers "${MOE_LAYERS:-12}" \
      --batches "${MOE_BATCHES:-1,64}" --prompt-lens 128 --new 128 --work /tmp/moe-bench
    grep -E "^\|" "$out/moe_bench_$which.log"
  done
elif [[ $phase == gpu_tests ]]; then
  # Only the GPU test binaries (GPU_TESTS narrows them), one summary line each.
  for t in ${GPU_TESTS:-collective_gpu_test models_cuda_parity_test models_train_blocks_gpu_test models_train_kernels_gpu_test models_cudnn_attention_gpu_test models_decode_ops_parity_test models_fp8_gemm_gpu_test parallel_gpu_test infer_gpu_test}; do
    [[ -x $tests/$t ]] && step "$t" "$tests/$t"
  done
elif [[ $phase == serve ]]; then
  STEP_TIMEOUT=${SERVE_TIMEOUT:-420} step serve_checks python3 bench/serve_checks.py --worker "$bin/cohort-worker" \
    --work /tmp/serve-checks
  grep -E "^(by_memory|too_small|structured|serve checks)" "$out/serve_checks.log"
elif [[ $phase == prefill ]]; then
  for t in models_decode_ops_parity_test infer_gpu_test models_spec_executors_gpu_test; do
    STEP_TIMEOUT=150 step "$t" "$tests/$t"
    grep -E "FAILED|Failure|Which is" "$out/$t.log" | head -20
  done
  folder=/tmp/qwen3-0.6b
  [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape qwen3-0.6b >"$out/folder.log" 2>&1
  for which in after ${BEFORE:+before}; do
    dir=$bin; [[ $which == before ]] && dir=$BEFORE
    STEP_TIMEOUT=200 step "offline_$which" python3 bench/infer_bench.py --worker "$dir/cohort-worker" \
      --no-transformers --batches 1,64 --prompt-lens 512,1984 --new 32 --work "/tmp/offline-$which"
    tail -6 "$out/offline_$which.log"
    STEP_TIMEOUT=300 step "serve_$which" bench/serve_speed.sh "$dir/cohort-worker" "$folder" "$out/serve" "$which"
    grep -E "^#|^[a-z0-9]+ \||prefix_cache|decode steps" "$out/serve_$which.log"
  done
  # Variants of the server, after only: SERVE_VARIANTS="NAME:VAR=VALUE,VAR=VALUE ..." (serve_speed.sh's
  # variables), e.g. "nocache:PREFIX_CACHING=false small:KV_TOKENS=131072,LOADS=streams64".
  for variant in ${SERVE_VARIANTS:-}; do
    name=${variant%%:*}
    STEP_TIMEOUT=300 step "serve_$name" env $(tr , " " <<<"${variant#*:}") bench/serve_speed.sh "$bin/cohort-worker" "$folder" \
      "$out/serve" "$name"
    grep -E "^#|^[a-z0-9]+ \||decode steps" "$out/serve_$name.log"
  done
  # The server at other step budgets (SERVE_BUDGETS="2048 4096"), after only.
  for budget in ${SERVE_BUDGETS:-}; do
    MAX_BATCHED=$budget STEP_TIMEOUT=300 step "serve_after_$budget" bench/serve_speed.sh "$bin/cohort-worker" \
      "$folder" "$out/serve" "after-$budget"
    grep -E "^#|^[a-z0-9]+ \||decode steps" "$out/serve_after_$budget.log"
  done
  # Where a prefill's time goes: 16 prompts of 1,984 tokens, 2 new, under
  # the CUPTI kernel timer (eager kernels' totals, warm-up's included).
  preload=$bin/libcohort_kernel_times.so
  if [[ -f $preload ]]; then
    wrapper=$out/worker-with-kernel-times
    printf '#!/bin/sh\nexport KERNEL_TIMES=%s LD_PRELOAD=%s\nexec %s "$@"\n' "$out/kernel-times" "$preload" \
      "$bin/cohort-worker" >"$wrapper"
    chmod +x "$wrapper"
    STEP_TIMEOUT=150 step prefill_profiled python3 bench/infer_bench.py --worker "$wrapper" --no-transformers \
      --batches 16 --prompt-lens 1984 --new 2 --work "$out/profile"
    for f in "$out"/kernel-times.*.txt; do sed -n '/outside graphs/,$p' "$f" | head -30; done
  fi
elif [[ $phase == decode ]]; then
  STEP_TIMEOUT=120 step models_decode_ops_parity_test "$tests/models_decode_ops_parity_test"
  grep -E "FAILED|Failure|Which is|splits|paged|contiguous" "$out/models_decode_ops_parity_test.log" | head -20
  STEP_TIMEOUT=150 step infer_gpu_test "$tests/infer_gpu_test"
  grep -E "FAILED|Failure|SKIPPED" "$out/infer_gpu_test.log" | head -10
  STEP_TIMEOUT=150 step hf_generate_parity_b1 python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker" --batch 1
  STEP_TIMEOUT=150 step hf_generate_parity_b64 python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker" \
    --sections bf16 --prompts 64 --batch 64
elif [[ $phase == decode_bench ]]; then
  # Each step's table is the last lines of its log; later steps are
  # skipped by their own timeouts if the earlier ones ran long.
  w=$bin/cohort-worker
  STEP_TIMEOUT=240 step bench_ctx128 python3 bench/infer_bench.py --worker "$w" --batches 1,8,64,256 \
    --prompt-lens 64 --new 128 --cb --work /tmp/bench128
  tail -7 "$out/bench_ctx128.log"
  STEP_TIMEOUT=150 step bench_ctx2k python3 bench/infer_bench.py --worker "$w" --batches 1,64 \
    --prompt-lens 1984 --new 128 --work /tmp/bench2k
  tail -5 "$out/bench_ctx2k.log"
  grep -h -E "engine load|plans tuned" /tmp/bench128/*.log /tmp/bench2k/*.log | cut -c1-200
  for shape in qwen3-1.7b llama3.1-8b; do
    STEP_TIMEOUT=150 step "bench_$shape" python3 bench/infer_bench.py --worker "$w" --shape "$shape" \
      --batches 1,64 --prompt-lens 64 --new 128 --no-transformers --work "/tmp/bench-$shape"
    tail -4 "$out/bench_$shape.log"
    rm -rf "/tmp/bench-$shape"
  done
elif [[ $phase == decode_ab ]]; then
  # The same decode benchmark (cohort only) once per value of one variable:
  # AB_VAR (default COHORT_INFER_ATTENTION) set to each of AB_VALUES, at
  # contexts 128 (BATCHES, default 1,64,256) and 2k (batches 1 and 64).
  var=${AB_VAR:-COHORT_INFER_ATTENTION}
  for value in ${AB_VALUES:-lanes tiles}; do
    STEP_TIMEOUT=200 step "ab_${value}_ctx128" env "$var=$value" COHORT_INFER_STEP_TIMES=1 \
      python3 bench/infer_bench.py --worker "$bin/cohort-worker" --no-transformers \
      --batches "${BATCHES:-1,64,256}" --prompt-lens 64 --new 128 --work "/tmp/ab-$value-128"
    tail -5 "$out/ab_${value}_ctx128.log"
    grep -h "decode steps of" /tmp/ab-$value-128/*.log | cut -c1-200
    STEP_TIMEOUT=150 step "ab_${value}_ctx2k" env "$var=$value" python3 bench/infer_bench.py \
      --worker "$bin/cohort-worker" --no-transformers --batches 1,64 --prompt-lens 1984 --new 128 \
      --work "/tmp/ab-$value-2k"
    tail -3 "$out/ab_${value}_ctx2k.log"
  done
elif [[ $phase == decode_profile ]]; then
  # The infer job under the CUPTI kernel timer: one report per worker, each
  # graph (decode bucket) with its kernels' time per launch.
  preload=$bin/libcohort_kernel_times.so
  [[ -f $preload ]] || preload=$root/build/bench/libcohort_kernel_times.so
  wrapper=$out/worker-with-kernel-times
  printf '#!/bin/sh\nexport KERNEL_TIMES=%s COHORT_INFER_STEP_TIMES=1 LD_PRELOAD=%s\nexec %s "$@"\n' \
    "$out/kernel-times" "$preload" "$bin/cohort-worker" >"$wrapper"
  chmod +x "$wrapper"
  # PROFILE_WORK: infer_bench's folder (the model's too), outside OUTDIR for a large model.
  work=${PROFILE_WORK:-$out/work}
  STEP_TIMEOUT=300 step infer_bench_profiled python3 bench/infer_bench.py --worker "$wrapper" \
    --no-transformers --batches "${BATCHES:-1,64}" --new "${NEW:-128}" --work "$work" ${PROFILE_ARGS:-}
  tail -8 "$out/infer_bench_profiled.log"
  grep -h -E "engine load|warm-up|plans tuned|decode steps of" "$work"/*.log | cut -c1-300
  # The most replayed graph's table (the decode bucket the benchmark ran).
  for f in "$out"/kernel-times.*.txt; do
    python3 - "$f" <<'PY'
import re, sys
blocks = [b for b in re.split(r"\n(?=graph \d+:)", open(sys.argv[1]).read()) if b.startswith("graph")]
if blocks:
    best = max(blocks, key=lambda b: int(re.match(r"graph \d+: (\d+) launches", b).group(1)))
    print("\n".join(line[:160] for line in best.splitlines()[:40]))
PY
  done
elif [[ $phase == decode_ncu ]]; then
  # One decode-step kernel (KERNEL, a regex; default the attention) under
  # Nsight Compute, past the warm-up: throughput, memory and warp stalls.
  wrapper=$out/worker-under-ncu
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  printf '#!/bin/sh\nexec '"$ncu"' --target-processes all -k "regex:%s" --launch-skip %s --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --log-file %s %s "$@"\n' \
    "${KERNEL:-decode_attention}" "${SKIP:-5000}" "$out/ncu.txt" "$bin/cohort-worker" >"$wrapper"
  chmod +x "$wrapper"
  STEP_TIMEOUT=240 step infer_under_ncu python3 bench/infer_bench.py --worker "$wrapper" \
    --no-transformers --batches "${BATCHES:-64}" --new "${NEW:-128}" --work "$out/work" ${NCU_ARGS:-}
  # The launch measured: its grid says whether SKIP passed warm-up's small shapes.
  grep -E "^  [a-z_].*\([0-9]+, [0-9]+, [0-9]+\)x" "$out/ncu.txt" | head -2
  grep -E "Duration|Throughput|Memory \[|DRAM|L2 Hit|Warp Cycles|Stall|Achieved|Registers|Block Limit|Issued" "$out/ncu.txt" | head -60
elif [[ $phase == attention ]]; then
  # cuDNN's fused attention against the CPU reference and the flash kernels,
  # then the training step with each (models_train_bench, per-op times).
  STEP_TIMEOUT=120 step models_cudnn_attention_gpu_test "$tests/models_cudnn_attention_gpu_test"
  grep -E "cuDNN|FAILED|Failure|rror" "$out/models_cudnn_attention_gpu_test.log" | head -20
  STEP_TIMEOUT=60 step models_train_kernels_gpu_test "$tests/models_train_kernels_gpu_test"
  STEP_TIMEOUT=180 step models_train_blocks_gpu_test "$tests/models_train_blocks_gpu_test"
  grep -E "attention:|FAILED|Failure" "$out/models_train_blocks_gpu_test.log" | head -30
  for shape in ${ATTENTION_SHAPES:-8:1024 2:4096}; do
    IFS=: read -r micro seq <<<"$shape"
    for attention in cudnn flash; do
      # COHORT_CUDA_OP_TIMES takes any value as on: passed only with OP_TIMES=1.
      times=()
      [[ ${OP_TIMES:-0} == 1 ]] && times=(env COHORT_CUDA_OP_TIMES=1)
      STEP_TIMEOUT=120 step "train_${attention}_${micro}x$seq" \
        "${times[@]}" "$bin/models_train_bench" qwen3-0.6b "$micro" "$seq" 12 cuda "$attention"
      grep -E "tokens_per_s|attention" "$out/train_${attention}_${micro}x$seq.log" | cut -c1-400
    done
  done
elif [[ $phase == training ]]; then
  # Issue 15's checks, most important first: the fused blocks against the
  # reference, the per-op parity tests, 200 steps against PyTorch, then the
  # benchmark (SHAPES narrows it; see bench/train_engine_bench.sh).
  STEP_TIMEOUT=120 step models_train_blocks_gpu_test "$tests/models_train_blocks_gpu_test"
  STEP_TIMEOUT=60 step models_train_kernels_gpu_test "$tests/models_train_kernels_gpu_test"
  STEP_TIMEOUT=120 step models_cuda_parity_test "$tests/models_cuda_parity_test"
  STEP_TIMEOUT=300 step finetune_parity python3 tests/train/finetune_parity.py --worker "$bin/cohort-worker" --steps 200
  PATH=$bin:$PATH STEP_TIMEOUT=900 step train_engine_bench bench/train_engine_bench.sh 25
  tail -12 "$out/train_engine_bench.log"
elif [[ $phase == redesign ]]; then
  # The model-definition redesign's closing checks: the spec × executor
  # test and the GPU suites, HF parity, then training and decode throughput
  # before and after in one call, alternating (BEFORE: a folder holding the
  # earlier commit's cohort-worker and models_train_bench).
  for t in models_spec_executors_gpu_test models_cuda_parity_test models_train_blocks_gpu_test \
           models_decode_ops_parity_test infer_gpu_test; do
    STEP_TIMEOUT=150 step "$t" "$tests/$t"
    grep -E "^spec |FAILED|Failure" "$out/$t.log" | head -40
  done
  STEP_TIMEOUT=150 step hf_parity python3 tests/models/hf_parity.py --bin "$tests/models_hf_dump" --device cuda
  STEP_TIMEOUT=150 step hf_generate_parity python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker"
  before=${BEFORE:?BEFORE: the earlier binaries}
  for round in 1 2; do
    for which in before after; do
      dir=$bin; [[ $which == before ]] && dir=$before
      STEP_TIMEOUT=120 step "train_${which}_$round" "$dir/models_train_bench" qwen3-0.6b 8 1024 12
      tail -3 "$out/train_${which}_$round.log"
      STEP_TIMEOUT=150 step "decode_${which}_$round" python3 bench/infer_bench.py --worker "$dir/cohort-worker" \
        --no-transformers --batches 1,64 --prompt-lens 64 --new 128 --work "/tmp/bench-$which-$round"
      tail -4 "$out/decode_${which}_$round.log"
    done
  done
elif [[ $phase == figures ]]; then
  # The figures issues 37 and 40 are judged by, in one call on one card. FIGURES picks and orders the
  # parts (default "serve06 offline serve8b quant"):
  #   serve06  the 0.6B shape's server, every bench/serve_speed.sh load, then transformers' continuous
  #            batching on the same folder (64 requests of 512/256)
  #   offline  the offline job's prefill and decode, 64 prompts of 512
  #   serve8b  the 8B shape's server: 64 streams of 512/256 and mixed lengths (serve8b_kv8: the same
  #            with serve.kv_cache_dtype = "fp8"; serve8b_itlN: with serve.itl_target_ms = N)
  #   quant    decode on the Llama-3.1-8B shape per weight format at batch 1 and 64 (QUANT_FORMATS,
  #            default int4,fp8,bf16,fp8+kv8), each with its share of the bandwidth bound
  for part in ${FIGURES:-serve06 offline serve8b quant}; do
    case $part in
      serve06)
        folder=/tmp/qwen3-0.6b
        [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape qwen3-0.6b >"$out/folder06.log" 2>&1
        STEP_TIMEOUT=300 step serve06 bench/serve_speed.sh "$bin/cohort-worker" "$folder" "$out/serve" qwen3-0.6b
        grep -E "^#|^[a-z0-9]+ \||prefix_cache|server TTFT" "$out/serve06.log"
        grep -hE "around it" "$out/serve/qwen3-0.6b.log" | cut -c16-200
        STEP_TIMEOUT=150 step transformers_cb06 python3 bench/transformers_cb_bench.py "$folder" --requests 64 \
          --prompt 512 --output 256
        tail -1 "$out/transformers_cb06.log" ;;
      offline)
        STEP_TIMEOUT=200 step offline06 python3 bench/infer_bench.py --worker "$bin/cohort-worker" --no-transformers \
          --batches 64 --prompt-lens 512 --new 32 --work /tmp/offline06
        grep -E "^\|" "$out/offline06.log" ;;
      serve8b|serve8b_kv8|serve8b_itl*)
        folder=/tmp/qwen3-8b kv="" itl=""
        [[ $part == serve8b_kv8 ]] && kv=fp8
        [[ $part == serve8b_itl* ]] && itl=${part#serve8b_itl}
        [[ -f $folder/config.json ]] || python3 bench/make_hf_folder.py "$folder" --shape qwen3-8b >"$out/folder8b.log" 2>&1
        ITL_TARGET=$itl KV_DTYPE=$kv LOADS=streams64+mixed64 STEP_TIMEOUT=300 step "$part" bench/serve_speed.sh "$bin/cohort-worker" \
          "$folder" "$out/serve" "$part"
        grep -E "^#|^[a-z0-9]+ \||server TTFT" "$out/$part.log"
        grep -hE "around it" "$out/serve/$part.log" | cut -c16-200 ;;
      quant)
        rm -rf /tmp/qwen3-8b  # the disk for the quantized folders
        STEP_TIMEOUT=${QUANT_TIMEOUT:-420} step quant8b python3 bench/infer_bench.py --worker "$bin/cohort-worker" \
          --no-transformers --shape llama3.1-8b --batches 1,64 --prompt-lens 512 --new 128 \
          --quantize "${QUANT_FORMATS:-int4,fp8,bf16,fp8+kv8}" --work /tmp/quant8b
        grep -E "^\|" "$out/quant8b.log" ;;
      *) echo "FIGURES: unknown part '$part' (serve06, offline, serve8b, serve8b_kv8, quant)" ;;
    esac
  done
  rm -rf /tmp/qwen3-8b
elif [[ $phase == final ]]; then
  # The closing run: what the issues' GPU checks need, most important first.
  STEP_TIMEOUT=60 step gpu_check "$bin/cohort" run jobs/examples/command_gpu_check.toml
  grep -E "rank|GPU|sum" "$out/gpu_check.log" | head -20
  STEP_TIMEOUT=150 step infer_gpu_test "$tests/infer_gpu_test"
  STEP_TIMEOUT=120 step hf_generate_parity python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker"
  STEP_TIMEOUT=120 step hf_generate_parity_tp2 python3 tests/infer/hf_generate_parity.py --worker "$bin/cohort-worker" --tp 2
  data=/usr/share/games/fortunes/cookie
  [[ -f $data ]] || data=$root/.device/data/cookie
  STEP_TIMEOUT=60 step quickstart_gpu "$bin/cohort" run jobs/examples/quickstart.toml --set job.output_dir=/tmp/quickstart-gpu \
    --set train.data="$data"
  STEP_TIMEOUT=60 step export_parity python3 tests/train/export_transformers_parity.py --cohort "$bin/cohort" \
    --dump "$tests/models_hf_dump" --run-dir /tmp/quickstart-gpu
  STEP_TIMEOUT=20 step collective_bench "$bin/collective_bench" --fork 2 --min-bytes 8 --max-bytes 1073741824
  PATH=$bin:$PATH STRATEGIES="ddp fsdp2" BASELINES=0 STEP_TIMEOUT=280 step train_200 bench/train_bench.sh 2 200
  STEP_TIMEOUT=150 step infer_bench python3 bench/infer_bench.py --worker "$bin/cohort-worker"
  PATH=$bin:$PATH STEP_TIMEOUT=120 step multinode bench/multinode_gpu.sh qwen3-0.6b 40
elif [[ $phase == precision ]]; then
  # Mixed precision: GPU equivalence (bf16 gathers, fp16 with a loss scale),
  # CUDA parity, the quickstart in fp16 and fp32, and training throughput by
  # strategy, precision and gather dtype.
  STEP_TIMEOUT=300 step parallel_gpu_test "$tests/parallel_gpu_test"
  grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |Failure|actual" "$out/parallel_gpu_test.log" | grep -v SKIPPED | head -40
  STEP_TIMEOUT=120 step models_cuda_parity_test "$tests/models_cuda_parity_test"
  data=/usr/share/games/fortunes/cookie
  [[ -f $data ]] || data=$root/.device/data/cookie
  for p in fp16 fp32; do
    STEP_TIMEOUT=90 step "quickstart_$p" "$bin/cohort" run jobs/examples/quickstart.toml --set job.output_dir=/tmp/quickstart-$p \
      --set train.data="$data" --set train.precision=$p --set train.log_every=100
    grep -E "step (1|100|500|1000)/|skipped|GEMMs" "$out/quickstart_$p.log" | head -8
  done
  PATH=$bin:$PATH ONE_GPU=1 STRATEGIES="${PRECISION_STRATEGIES:-ddp zero3 fsdp2 fsdp2:bf16:fp32 ddp:fp16 fsdp2:fp16}" \
    BASELINES=0 STEP_TIMEOUT=480 step train_precision bench/train_bench.sh 2 20
  cat "$out/train_precision.log"
elif [[ $phase == profile ]]; then
  # Where a training step's GPU time goes: models_train_bench (1 GPU, forward
  # + backward + AdamW) with the CUDA backend's per-op timers; PROFILE_PRESET
  # (qwen3-0.6b) names the preset, qwen3-moe-2.4b-a0.6b for the sparse layers.
  for batch in ${PROFILE_BATCHES:-4 8}; do
    COHORT_CUDA_OP_TIMES=1 STEP_TIMEOUT=120 step "op_times_b$batch" "$bin/models_train_bench" \
      "${PROFILE_PRESET:-qwen3-0.6b}" "$batch" 1024 5
    cat "$out/op_times_b$batch.log"
  done
elif [[ $phase == bench ]]; then
  step collective_bench "$bin/collective_bench" --fork 2
  step models_train_bench "$bin/models_train_bench" qwen3-0.6b 4 1024
  step models_torch_bench python3 bench/models_torch_bench.py --batch 4 --seq 1024
  PATH=$bin:$PATH step train_bench bench/train_bench.sh 2 20
  step infer_bench python3 bench/infer_bench.py --worker "$bin/cohort-worker"
fi
