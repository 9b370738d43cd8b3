#!/usr/bin/env python3
"""Greedy parity of cohort-worker (kind = "infer") with transformers' generate.

For the GPU machine (torch + transformers installed). For each of a Qwen3 and
a Llama config made here with random weights, saves a Hugging Face folder,
runs cohort-worker on it (tensor-parallel over --tp local ranks, torchrun-style
environment), and compares every prompt's greedy tokens with
transformers' generate on the same weights.

Different numerics (cohort's bf16 engine, transformers in fp32) may part ways
where two tokens are all but tied; a divergence passes only if transformers'
own logits for the two tokens are within --tie at that step. Anything else
fails. Exit status 0 when every config passes.

  python3 tests/infer/hf_generate_parity.py --worker build/bin/cohort-worker [--tp 2]
      [--engine graphs|model] [--dtype float32|bfloat16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

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


def launch_ranks(worker, job_file, world, env_extra, timeout=900):
    """Runs `world` ranks of cohort-worker with a torchrun-style environment."""
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   **env_extra)
        env.pop("COHORT_STORE", None)
        procs.append(subprocess.Popen([worker, job_file], env=env))
    codes = [p.wait(timeout=timeout) for p in procs]
    if any(codes):
        raise RuntimeError(f"cohort-worker ranks exited with {codes}")


def write_job(path, name, model_dir, prompts_file, out_dir, tp, max_new, batch, graphs=True):
    with open(path, "w") as f:
        f.write(f'[job]\nname = "{name}"\nkind = "infer"\ngpus_per_node = {tp}\n'
                f'output_dir = "{out_dir}"\n\n[model]\nhf_dir = "{model_dir}"\n\n'
                f'[infer]\nprompts = "{prompts_file}"\nmax_new_tokens = {max_new}\n'
                f'batch_size = {batch}\ntensor_parallel = {tp}\n'
                f'cuda_graphs = {"true" if graphs else "false"}\n')


def run_cohort(worker, model_dir, prompts, work, name, tp, max_new, batch, engine="graphs",
               graphs=True):
    """Returns (outputs.jsonl rows, summary.json) of one cohort-worker run."""
    prompts_file = os.path.join(work, f"{name}.jsonl")
    with open(prompts_file, "w") as f:
        for p in prompts:
            f.write(json.dumps({"tokens": p}) + "\n")
    out_dir = os.path.join(work, f"{name}-out")
    job = os.path.join(work, f"{name}.toml")
    write_job(job, name, model_dir, prompts_file, out_dir, tp, max_new, batch, graphs)
    # transformers runs without EOS here, so cohort decodes past it too.
    env = {"COHORT_INFER_DEVICE": "cuda", "COHORT_INFER_IGNORE_EOS": "1"}
    if engine == "model":
        env["COHORT_INFER_ENGINE"] = "model"
    launch_ranks(worker, job, tp, env)
    with open(os.path.join(out_dir, "outputs.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    return rows, summary


def transformers_greedy(model, prompt, max_new):
    """Greedy tokens and the per-step logits transformers chose them from."""
    ids = torch.tensor([prompt], device=model.device)
    # No EOS: cohort stops only where the job says, and masking EOS instead
    # (min_new_tokens) would change the logits compared.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    out = model.generate(ids, max_new_tokens=max_new, do_sample=False, output_scores=True,
                         return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    return tokens, [s[0].float().cpu() for s in out.scores]


def compare(name, ours, theirs, tie):
    """Number of prompts whose divergence is not explained by a near tie."""
    bad = parted = 0
    for i, (row, (tokens, scores)) in enumerate(zip(ours, theirs)):
        mine = row["tokens"]
        k = next((j for j, (a, b) in enumerate(zip(mine, tokens)) if a != b), None)
        if k is None:
            if len(mine) != len(tokens):
                print(f"  {name} prompt {i}: {len(mine)} tokens vs {len(tokens)}")
                bad += 1
            continue
        gap = float(scores[k][tokens[k]] - scores[k][mine[k]])
        parted += 1
        if gap > tie:
            bad += 1
            print(f"  {name} prompt {i}: step {k} cohort {mine[k]} vs transformers {tokens[k]}, "
                  f"logit gap {gap:.4f} > {tie}")
    print(f"{name}: {len(ours)} prompts, {parted} parted at a near tie, {bad} real mismatches")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--engine", choices=["graphs", "model"], default="graphs")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="transformers' compute dtype (weights are saved in bf16 either way)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--tie", type=float, default=0.05)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="cohort_hf_parity_")
    torch.manual_seed(0)
    vocab = 4096
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (int(n),), generator=gen).tolist()
               for n in torch.randint(4, 64, (args.prompts,), generator=gen)]
    failures = 0
    for name, config in make_configs(vocab).items():
        model_dir = os.path.join(work, name)
        model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
        model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="20MB")
        model = model.to(getattr(torch, args.dtype)).cuda().eval()
        theirs = [transformers_greedy(model, p, args.max_new) for p in prompts]
        ours, summary = run_cohort(os.path.abspath(args.worker), model_dir, prompts, work, name,
                                   args.tp, args.max_new, batch=4, engine=args.engine)
        print(f"{name}: cohort {summary['engine']}, tp {summary['tensor_parallel']}, "
              f"{summary['decode_tokens_per_s']:.0f} decode tokens/s")
        failures += compare(name, ours, theirs, args.tie)
        del model
        torch.cuda.empty_cache()
    print("PASS" if failures == 0 else f"FAIL ({failures} mismatches)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
