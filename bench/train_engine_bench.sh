#!/usr/bin/env bash
# The training engine on one GPU beside transformers (issue 15's benchmark):
# cohort's train job, then transformers' Qwen3ForCausalLM (SDPA, bf16
# autocast, fused AdamW) eager and under torch.compile, for each shape in
# SHAPES ("preset:micro:seq", default the three below); then cohort's per-op
# GPU time for the first shape. One JSON line per run, a table at the end.
#   bench/train_engine_bench.sh [STEPS]      (cohort and cohort's bench binaries on PATH)
# Environment: SHAPES, ATTENTION ("auto"; "auto math" adds the math path),
# BASELINES=0 (no PyTorch runs), COHORT_OLD_BIN (a second cohort build whose
# train job runs beside, for before/after comparisons).
set -uo pipefail
steps=${1:-30}
here=$(cd "$(dirname "$0")/.." && pwd)
work=${BENCH_DIR:-/tmp/cohort-engine-bench}
mkdir -p "$work"
rows="$work/rows.jsonl"
: >"$rows"
python3 -c "
import numpy as np
np.random.default_rng(0).integers(0, 151936, 8_000_000, dtype=np.uint32).tofile('$work/tokens.u32')"

run_cohort() {  # label cohort-binary preset micro seq attention
  local label=$1 bin=$2 preset=$3 micro=$4 seq=$5 attention=$6
  local name="engine-$label-$preset-$micro-$seq-$attention"
  rm -rf "$work/$name"
  local attention_key="attention = \"$attention\""
  [[ $label == old ]] && attention_key=""
  cat >"$work/$name.toml" <<TOML
[job]
name = "$name"
kind = "train"
output_dir = "$work/$name"
[model]
preset = "$preset"
max_seq = $seq
$attention_key
[train]
data = "$work/tokens.u32"
steps = $steps
micro_batch = $micro
global_batch = $micro
seq_len = $seq
precision = "bf16"
eval_fraction = 0.01
log_every = 5
resume = false
checkpoint_every = 1000000
TOML
  "$bin" run "$work/$name.toml" >"$work/$name.log" 2>&1 || {
    echo "{\"impl\":\"cohort-$label\",\"preset\":\"$preset\",\"error\":\"see $name.log\"}" | tee -a "$rows"
    tail -5 "$work/$name.log" >&2
    return
  }
  python3 - "$work/$name/metrics.jsonl" "$label" "$preset" "$micro" "$seq" "$attention" <<'PY' | tee -a "$rows"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows = rows[2:] or rows  # steps after warm-up
tps = statistics.median(r["tokens_per_s"] for r in rows)
print(json.dumps({"impl": "cohort " + sys.argv[2], "preset": sys.argv[3], "micro_batch": int(sys.argv[4]),
                  "seq": int(sys.argv[5]), "attention": sys.argv[6], "tokens_per_s": round(tps),
                  "mfu": round(statistics.median(r.get("mfu", 0) for r in rows), 4), "memory_gib": round(max(r["memory_mb"] for r in rows) / 1024, 2),
                  "final_loss": round(rows[-1]["loss"], 3)}))
PY
}

shapes=${SHAPES:-"qwen3-0.6b:8:1024 qwen3-0.6b:2:4096 qwen3-1.7b:8:1024"}
for shape in $shapes; do
  IFS=: read -r preset micro seq <<<"$shape"
  for attention in ${ATTENTION:-auto}; do run_cohort new cohort "$preset" "$micro" "$seq" "$attention"; done
  [[ -n ${COHORT_OLD_BIN:-} ]] && run_cohort old "$COHORT_OLD_BIN" "$preset" "$micro" "$seq" math
  if [[ ${BASELINES:-1} != 0 ]]; then
    modes=("" "--compile")
    # A mixture of experts: transformers' compiled grouped_mm experts take only bf16 weights (under
    # autocast with fp32 weights its fallback's backward fails), so the compiled run at cohort's
    # precision loops over the experts; the all-bf16 recipe (weights, gradients, AdamW state) beside.
    [[ $preset == *moe* ]] && modes=("" "--experts eager --compile" "--bf16-params --compile")
    for mode in "${modes[@]}"; do
      python3 "$here/bench/torch_train_baseline.py" --preset "$preset" --micro "$micro" --seq "$seq" \
        --steps "$steps" $mode 2>"$work/torch-$preset-$seq${mode// /}.log" | tee -a "$rows" ||
        tail -3 "$work/torch-$preset-$seq${mode// /}.log"
    done
  fi
done

first=${shapes%% *}
IFS=: read -r preset micro seq <<<"$first"
echo "per-op GPU time, $preset micro $micro seq $seq (ms per step):"
COHORT_CUDA_OP_TIMES=1 models_train_bench "$preset" "$micro" "$seq" 10 cuda auto 2>&1 | tail -25

python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# Each row against torch.compile on the same preset and shape, where it ran.
key = lambda r: (r.get("preset", "qwen3-0.6b"), r.get("micro_batch"), r.get("seq"))  # noqa: E731
compiled = {key(r): r["tokens_per_s"] for r in rows if r.get("impl") == "pytorch compile" and "error" not in r}
print(f"{'impl':<24}{'preset':<12}{'shape':<10}{'tokens/s':>10}{'MFU':>8}{'memory GiB':>12}{'vs compile':>12}")
for r in rows:
    if "error" in r:
        print(f"{r['impl']:<24}{r.get('preset', ''):<12}error"); continue
    shape = f"{r['micro_batch']}x{r['seq']}"
    mem = r.get("memory_gib", r.get("peak_mem_gib", 0))
    impl = r["impl"] + (f" ({r['attention']})" if "attention" in r else "")
    ratio = f"{r['tokens_per_s'] / compiled[key(r)]:.3f}x" if key(r) in compiled else "-"
    print(f"{impl:<24}{r.get('preset', 'qwen3-0.6b'):<12}{shape:<10}{r['tokens_per_s']:>10}{r['mfu']:>8.3f}{mem:>12}{ratio:>12}")
PY
