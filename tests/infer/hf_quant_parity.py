#!/usr/bin/env python3
"""Quantized weights' parity of cohort-worker (kind = "infer") on the GPU machine.

Two sections, each with its own PASS/FAIL:

fp8-checkpoint  A random Qwen3 model saved in bf16, quantized by transformers
    itself (FineGrainedFP8Config: e4m3 weights, a weight_scale_inv per
    128 x 128 block) and saved: the folder a `*-FP8` release ships. cohort
    serves that folder. The reference is the same model in fp32 with each
    weight dequantized here (codes x block scale, written independently of
    both implementations) and, as cohort's prompt rows take the FP8 tensor
    cores (W8A8), each projection's input of a prompt forward rounded to
    e4m3 per row and 128 columns with a power-of-two scale (fp8_rows.h;
    decode steps of one row keep bf16 inputs, as cohort's batch of 4 does).
    cohort's logits must stay within --fp8-rel of the largest reference
    logit wherever the contexts agree, and a prompt may part only at a near
    tie (as hf_generate_parity.py judges bf16). The reference cannot follow
    cohort more closely than that: an activation within bf16's rounding of
    an e4m3 rounding boundary (about one in twenty) rounds one way in
    cohort's bf16 forward and the other in the fp32 one, a step of 6-12%. transformers' own FP8 model, where its kernels load, is
    printed beside: its error against the same reference and how many
    prompts give cohort exactly its tokens.

formats  The bf16 folder served with `[model] quantize = "fp8" | "int8" |
    "int4"` against the fp32 model of the same weights round-tripped through
    each format here (int8/int4: symmetric, absmax / 127 or / 7 per row and
    128 columns, round to nearest even; fp8: 448 / amax per 128 x 128 tile,
    e4m3 codes, times 1 / scale; fp8's prompt rows also W8A8 as above): the
    largest logit difference over steps decoded from the same context,
    relative to the largest reference logit, within ROUND_TRIP_BOUNDS (the
    bf16 run's grade, and for fp8's e4m3 activations --fp8-rel as above). Each
    format's own rounding error, against the fp32 model of the unrounded
    weights, is printed beside (on this random model: int8 about 0.04,
    fp8 0.21, int4 0.64 of the largest logit).

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

# Largest |cohort - fp32 of the round-tripped weights| / max |logit| per
# quantize-on-load format (bf16: the unrounded weights; 0.02 its grade).
# An H100 measured bf16 0.0134, int8 0.0150, int4 0.0151 and fp8 0.116.
ROUND_TRIP_BOUNDS = {"bf16": 0.02, "int8": 0.03, "int4": 0.03, "fp8": 0.15}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
E4M3_MAX = 448.0


def is_projection(key):
    return key.endswith(".weight") and key.split(".")[-2] in PROJECTIONS


def round_trip(state, fmt):
    """`state` in fp32 with each projection round-tripped through cohort's `fmt` (on the CPU, in fp32)."""
    out = {}
    for key, tensor in state.items():
        w = tensor.float().cpu()
        if fmt == "bf16" or not is_projection(key):
            out[key] = w
            continue
        rows, cols = w.shape
        if fmt in ("int8", "int4"):
            levels = 127.0 if fmt == "int8" else 7.0
            g = w.reshape(rows, cols // 128, 128)
            scale = g.abs().amax(-1, keepdim=True) / levels
            q = torch.where(scale > 0, torch.round(g / torch.where(scale > 0, scale, 1.0)).clamp(-levels, levels),
                            torch.zeros_like(g))
            out[key] = (q * scale).reshape(rows, cols)
        elif fmt == "fp8":
            t = w.reshape(rows // 128, 128, cols // 128, 128)
            amax = t.abs().amax(dim=(1, 3), keepdim=True)
            scale = torch.where(amax > 0, E4M3_MAX / torch.where(amax > 0, amax, 1.0), torch.ones_like(amax))
            codes = (t * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
            out[key] = (codes * (1.0 / scale)).reshape(rows, cols)
        else:
            raise ValueError(f"no round trip for {fmt}")
    return out


def e4m3_rows(x):
    """x rounded to bf16, then to e4m3 per row and 128 columns with the least power-of-two scale s
    with amax / s <= 448 (fp8_rows.h), and back."""
    xb = x.to(torch.bfloat16).float()
    shape = xb.shape
    blocks = xb.reshape(*shape[:-1], shape[-1] // 128, 128)
    amax = blocks.abs().amax(-1, keepdim=True)
    _, e = torch.frexp(amax / E4M3_MAX)
    s = torch.ldexp(torch.ones_like(amax), e)
    s = torch.where(amax > E4M3_MAX * s, 2 * s, s)
    s = torch.where(amax <= 0.5 * E4M3_MAX * s, 0.5 * s, s)
    s = torch.where(amax > 0, s, torch.ones_like(s))
    codes = (blocks / s).to(torch.float8_e4m3fn).float()
    return (codes * s).reshape(shape).to(x.dtype)


def w8a8_prompts(model):
    """Hooks that round each projection's input to e4m3 in forwards of more than one row (a prompt)."""
    def hook(module, args):
        x = args[0]
        return (e4m3_rows(x),) + tuple(args[1:]) if x.shape[-2] > 1 else None
    for name, module in model.named_modules():
        if name.split(".")[-1] in PROJECTIONS:
            module.register_forward_pre_hook(hook)
    return model


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
    try:  # transformers' FP8 model needs its `kernels` package
        hf_fp8 = [transformers_greedy(quantized, p, args.max_new) for p in prompts]
    except Exception as e:  # noqa: BLE001
        print(f"  transformers' FP8 model does not run here ({type(e).__name__}: {str(e)[:120]})")
        hf_fp8 = None
    del quantized
    reference = w8a8_prompts(fp32_model(config, dequantize_fp8_blocks(state, qconfig["weight_block_size"]), device))
    ref = [transformers_greedy(reference, p, args.max_new) for p in prompts]
    del reference
    torch.cuda.empty_cache()
    if hf_fp8 is not None:
        hf_err = max(err for _, err in agreement(ref, hf_fp8))
        hf_parted = sum(k is not None for k, _ in agreement(ref, hf_fp8))
        print(f"  transformers FP8 vs the W8A8 fp32 reference: max logit difference {hf_err:.3f}, "
              f"{hf_parted} of {len(prompts)} prompts parted")
    rows, summary = run_cohort(args.worker, fp8_dir, prompts, work, "qwen3-fp8", 1, args.max_new,
                               batch=args.batch, device="cuda", dump_logits=True)
    print(f"  cohort {summary['engine']}, weights {summary.get('weights')}, "
          f"{summary['decode_tokens_per_s']:.0f} decode tokens/s")
    got = [(r["tokens"], r["logits"]) for r in rows]
    scale = max(float(np.max(np.abs(logits))) for _, logits in ref)
    failures = judge("fp8 checkpoint", ref, got, args.fp8_rel * scale)
    if hf_fp8 is not None:
        same = sum(k is None for k, _ in agreement(hf_fp8, got))
        print(f"  cohort's tokens equal transformers' FP8 model's on {same} of {len(prompts)} prompts")
    return failures


def reference_runs(config, state, prompts, args, device, w8a8=False):
    model = fp32_model(config, state, device)
    if w8a8:
        w8a8_prompts(model)
    runs = [transformers_greedy(model, p, args.max_new) for p in prompts]
    del model
    torch.cuda.empty_cache()
    return runs


def formats(args, config, bf16_dir, prompts, work, device):
    weights = read_folder(bf16_dir)
    plain = reference_runs(config, {k: t.float() for k, t in weights.items()}, prompts, args, device)
    scale = max(float(np.max(np.abs(logits))) for _, logits in plain)
    failures = 0
    for fmt in args.formats.split(","):
        keys = "" if fmt == "bf16" else f'quantize = "{fmt}"'
        rows, summary = run_cohort(args.worker, bf16_dir, prompts, work, f"qwen3-{fmt}", 1, args.max_new,
                                   batch=args.batch, device="cuda", dump_logits=True, model_keys=keys)
        got = [(r["tokens"], r["logits"]) for r in rows]
        ref = plain if fmt == "bf16" else reference_runs(config, round_trip(weights, fmt), prompts, args, device,
                                                         w8a8=fmt == "fp8")
        found = agreement(ref, got)
        rel = max(err for _, err in found) / scale
        parted = sum(k is not None for k, _ in found)
        bound = args.fp8_rel if fmt == "fp8" else ROUND_TRIP_BOUNDS.get(fmt, 0.02)
        bad = rel > bound
        failures += bad
        rounding = max(err for _, err in agreement(plain, got)) / scale
        print(f"  {fmt}: weights {summary.get('weights')}, max |logit difference| / max |logit| {rel:.4f} "
              f"against the round-tripped weights (bound {bound}), {parted} of {len(prompts)} prompts parted"
              f"{': FAIL' if bad else ''}; {rounding:.4f} against the unrounded ones")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--sections", default="fp8-checkpoint,formats")
    ap.add_argument("--formats", default="bf16,fp8,int8,int4")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--fp8-rel", type=float, default=ROUND_TRIP_BOUNDS["fp8"],
                    help="fp8-checkpoint: logit budget, a share of the largest reference logit")
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
