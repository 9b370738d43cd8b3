#!/usr/bin/env python3
"""PyTorch eager baseline for bench/models_train_bench.cc: forward + backward +
AdamW tokens/s of the Qwen3-0.6B shape (random init) with transformers, bf16
autocast over fp32 master weights, eager attention, on one GPU.

    python3 bench/models_torch_bench.py [--batch 4] [--seq 1024] [--steps 10]
Prints one JSON line with the same fields as models_train_bench.
"""
import argparse
import json
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    cfg = transformers.Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=40960,
        attn_implementation="eager")
    model = transformers.AutoModelForCausalLM.from_config(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    step(), step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens_per_s = args.batch * args.seq * args.steps / seconds
    n_params = sum(p.numel() for p in model.parameters())
    flops = 6 * n_params + 12 * cfg.num_hidden_layers * args.seq * 16 * 128
    print(json.dumps({"preset": "qwen3-0.6b", "device": "cuda", "impl": "pytorch-eager",
                      "batch": args.batch, "seq": args.seq, "steps": args.steps,
                      "ms_per_step": 1e3 * seconds / args.steps, "tokens_per_s": tokens_per_s,
                      "mfu": tokens_per_s * flops / 989e12, "loss": float(loss),
                      "device_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}))


if __name__ == "__main__":
    main()
