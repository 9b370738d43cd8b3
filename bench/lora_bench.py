#!/usr/bin/env python3
"""LoRA and QLoRA training speed and memory: cohort beside transformers + PEFT.

For the GPU machine (one H200), one call. The Llama-3.1-8B shape with random
weights, LoRA rank 16 (alpha 32) on all linear layers, micro-batch 4 x 2048
random tokens, AdamW on the adapters:

  cohort    a train job on the `llama-3.1-8b` preset, [lora] base_dtype bf16,
            then nf4 (QLoRA); tokens/s is the median of the steps after the
            first 3 (metrics.jsonl), memory its largest memory_mb
  PEFT      transformers' LlamaForCausalLM in bf16 with peft.get_peft_model
            (target_modules "all-linear"), eager and torch.compile; tokens/s
            over the timed steps, memory torch.cuda.max_memory_reserved
  QLoRA 70B cohort's nf4 base on the `llama-3.1-70b` preset (micro 1 x 2048,
            activation_checkpointing = "full", as QLoRA runs with gradient
            checkpointing: every activation of 80 layers would not fit):
            tokens/s and memory (the base is quantized block by block as it
            is drawn, so nothing of 140 GB exists at once)

  python3 bench/lora_bench.py --cohort build/bin/cohort [--steps 12] [--skip-70b] [--skip-8b] [--skip-peft]
      [--bases bf16,nf4] [--micro 4] [--peft eager,compile] [--json out.json]

(--micro 2 fits the 8B runs on an 80 GB card; the issue's shape is micro 4 on one H200.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VOCAB = 128256


def random_tokens(path, count):
    import numpy as np
    np.random.default_rng(0).integers(0, VOCAB, count, dtype=np.uint32).tofile(path)


def run_cohort(cohort, work, name, preset, base, micro, steps, tokens_file, checkpointing="none"):
    out = os.path.join(work, name)
    job = os.path.join(work, name + ".toml")
    with open(job, "w") as f:
        f.write(f"""[job]
name = "{name}"
kind = "train"
gpus_per_node = 1
output_dir = "{out}"
[model]
preset = "{preset}"
max_seq = 2048
[train]
data = "{tokens_file}"
steps = {steps}
micro_batch = {micro}
seq_len = 2048
precision = "bf16"
lr = 1e-4
eval_fraction = 0.0
activation_checkpointing = "{checkpointing}"
log_every = 1
resume = false
checkpoint_every = 1000000
[lora]
rank = 16
alpha = 32
target_modules = "all-linear"
base_dtype = "{base}"
""")
    started = time.time()
    log = os.path.join(work, name + ".log")
    with open(log, "w") as f:
        rc = subprocess.call([cohort, "run", job], stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        return {"impl": "cohort", "base": base, "preset": preset, "error": f"exit {rc}, see {log}"}
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line]
    timed = rows[3:] or rows
    return {"impl": "cohort", "base": base, "preset": preset, "micro": micro,
            "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in timed)),
            "memory_mb": round(max(r.get("memory_mb", 0) for r in rows)), "final_loss": round(rows[-1]["loss"], 3),
            "wall_s": round(time.time() - started, 1)}


def run_peft(compile_model, micro, steps):
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192})
    torch.cuda.reset_peak_memory_stats()
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                             lora_dropout=0.0, task_type="CAUSAL_LM"))
    # PEFT keeps the adapters in the base's dtype; AdamW runs on them as they are.
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    step_fn = torch.compile(model) if compile_model else model
    ids = torch.randint(0, VOCAB, (micro, 2048), device="cuda")

    def step():
        loss = step_fn(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {"impl": "transformers+peft" + (" compile" if compile_model else " eager"), "base": "bf16",
              "preset": "llama-3.1-8b", "micro": micro, "tokens_per_s": round(steps * micro * 2048 / elapsed),
              "memory_mb": round(torch.cuda.max_memory_reserved() / 2**20)}
    del model, optimizer, step_fn
    torch.cuda.empty_cache()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cohort", default="build/bin/cohort")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip-peft", action="store_true")
    ap.add_argument("--peft", default="eager,compile", help="which transformers + PEFT runs, comma-separated")
    ap.add_argument("--skip-70b", action="store_true")
    ap.add_argument("--skip-8b", action="store_true", help="only the 70B QLoRA run (with --skip-peft)")
    ap.add_argument("--bases", default="bf16,nf4", help="the 8B runs' base formats, comma-separated")
    ap.add_argument("--micro", type=int, default=4, help="the 8B runs' micro-batch (sequences of 2048)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    def listed(flag, value, what, choices):  # a comma-separated option, every name one it knows
        for name in value.split(","):
            if name not in choices:
                ap.error(f"{flag}: '{name}' is not {what} ({', '.join(choices)})")

    listed("--peft", args.peft, "a run", ("eager", "compile"))
    listed("--bases", args.bases, "a base_dtype", ("bf16", "fp32", "fp8", "nf4"))
    work = args.work or tempfile.mkdtemp(prefix="cohort_lora_bench_")
    os.makedirs(work, exist_ok=True)
    tokens_file = os.path.join(work, "tokens.u32")
    random_tokens(tokens_file, 4_000_000)
    cohort = os.path.abspath(args.cohort)
    rows = []
    for base in () if args.skip_8b else args.bases.split(","):
        rows.append(run_cohort(cohort, work, f"lora8b-{base}", "llama-3.1-8b", base, args.micro, args.steps,
                               tokens_file))
        print(json.dumps(rows[-1]), flush=True)
    if not args.skip_peft:
        for compile_model in [mode == "compile" for mode in args.peft.split(",")]:
            try:
                rows.append(run_peft(compile_model, args.micro, args.steps))
            except Exception as e:  # a failed peer is a row, not the end of the run
                rows.append({"impl": "transformers+peft" + (" compile" if compile_model else " eager"),
                             "error": repr(e)[:300]})
            print(json.dumps(rows[-1]), flush=True)
    if not args.skip_70b:
        rows.append(run_cohort(cohort, work, "qlora70b-nf4", "llama-3.1-70b", "nf4", 1, max(4, args.steps // 3),
                               tokens_file, checkpointing="full"))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| run | base | micro | tokens/s | memory MiB |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['impl']} {r.get('preset', '')} | {r.get('base', '')} | {r.get('micro', '')} | "
              f"{r.get('tokens_per_s', r.get('error', ''))} | {r.get('memory_mb', '')} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
