#!/usr/bin/env python3
"""Fine-tuning loss parity on the GPU machine: cohort's first N losses against
a PyTorch loop on the very same tokenized, masked batches.

A Qwen3-shaped folder (random bf16 weights, a byte-level BPE trained with
`tokenizers` on mixed-script text, ChatML template: bench/make_hf_folder.py)
is fine-tuned by cohort-worker on a chat JSONL (loss on assistant turns only)
with COHORT_TRAIN_DUMP_BATCHES=1, which writes each step's inputs and targets.
The PyTorch loop loads the same folder in fp32, trains on those batches under
bf16 autocast with the same AdamW (decay on matrices only), learning-rate
schedule and clipping, and the losses are compared step by step.

  python3 tests/train/finetune_parity.py --worker build/bin/cohort-worker [--steps 200]
      [--shape qwen3-small | qwen3-moe-small] [--mean-tolerance 0.02] [--end-tolerance 0.01] [--work DIR]

With --shape qwen3-moe-small the folder is a Qwen3-MoE (16 experts, top 4,
the load-balancing loss on): the 200-step curve of a mixture of experts
(cohort's fused sparse layers by default; COHORT_TRAIN_BLOCKS=dense in the
environment takes the op-by-op ones).

Prints one line per step and a PASS/FAIL summary (exit 0/1): PASS when the
losses differ by at most --mean-tolerance on average and the curves end
(the mean of the last 10 steps) within --end-tolerance of each other,
relatively. The largest single-step difference is printed beside.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_hf_folder  # noqa: E402


def chat_rows(count, seed):
    """Conversations with a system turn now and then, one to three user /
    assistant exchanges, mixed scripts."""
    rng = random.Random(seed)
    words = make_hf_folder.builtin_corpus()[0].split() + ["数据", "训练", "مرحبا", "नमस्ते", "🙂", "42"]
    say = lambda k: " ".join(rng.choice(words) for _ in range(k))  # noqa: E731
    rows = []
    for _ in range(count):
        messages = [{"role": "system", "content": say(6)}] if rng.random() < 0.3 else []
        for _ in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": say(rng.randint(4, 20))})
            messages.append({"role": "assistant", "content": say(rng.randint(4, 40))})
        rows.append({"messages": messages})
    return rows


def learning_rate(step, total, warmup, lr, min_lr):
    """train/lr_schedule.h."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    decay = total - warmup
    if decay <= 1:
        return lr
    progress = min(1.0, (step - warmup) / (decay - 1))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--shape", default="qwen3-small", choices=sorted(make_hf_folder.SHAPES))
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--mean-tolerance", type=float, default=0.02, help="mean absolute loss difference")
    ap.add_argument("--end-tolerance", type=float, default=0.01,
                    help="relative difference of the last 10 steps' mean losses")
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="finetune-parity-")
    hf = os.path.join(work, "hf")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_hf_folder.py"), hf, "--shape", args.shape,
                    "--tokenizer", "trained"], check=True, stdout=subprocess.DEVNULL)
    data = os.path.join(work, "chat.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for row in chat_rows(3000, 7):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    out = os.path.join(work, "run")
    warmup, min_lr, wd, clip, b1, b2 = 5, args.lr / 10, 0.1, 1.0, 0.9, 0.95
    job = os.path.join(work, "job.toml")
    with open(job, "w") as f:
        f.write(f"""[job]
name = "finetune-parity"
kind = "train"
output_dir = "{out}"
[model]
hf_dir = "{hf}"
[train]
data = "{data}"
data_format = "chat"
eval_fraction = 0.0
steps = {args.steps}
micro_batch = {args.micro}
seq_len = {args.seq}
lr = {args.lr}
min_lr = {min_lr}
warmup_steps = {warmup}
weight_decay = {wd}
beta1 = {b1}
beta2 = {b2}
grad_clip = {clip}
precision = "bf16"
resume = false
""")
    env = dict(os.environ, COHORT_TRAIN_DUMP_BATCHES="1")
    subprocess.run([args.worker, job], check=True, env=env)
    cohort = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "loss" in row and "step" in row and "eval_loss" not in row:
                cohort[row["step"]] = row["loss"]
    per_step = args.micro * args.seq
    dump = np.fromfile(os.path.join(out, "batches.i32"), dtype=np.int32).reshape(args.steps, 2, args.micro, args.seq)

    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="sdpa").cuda()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(b1, b2), eps=1e-8)
    worst = 0.0
    pairs = []
    for step in range(args.steps):
        inputs = torch.from_numpy(dump[step, 0].astype(np.int64)).cuda()
        targets = torch.from_numpy(dump[step, 1].astype(np.int64)).cuda()
        counted = int((targets != -100).sum())
        for g in opt.param_groups:
            g["lr"] = learning_rate(step, args.steps, warmup, args.lr, min_lr)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=inputs)
        logits = out.logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1),
                                                 ignore_index=-100, reduction="sum") / max(1, counted)
        # A mixture of experts with output_router_logits: transformers' loss
        # adds router_aux_loss_coef times the load-balancing loss (so does cohort's).
        if getattr(out, "aux_loss", None) is not None:
            loss = loss + model.config.router_aux_loss_coef * out.aux_loss.float()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        theirs = loss.item()
        ours = cohort.get(step + 1, float("nan"))
        rel = abs(ours - theirs) / max(abs(theirs), 1e-6)
        worst = max(worst, rel) if not math.isnan(rel) else float("inf")
        pairs.append((ours, theirs))
        print(f"step {step + 1:3d}  cohort {ours:.4f}  pytorch {theirs:.4f}  rel {rel:.4f}  targets {counted}/{per_step}")
    mean_abs = sum(abs(a - b) for a, b in pairs) / max(1, len(pairs))
    tail = pairs[-10:]
    end_ours, end_theirs = (sum(p[i] for p in tail) / max(1, len(tail)) for i in (0, 1))
    end_rel = abs(end_ours - end_theirs) / max(abs(end_theirs), 1e-6)
    ok = mean_abs <= args.mean_tolerance and end_rel <= args.end_tolerance and len(pairs) == args.steps
    print(f"{'PASS' if ok else 'FAIL'}: {args.steps} steps, mean absolute difference {mean_abs:.4f} "
          f"(tolerance {args.mean_tolerance}), last 10 steps {end_ours:.4f} vs {end_theirs:.4f} "
          f"(relative {end_rel:.4f}, tolerance {args.end_tolerance}), largest single-step relative "
          f"difference {worst:.4f}; folder {hf}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
