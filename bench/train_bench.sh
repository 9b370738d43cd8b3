#!/usr/bin/env bash
# Training throughput of cohort's strategies on the Qwen3-0.6B shape, beside
# PyTorch DDP and FSDP2 in the same run (issue 7's and 8's GPU benchmark).
#   bench/train_bench.sh [GPUS] [STEPS]      (on a machine with GPUs; cohort on PATH)
# Prints one JSON line per run; rows for bench/RESULTS.md.
# Environment: STRATEGIES ("ddp fsdp2"; a strategy may carry a precision and
# a gather dtype: "fsdp2:bf16:fp32"), ONE_GPU=1 (also the 1-GPU ddp run that
# scaling is measured against), PRECISION (bf16), MICRO (8), BASELINES=0
# (no PyTorch runs).
set -uo pipefail
gpus=${1:-2}
steps=${2:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
work=${BENCH_DIR:-/tmp/cohort-train-bench}
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
# Random tokens over the Qwen3 vocabulary (the benchmark measures speed, not learning).
python3 -c "
import numpy as np
np.random.default_rng(0).integers(0, 151936, 8_000_000, dtype=np.uint32).tofile('$work/tokens.u32')"

run_cohort() {  # strategy[:precision[:param_dtype]] tp gpus micro
  local spec=$1 tp=$2 g=$3 micro=$4
  local s=${spec%%:*} rest precision=${PRECISION:-bf16} param_dtype=auto
  [[ $spec == *:* ]] && { rest=${spec#*:}; precision=${rest%%:*}; [[ $rest == *:* ]] && param_dtype=${rest#*:}; }
  local name="bench-$s-$precision-$param_dtype-tp$tp-g$g"
  rm -rf "$work/$name"
  cat >"$work/$name.toml" <<TOML
[job]
name = "$name"
kind = "train"
gpus_per_node = $g
output_dir = "$work/$name"
[model]
preset = "qwen3-0.6b"
max_seq = 1024
[parallel]
strategy = "$s"
tensor_parallel = $tp
param_dtype = "$param_dtype"
[train]
data = "$work/tokens.u32"
steps = $steps
micro_batch = $micro
seq_len = 1024
precision = "$precision"
eval_fraction = 0.01
log_every = 5
resume = false
checkpoint_every = 1000000
TOML
  cohort run "$work/$name.toml" >"$work/$name.log" 2>&1 || { echo "{\"impl\":\"cohort\",\"strategy\":\"$s\",\"tp\":$tp,\"gpus\":$g,\"error\":\"see $name.log\"}"; tail -5 "$work/$name.log" >&2; return; }
  python3 - "$work/$name/metrics.jsonl" "$s" "$tp" "$g" "$micro" "$precision" "$param_dtype" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows = rows[5:] or rows
tps = statistics.median(r["tokens_per_s"] for r in rows)
g = int(sys.argv[4])
print(json.dumps({"impl": "cohort", "strategy": sys.argv[2], "tp": int(sys.argv[3]), "gpus": g,
                  "micro_batch": int(sys.argv[5]), "precision": sys.argv[6], "param_dtype": sys.argv[7],
                  "skipped_steps": sum(1 for r in rows if r.get("skipped")), "tokens_per_s": round(tps), "tokens_per_s_per_gpu": round(tps / g),
                  "mfu": round(statistics.median(r.get("mfu", 0) for r in rows), 4),
                  "memory_mb": round(max(r["memory_mb"] for r in rows)), "final_loss": round(rows[-1]["loss"], 3)}))
PY
}

micro=${MICRO:-8}
# STRATEGIES narrows the cohort runs (e.g. "ddp fsdp2"); BASELINES=0 skips PyTorch.
if [[ -n ${STRATEGIES:-} ]]; then
  [[ ${ONE_GPU:-0} == 1 ]] && run_cohort ddp 1 1 "$micro"
  for s in $STRATEGIES; do run_cohort "$s" 1 "$gpus" "$micro"; done
else
  run_cohort ddp 1 1 "$micro"
  for s in ddp zero1 zero2 zero3 fsdp2; do run_cohort "$s" 1 "$gpus" "$micro"; done
  run_cohort ddp "$gpus" "$gpus" "$micro"
fi
[[ ${BASELINES:-1} == 0 ]] && exit 0
python3 "$here/bench/torch_train_baseline.py" --strategy single --micro "$micro" --steps "$steps"
torchrun --nproc_per_node "$gpus" "$here/bench/torch_train_baseline.py" --strategy ddp --micro "$micro" --steps "$steps" 2>/dev/null
torchrun --nproc_per_node "$gpus" "$here/bench/torch_train_baseline.py" --strategy fsdp2 --micro "$micro" --steps "$steps" 2>/dev/null
