#!/usr/bin/env python3
"""Greedy parity of cohort-worker (kind = "infer") with transformers' generate.

For the GPU machine (torch + transformers installed). For each of a Qwen3 and
a Llama config made here with random weights (saved in bf16, so both sides
hold exactly the same weights), saves a Hugging Face folder, runs
cohort-worker on it (tensor-parallel over --tp local ranks, torchrun-style
environment) and compares every prompt's greedy tokens, and the logits they
were chosen from, with transformers' generate in fp32 on the same weights.

Two sections, each with its own PASS/FAIL:

strict (fp32)  cohort's fp32 CPU engine (COHORT_DEVICE=cpu) against
    transformers in fp32 (TF32 off, eager attention). Identity is expected:
    both compute in fp32 and differ only in summation order, which moves
    logits by ~1e-5 here. Criterion: wherever both sides decoded from the
    same context, |logit difference| <= --strict-tol (1e-3), so tokens can
    part only at a tie within 2 * --strict-tol. Not the fp32 "model" engine
    on CUDA (COHORT_INFER_ENGINE=model): the models CUDA backend multiplies
    with CUBLAS_COMPUTE_32F_FAST_16BF (operands rounded to bf16 on the tensor
    cores, models/ops/linear.cuh), so its logits are bf16-grade, not fp32.

bf16 (graph engine)  cohort's default engine on the GPUs (bf16 weights and
    GEMM operands, fp32 accumulation and residual stream, bf16 KV cache)
    against the same fp32 reference. Its logits cannot equal fp32's, and
    greedy decoding parts ways wherever the two best logits are closer than
    the rounding error, which then changes every later step. The yardstick is
    transformers' own bf16 run on the same weights: its largest logit error
    against fp32 (over the steps it decoded from the reference's context),
    times 1.5, or --bf16-tol when that is larger, is the budget E. Criterion:
    cohort's logits are within E of fp32's wherever the contexts agree, so a
    prompt parts only at a near tie (reference gap <= 2 E). A real bug (wrong
    RoPE, norm, mask, a shard read twice) moves logits by their own scale.

Exit status 0 only when every section run passes.

  python3 tests/infer/hf_generate_parity.py --worker build/bin/cohort-worker [--tp 2]
      [--sections strict,bf16] [--prompts 64 --batch 64]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers


def make_configs(vocab):
    qwen3 = transformers.Qwen3Config(
        vocab_size=vocab, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=1024,
        rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6, initializer_range=0.1)
    llama = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
        rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-5, initializer_range=0.1,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 256})
    return {"qwen3": qwen3, "llama": llama}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, chars=3000):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return "(no log)"
    return text if len(text) <= chars else "..." + text[-chars:]


def launch_ranks(worker, job_file, world, env_extra, timeout=300):
    """Runs `world` ranks of cohort-worker with a torchrun-style environment.

    Each rank's output goes to <job>.rank<r>.log. When a rank fails or the
    deadline passes, the others are killed and every rank's log tail raised.
    """
    port = free_port()
    procs, logs = [], []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   COHORT_COLLECTIVE_TIMEOUT_S="60", **env_extra)
        env.pop("COHORT_STORE", None)
        logs.append(f"{job_file}.rank{rank}.log")
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen([worker, job_file], env=env, stdout=log,
                                          stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    problem = None
    while problem is None and any(p.poll() is None for p in procs):
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed:
            problem = f"rank {failed[0]} exited with {procs[failed[0]].returncode}"
        elif time.monotonic() > deadline:
            problem = f"ranks did not finish within {timeout} s"
        else:
            time.sleep(0.05)
    if problem is None and any(p.returncode for p in procs):
        problem = f"ranks exited with {[p.returncode for p in procs]}"
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if problem:
        logs_text = "".join(f"\n--- rank {r} ({path}):\n{tail(path)}" for r, path in enumerate(logs))
        raise RuntimeError(f"cohort-worker {job_file}: {problem}{logs_text}")


def write_job(path, name, model_dir, prompts_file, out_dir, tp, max_new, batch, graphs=True, model_keys="",
              infer_keys=""):
    """model_dir None: the model comes from model_keys alone (a preset)."""
    source = f'hf_dir = "{model_dir}"\n' if model_dir else ""
    with open(path, "w") as f:
        f.write(f'[job]\nname = "{name}"\nkind = "infer"\ngpus_per_node = {tp}\n'
                f'output_dir = "{out_dir}"\n\n[model]\n{source}{model_keys}\n'
                f'[infer]\nprompts = "{prompts_file}"\nmax_new_tokens = {max_new}\n'
                f'batch_size = {batch}\ntensor_parallel = {tp}\n'
                f'cuda_graphs = {"true" if graphs else "false"}\n{infer_keys}\n')


def run_cohort(worker, model_dir, prompts, work, name, tp, max_new, batch, engine="graphs",
               graphs=True, device="cuda", dump_logits=False, model_keys="", infer_keys="", timeout=300):
    """Returns (outputs.jsonl rows, summary.json) of one cohort-worker run.

    model_keys: extra lines for the job's [model] table ('quantize = "int4"'); infer_keys the
    same for [infer] ('kv_cache_dtype = "fp8"').

    With dump_logits each row also gets "logits": [steps, vocab] (numpy), the
    fp32 logits each generated token was chosen from.
    """
    prompts_file = os.path.join(work, f"{name}.jsonl")
    with open(prompts_file, "w") as f:
        for p in prompts:
            f.write(json.dumps({"tokens": p}) + "\n")
    out_dir = os.path.join(work, f"{name}-out")
    job = os.path.join(work, f"{name}.toml")
    write_job(job, name, model_dir, prompts_file, out_dir, tp, max_new, batch, graphs, model_keys, infer_keys)
    # transformers runs without EOS here, so cohort decodes past it too.
    env = {"COHORT_DEVICE": device, "COHORT_INFER_IGNORE_EOS": "1"}
    if engine == "model":
        env["COHORT_INFER_ENGINE"] = "model"
    if dump_logits:
        env["COHORT_INFER_DUMP_LOGITS"] = "1"
    launch_ranks(worker, job, tp, env, timeout)
    with open(os.path.join(out_dir, "outputs.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    if dump_logits:
        for i, row in enumerate(rows):
            values = np.fromfile(os.path.join(out_dir, "logits", f"{i}.f32"), dtype=np.float32)
            row["logits"] = values.reshape(len(row["tokens"]), -1)
    return rows, summary


def load(model_dir, dtype, device):
    """The saved folder as transformers loads it in `dtype`, eager attention.

    Loaded afresh rather than cast: Module.to(dtype) also casts the rotary
    embedding's inv_freq buffer, and a bf16-rounded inv_freq cast back to
    fp32 would put the fp32 reference's RoPE off by up to 0.4 %.
    """
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="eager", **{key: dtype})
    return model.to(device).eval()


def transformers_greedy(model, prompt, max_new):
    """Greedy tokens and the per-step logits [steps, vocab] they were chosen from."""
    ids = torch.tensor([prompt], device=model.device)
    # No EOS: cohort stops only where the job says, and masking EOS instead
    # (min_new_tokens) would change the logits compared.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    kwargs = dict(max_new_tokens=max_new, do_sample=False, output_scores=True,
                  return_dict_in_generate=True)
    try:  # raw logits where this transformers has them (scores are processed)
        out = model.generate(ids, output_logits=True, **kwargs)
        steps = out.logits if getattr(out, "logits", None) is not None else out.scores
    except (TypeError, ValueError):
        out = model.generate(ids, **kwargs)
        steps = out.scores
    tokens = out.sequences[0, len(prompt):].tolist()
    return tokens, np.stack([s[0].float().cpu().numpy() for s in steps])


def agreement(ref, got):
    """Per prompt: the step where `got` parts from `ref` (None: never) and the
    largest logit difference over the steps decoded from the same context
    (the parting step included)."""
    out = []
    for (ref_tokens, ref_logits), (tokens, logits) in zip(ref, got):
        k = next((j for j, (a, b) in enumerate(zip(ref_tokens, tokens)) if a != b), None)
        same = (k + 1) if k is not None else min(len(ref_tokens), len(tokens))
        err = float(np.max(np.abs(ref_logits[:same] - logits[:same]))) if same else 0.0
        out.append((k, err))
    return out


def judge(label, ref, got, budget):
    """Prints per-prompt findings; returns the number of failures."""
    failures = parted = 0
    worst = 0.0
    for i, ((k, err), (ref_tokens, ref_logits), (tokens, _)) in enumerate(
            zip(agreement(ref, got), ref, got)):
        worst = max(worst, err)
        if k is None and len(tokens) != len(ref_tokens):
            failures += 1
            print(f"    prompt {i}: {len(tokens)} tokens vs {len(ref_tokens)}")
        if err > budget:
            failures += 1
            print(f"    prompt {i}: logits differ by {err:.2e} > {budget:.2e}")
        if k is not None:
            parted += 1
            gap = float(ref_logits[k][ref_tokens[k]] - ref_logits[k][tokens[k]])
            bad = gap > 2 * budget
            failures += bad
            print(f"    prompt {i}: parts at step {k} ({tokens[k]} vs reference {ref_tokens[k]}), "
                  f"reference gap {gap:.4f}{' > 2 x budget: FAIL' if bad else ', a near tie'}")
    print(f"  {label}: {len(got)} prompts, {parted} parted, max logit difference {worst:.2e} "
          f"(budget {budget:.2e}), {failures} failures")
    return failures


def random_prompts(count, vocab):
    """`count` prompts of 4 to 63 random token ids below `vocab` (seeded: the same every run)."""
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (int(n),), generator=gen).tolist()
            for n in torch.randint(4, 64, (count,), generator=gen)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--sections", default="strict,bf16", help="strict, bf16 or both (comma-separated)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4,
                    help="decode batch of cohort's bf16 run (1 takes the fused small-batch path, "
                         "64 the cuBLASLt one)")
    ap.add_argument("--strict-tol", type=float, default=1e-3,
                    help="fp32 section: largest logit difference allowed")
    ap.add_argument("--bf16-tol", type=float, default=0.1,
                    help="bf16 section: least logit budget (else 1.5 x transformers' bf16 error)")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    if not sections or any(s not in ("strict", "bf16") for s in sections):
        ap.error("--sections takes strict, bf16 or strict,bf16")
    # The fp32 reference is fp32 all through: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.work or tempfile.mkdtemp(prefix="cohort_hf_parity_")
    worker = os.path.abspath(args.worker)
    torch.manual_seed(0)
    vocab = 4096
    prompts = random_prompts(args.prompts, vocab)
    failures = {s: 0 for s in sections}
    for name, config in make_configs(vocab).items():
        model_dir = os.path.join(work, name)
        model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
        model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="20MB")
        del model
        model = load(model_dir, torch.float32, device)
        ref = [transformers_greedy(model, p, args.max_new) for p in prompts]
        print(f"{name}: transformers {transformers.__version__} fp32 on {device}, tp {args.tp}")
        if "strict" in sections:
            rows, summary = run_cohort(worker, model_dir, prompts, work, f"{name}-fp32", args.tp,
                                       args.max_new, batch=4, device="cpu", dump_logits=True)
            print(f"  strict: cohort {summary['engine']} vs transformers fp32")
            got = [(r["tokens"], r["logits"]) for r in rows]
            failures["strict"] += judge("strict", ref, got, args.strict_tol)
        if "bf16" in sections:
            del model
            model = load(model_dir, torch.bfloat16, device)
            hf_bf16 = [transformers_greedy(model, p, args.max_new) for p in prompts]
            hf_err = max(err for _, err in agreement(ref, hf_bf16))
            hf_parted = sum(k is not None for k, _ in agreement(ref, hf_bf16))
            budget = max(args.bf16_tol, 1.5 * hf_err)
            print(f"  bf16: transformers bf16 vs fp32: max logit difference {hf_err:.3f}, "
                  f"{hf_parted} of {len(prompts)} prompts parted; budget {budget:.3f}")
            rows, summary = run_cohort(worker, model_dir, prompts, work, f"{name}-bf16", args.tp,
                                       args.max_new, batch=args.batch, device="cuda", dump_logits=True)
            print(f"  bf16: cohort {summary['engine']}, "
                  f"{summary['decode_tokens_per_s']:.0f} decode tokens/s, vs transformers fp32")
            got = [(r["tokens"], r["logits"]) for r in rows]
            failures["bf16"] += judge("bf16", ref, got, budget)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    for s in sections:
        print(f"{s}: {'PASS' if failures[s] == 0 else f'FAIL ({failures[s]} failures)'}")
    return 0 if all(v == 0 for v in failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
