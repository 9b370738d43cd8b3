#!/usr/bin/env python3
"""Quantized weights' parity of cohort-worker (kind = "infer") on the GPU machine.

Two sections, each with its own PASS/FAIL:

fp8-checkpoint  A random Qwen3 model saved in bf16, quantized by transformers
    itself (FineGrainedFP8Config: e4m3 weights, a weight_scale_inv per
    128 x 128 block) and saved: the folder a `*-FP8` release ships. cohort
    serves that folder. The reference is the same model in fp32 with each
    weight dequantized here (codes x block scale, written independently of
    both implementations), so the quantized weights are exactly what every
    side holds. transformers' own FP8 model (dynamic fp8 activations on top)
    sets the noise budget: its largest logit error against the reference,
    times 1.5, or --fp8-tol when larger. cohort's logits must stay within that
    budget wherever the contexts agree, and a prompt may part only at a near
    tie (as hf_generate_parity.py judges bf16). Also printed: how many prompts
    give cohort exactly transformers' FP8 tokens.

formats  The bf16 folder served with `[model] quantize = "fp8" | "int8" |
    "int4"` against the fp32 model of the bf16 weights: the largest logit
    difference over steps decoded from the same context, relative to the
    largest reference logit, within each format's stated bound (REL_BOUNDS:
    about three times what each format's rounding of the weights gives on
    this model: int8's 127 levels per group, fp8's 3 mantissa bits, int4's
    15 levels per group of 128).

  python3 tests/infer/hf_quant_parity.py --worker build/bin/cohort-worker [--sections fp8-checkpoint,formats]

Exit status 0 only when every section run passes.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_generate_parity import (agreement, judge, make_configs, random_prompts, run_cohort,  # noqa: E402
                                transformers_greedy)

# Largest |cohort - fp32| / max |fp32 logit| per quantize-on-load format.
REL_BOUNDS = {"int8": 0.03, "fp8": 0.10, "int4": 0.25}


def dtype_key():
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def fp32_model(config, state, device):
    """`config`'s model in fp32 (eager attention) holding `state`, checked whole."""
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                          **{dtype_key(): torch.float32})
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"reference state: missing {missing[:4]}, unexpected {unexpected[:4]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.to(device).eval()


def read_folder(folder):
    state = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, name)))
    return state


def dequantize_fp8_blocks(state, block):
    """weight [out, in] e4m3 x weight_scale_inv [ceil(out / b0), ceil(in / b1)], as fp32."""
    out = {}
    for key, tensor in state.items():
        if key.endswith("_scale_inv"):
            continue
        scale = state.get(key + "_scale_inv")
        if scale is None:
            out[key] = tensor.float()
            continue
        rows, cols = tensor.shape
        expanded = scale.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
        out[key] = tensor.float() * expanded
    return out


def fp8_checkpoint(args, config, bf16_dir, prompts, work, device):
    fp8_dir = os.path.join(work, "qwen3-fp8")
    quantized = transformers.AutoModelForCausalLM.from_pretrained(
        bf16_dir, quantization_config=transformers.FineGrainedFP8Config(), device_map=device,
        **{dtype_key(): torch.bfloat16})
    quantized.save_pretrained(fp8_dir, safe_serialization=True)
    with open(os.path.join(fp8_dir, "config.json")) as f:
        qconfig = json.load(f)["quantization_config"]
    state = read_folder(fp8_dir)
    scales = sum(k.endswith("weight_scale_inv") for k in state)
    codes = [k for k, t in state.items() if t.dtype == torch.float8_e4m3fn]
    print(f"fp8-checkpoint: transformers {transformers.__version__} wrote {qconfig} "
          f"({len(codes)} e4m3 weights, {scales} block scales)")
    if not codes or scales != len(codes):
        print("  the folder holds no block-scaled e4m3 weights")
        return 1
    hf_fp8 = [transformers_greedy(quantized, p, args.max_new) for p in prompts]
    del quantized
    reference = fp32_model(config, dequantize_fp8_blocks(state, qconfig["weight_block_size"]), device)
    ref = [transformers_greedy(reference, p, args.max_new) for p in prompts]
    del reference
    torch.cuda.empty_cache()
    hf_err = max(err for _, err in agreement(ref, hf_fp8))
    hf_parted = sum(k is not None for k, _ in agreement(ref, hf_fp8))
    budget = max(args.fp8_tol, 1.5 * hf_err)
    print(f"  transformers FP8 vs fp32 of the dequantized weights: max logit difference {hf_err:.3f}, "
          f"{hf_parted} of {len(prompts)} prompts parted; budget {budget:.3f}")
    rows, summary = run_cohort(args.worker, fp8_dir, prompts, work, "qwen3-fp8", 1, args.max_new,
                               batch=args.batch, device="cuda", dump_logits=True)
    print(f"  cohort {summary['engine']}, weights {summary.get('weights')}, "
          f"{summary['decode_tokens_per_s']:.0f} decode tokens/s")
    got = [(r["tokens"], r["logits"]) for r in rows]
    failures = judge("fp8 checkpoint", ref, got, budget)
    same = sum(k is None for k, _ in agreement(hf_fp8, got))
    print(f"  cohort's tokens equal transformers' FP8 model's on {same} of {len(prompts)} prompts")
    return failures


def formats(args, config, bf16_dir, prompts, work, device):
    reference = fp32_model(config, {k: t.float() for k, t in read_folder(bf16_dir).items()}, device)
    ref = [transformers_greedy(reference, p, args.max_new) for p in prompts]
    del reference
    torch.cuda.empty_cache()
    scale = max(float(np.max(np.abs(logits))) for _, logits in ref)
    failures = 0
    for fmt in args.formats.split(","):
        keys = "" if fmt == "bf16" else f'quantize = "{fmt}"'
        rows, summary = run_cohort(args.worker, bf16_dir, prompts, work, f"qwen3-{fmt}", 1, args.max_new,
                                   batch=args.batch, device="cuda", dump_logits=True, model_keys=keys)
        got = [(r["tokens"], r["logits"]) for r in rows]
        found = agreement(ref, got)
        rel = max(err for _, err in found) / scale
        parted = sum(k is not None for k, _ in found)
        bound = REL_BOUNDS.get(fmt, 0.02)  # bf16: the bf16 section's grade
        bad = rel > bound
        failures += bad
        print(f"  {fmt}: weights {summary.get('weights')}, max |logit difference| / max |logit| {rel:.4f} "
              f"(bound {bound}), {parted} of {len(prompts)} prompts parted{': FAIL' if bad else ''}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--sections", default="fp8-checkpoint,formats")
    ap.add_argument("--formats", default="bf16,fp8,int8,int4")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--fp8-tol", type=float, default=0.1, help="fp8-checkpoint: least logit budget")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    args.worker = os.path.abspath(args.worker)
    sections = [s for s in args.sections.split(",") if s]
    if not sections or any(s not in ("fp8-checkpoint", "formats") for s in sections):
        ap.error("--sections takes fp8-checkpoint, formats or both")
    if not torch.cuda.is_available():
        print("hf_quant_parity: no GPU (FineGrainedFP8Config and cohort's quantized kernels need one)")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda"
    work = args.work or tempfile.mkdtemp(prefix="cohort_quant_parity_")
    torch.manual_seed(0)
    vocab = 4096
    prompts = random_prompts(args.prompts, vocab)
    # Qwen3 (hidden 512, MLP 1,536: whole 128 x 128 blocks and 128-wide groups).
    config = make_configs(vocab)["qwen3"]
    bf16_dir = os.path.join(work, "qwen3-bf16")
    transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(
        bf16_dir, safe_serialization=True)
    failures = {}
    for section in sections:
        run = fp8_checkpoint if section == "fp8-checkpoint" else formats
        try:
            failures[section] = run(args, config, bf16_dir, prompts, work, device)
        except Exception as e:  # one section's crash is its failure, not the others'
            print(f"{section}: {type(e).__name__}: {e}")
            failures[section] = 1
    for section, count in failures.items():
        print(f"{section}: {'PASS' if count == 0 else f'FAIL ({count} failures)'}")
    return 0 if all(v == 0 for v in failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
