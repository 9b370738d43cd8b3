#!/usr/bin/env python3
"""Decode throughput of cohort-worker (kind = "infer") beside transformers' generate.

For the GPU machine. Builds a Qwen3-shaped model (--shape, default 0.6B) with random bf16
weights (transformers, saved as a Hugging Face folder), then for batch 1 and
64 and tensor-parallel 1 and 2 (2 only with two GPUs) runs cohort-worker on
it and transformers' generate on the same weights (one GPU), and prints decode
tokens/s next to the HBM bandwidth bound:

  bound = batch * HBM bandwidth / (bytes read per decode step)
  bytes per step = bf16 weights (the LM head; an untied embedding table is not
                   read, a tied one is read once, by the head; of a mixture
                   of experts only the experts the batch chooses)
                   + the KV cache read by attention (mean context), per GPU

Decode tokens/s excludes prefill: cohort reports decode-step tokens over
decode-step time (summary.json); for transformers it is
batch * (N - 1) / (time of generate(N) - time of generate(1)). transformers'
continuous batching (generate_batch, paged SDPA: the engine under
`transformers serve --continuous-batching`) is reported as output tokens over
the wall time of a whole run, prefill included (it has no decode-only clock).
cohort's "ready in" is the engine's load: weights read and uploaded, buffers,
warm-up and graph capture (summary.json load_s).

--prompt-lens takes several prompt lengths, so that one call covers short and
long contexts (mean decode context = prompt + new / 2).

  python3 bench/infer_bench.py --worker build/bin/cohort-worker [--new 256] [--json out.json]
      [--batches 1,8,64,256] [--prompt-lens 64,1984] [--cb]
      [--variants]   (adds tp 1 eager and the fp32 models engine)
      [--graphs-only] (a mixture of experts: leaves out the op-by-op models engine's run)
      [--quantize bf16,int4,int8,fp8]  (cohort's `[model] quantize`; the bound counts each format's bytes;
                                        "+kv8" after a format adds [infer] kv_cache_dtype = "fp8")
      [--hbm-tbs 3.35]  (the bound's bandwidth; default the card's by name)
      [--preset qwen3-30b-a3b]  (cohort's built-in model of --shape's shape instead of a saved folder:
                                 the worker makes the random weights, nothing is written, so a model
                                 larger than the disk (the whole Qwen3-30B-A3B, 61 GB) can be timed;
                                 cohort only, graph engine only, every layer)
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "infer"))
from hf_generate_parity import run_cohort  # noqa: E402


SHAPES = {  # Qwen3's published shapes
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=False),
    # Qwen3-30B-A3B's published shape: 128 experts of 768, top 8, every layer
    # sparse (--layers keeps fewer of its layers where the disk is small:
    # the share of the bound per token is the per-layer behaviour).
    "qwen3-30b-a3b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, moe_intermediate_size=768, num_experts=128,
                          num_experts_per_tok=8, norm_topk_prob=True, tie_word_embeddings=False),
    # Llama 3.1 8B's published shape, llama3 RoPE scaling included.
    "llama3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, tie_word_embeddings=False),
}


def qwen3_config(shape, layers=None):
    fields = dict(SHAPES[shape])
    if layers:
        fields["num_hidden_layers"] = layers
    if "num_experts" in fields:
        return transformers.Qwen3MoeConfig(vocab_size=151936, head_dim=128, max_position_embeddings=4096,
                                           rope_theta=1000000.0, rms_norm_eps=1e-6, decoder_sparse_step=1,
                                           mlp_only_layers=[], **fields)
    if shape.startswith("llama"):
        return transformers.LlamaConfig(
            vocab_size=128256, head_dim=128, max_position_embeddings=8192, rope_theta=500000.0,
            rms_norm_eps=1e-5, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            **fields)
    return transformers.Qwen3Config(vocab_size=151936, head_dim=128, max_position_embeddings=4096,
                                    rope_theta=1000000.0, rms_norm_eps=1e-6, **fields)


def transformers_decode_rate(model, batch, prompt_len, new, vocab):
    ids = torch.randint(0, vocab, (batch, prompt_len), device="cuda")
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0

    def timed(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    timed(4)  # warm-up
    t1, tn = timed(1), timed(new)
    return batch * (new - 1) / (tn - t1)


def transformers_cb_rate(model_dir, batch, prompt_len, new, vocab):
    """Output tokens/s of transformers' continuous batching, the second of two runs."""
    from transformers.generation import GenerationConfig
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="paged|sdpa", dtype=torch.bfloat16, device_map="cuda")
    gen = torch.Generator().manual_seed(batch)
    inputs = torch.randint(0, vocab, (batch, prompt_len), generator=gen).tolist()
    config = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=-1, pad_token_id=0)
    rate = float("nan")
    for _ in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        outputs = model.generate_batch(inputs=inputs, generation_config=config, progress_bar=False)
        torch.cuda.synchronize()
        tokens = sum(len(o.generated_tokens) for o in outputs.values())
        rate = tokens / (time.perf_counter() - start)
    del model
    torch.cuda.empty_cache()
    return rate


# Bytes a quantized projection weight takes per element: codes, plus a
# scale (and for the integer formats a zero point) per 128 inputs, fp32.
BYTES_PER_WEIGHT = {"bf16": 2.0, "int8": 1 + 8 / 128, "int4": 0.5 + 8 / 128, "fp8": 1 + 4 / 128}


def hbm_bound(config, params, batch, context, tp, hbm_bytes_per_s, quantize="bf16"):
    # An untied embedding table is not read by a decode step (one row per
    # token); the LM head is, whole.
    if not getattr(config, "tie_word_embeddings", True):
        params -= config.vocab_size * config.hidden_size
    kv_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2
    h, i = config.hidden_size, config.intermediate_size
    q = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    experts = getattr(config, "num_experts", 0)
    if experts:
        # A mixture of experts reads its chosen experts only (bf16 whatever
        # the format): the experts a batch's rows choose, E (1 - (1 - k/E)^B)
        # of them on average, per layer.
        k, ie = config.num_experts_per_tok, config.moe_intermediate_size
        chosen = experts * (1 - (1 - k / experts) ** batch)
        all_experts = config.num_hidden_layers * experts * 3 * h * ie
        projections = config.num_hidden_layers * (h * (q + 2 * kv) + q * h)
        weight_bytes = (2 * (params - projections - all_experts) + BYTES_PER_WEIGHT[quantize] * projections +
                        2 * config.num_hidden_layers * chosen * 3 * h * ie)
        step_bytes = (weight_bytes + batch * context * kv_per_token) / tp
        return batch * hbm_bytes_per_s / step_bytes
    projections = config.num_hidden_layers * (h * (q + 2 * kv) + q * h + 3 * h * i)
    weight_bytes = 2 * (params - projections) + BYTES_PER_WEIGHT[quantize] * projections
    step_bytes = (weight_bytes + batch * context * kv_per_token) / tp
    return batch * hbm_bytes_per_s / step_bytes


def card_hbm_tbs():
    """HBM bandwidth of this machine's first GPU, TB/s, by its name (the H200's where unknown)."""
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    for part, tbs in (("H200", 4.8), ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35)):
        if part in name:
            return tbs
    return 4.8


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--prompt-lens", default="32", help="prompt lengths, comma-separated")
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b",
                    help="a Qwen3 shape, qwen3-30b-a3b (a mixture of experts), or llama3.1-8b (llama3 RoPE "
                         "scaling, untied head)")
    ap.add_argument("--layers", type=int, default=None, help="keep this many of the shape's layers")
    ap.add_argument("--no-transformers", action="store_true", help="cohort only (large shapes: saves minutes)")
    ap.add_argument("--cb", action="store_true", help="also transformers' continuous batching (generate_batch)")
    ap.add_argument("--hbm-tbs", type=float, default=None,
                    help="HBM bandwidth per GPU, TB/s (default: the card's, H200 4.8, H100 SXM 3.35)")
    ap.add_argument("--quantize", default="bf16", help="comma-separated: bf16, int4, int8, fp8")
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--graphs-only", action="store_true",
                    help="a mixture of experts: only the graph engine (the op-by-op run takes minutes)")
    ap.add_argument("--variants", action="store_true",
                    help="also run tp 1 eagerly (cuda_graphs = false) and with the fp32 models engine")
    ap.add_argument("--preset", default=None,
                    help="cohort's preset of --shape's shape (random weights made by the worker; no folder)")
    args = ap.parse_args()
    if args.preset:
        if args.layers or args.variants or args.cb:
            ap.error("--preset times the preset's own layers with the graph engine: "
                     "no --layers, --variants or --cb")
        args.no_transformers = args.graphs_only = True
    if args.hbm_tbs is None:
        args.hbm_tbs = card_hbm_tbs()
    work = args.work or tempfile.mkdtemp(prefix="cohort_infer_bench_")
    os.makedirs(work, exist_ok=True)  # a preset writes no folder into it, only the jobs' files
    config = qwen3_config(args.shape, args.layers)
    moe = bool(getattr(config, "num_experts", 0))
    torch.manual_seed(0)
    # Built (and its random initialisation run) on the GPU: on the host an
    # 8B model's initialisation takes minutes. A preset's parameters are
    # only counted (the meta device holds no values).
    device = "meta" if args.preset else "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model_dir = None
    if not args.preset:
        model_dir = os.path.join(work, f"{args.shape}-{config.num_hidden_layers}l-random")
        model.save_pretrained(model_dir, safe_serialization=True)
    if args.no_transformers:
        del model  # cohort reads the folder; the GPU memory is its own
        model = None
        torch.cuda.empty_cache()
    else:
        model = model.eval()
    gpus = torch.cuda.device_count()
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for prompt_len in [int(p) for p in args.prompt_lens.split(",")]:
        context = prompt_len + args.new / 2
        for batch in batches:
            hf = float("nan") if args.no_transformers else \
                transformers_decode_rate(model, batch, prompt_len, args.new, config.vocab_size)
            cb = transformers_cb_rate(model_dir, batch, prompt_len, args.new, config.vocab_size) \
                if args.cb else float("nan")
            gen = torch.Generator().manual_seed(batch)
            prompts = torch.randint(0, config.vocab_size, (batch, prompt_len), generator=gen).tolist()
            runs = [(tp, "graphs", True, q) for tp in (1, 2) if tp <= gpus for q in args.quantize.split(",")]
            # A mixture of experts: the graph engine's sparse layers beside
            # the op-by-op models engine (COHORT_INFER_ENGINE=model).
            if moe and not args.graphs_only:
                runs.append((1, "model", True, "bf16"))
            if args.variants:
                runs += [(1, "graphs", False, "bf16"), (1, "model", True, "bf16")]
            for tp, engine, graphs, label in runs:
                quantize, fp8_cache = label.removesuffix("+kv8"), label.endswith("+kv8")
                keys = "" if quantize == "bf16" else f'quantize = "{quantize}"'
                if args.preset:
                    keys = f'preset = "{args.preset}"\n{keys}'
                _, summary = run_cohort(os.path.abspath(args.worker), model_dir, prompts, work,
                                        f"p{prompt_len}-b{batch}-tp{tp}-{engine}-{graphs}-{label.replace('+', '-')}", tp, args.new,
                                        batch, engine=engine, graphs=graphs, model_keys=keys,
                                        infer_keys='kv_cache_dtype = "fp8"' if fp8_cache else "",
                                        timeout=900 if args.preset else 300)
                bound = hbm_bound(config, params, batch, context, tp, args.hbm_tbs * 1e12, quantize)
                rows.append({"context": context, "batch": batch, "tp": tp, "weights": label,
                             "cohort_decode_tok_s": summary["decode_tokens_per_s"],
                             "cohort_ttft_ms": 1e3 * summary["ttft_s_mean"], "cohort_ready_s": summary["load_s"],
                             "cohort_engine": summary["engine"], "transformers_decode_tok_s": hf,
                             "transformers_cb_tok_s": cb, "hbm_bound_tok_s": bound})
                # Each row as it lands: a run cut short by its time limit keeps what it measured.
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.shape} shape ({config.num_hidden_layers} layers), random bf16 weights, {args.new} new tokens, "
          f"{torch.cuda.get_device_name(0)} (bound at {args.hbm_tbs} TB/s), transformers {transformers.__version__}, "
          f"torch {torch.__version__}")
    print("| mean context | batch | tp | weights | cohort engine | cohort decode tok/s | TTFT ms | ready in s "
          "| transformers generate decode tok/s | transformers CB output tok/s (with prefill) "
          "| HBM bound tok/s | cohort / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['context']:.0f} | {r['batch']} | {r['tp']} | {r['weights']} | {r['cohort_engine']} | {r['cohort_decode_tok_s']:.0f} | "
              f"{r['cohort_ttft_ms']:.1f} | {r['cohort_ready_s']:.2f} | {r['transformers_decode_tok_s']:.0f} | "
              f"{r['transformers_cb_tok_s']:.0f} | {r['hbm_bound_tok_s']:.0f} | "
              f"{100 * r['cohort_decode_tok_s'] / r['hbm_bound_tok_s']:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
