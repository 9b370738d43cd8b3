"""PyTorch baseline for the training benchmark: the Qwen3-0.6B shape (or
1.7B, or cohort's qwen3-moe-2.4b-a0.6b preset: Qwen3-0.6B's attention with 28
sparse layers of 64 experts of 384, top 8), random init, bf16 autocast over
fp32 parameters, fused AdamW, one process per GPU. The MFU of a mixture of
experts counts its active parameters.

  torchrun --nproc_per_node 2 bench/torch_train_baseline.py --strategy ddp
  torchrun --nproc_per_node 2 bench/torch_train_baseline.py --strategy fsdp2
  python3 bench/torch_train_baseline.py --strategy single

Prints one JSON line: tokens/s for the whole job, per GPU, and peak memory.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def qwen3_06b_config(seq):
    from transformers import Qwen3Config
    return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=max(seq, 4096))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", choices=["single", "ddp", "fsdp2"], default="single")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--preset", choices=["qwen3-0.6b", "qwen3-1.7b", "qwen3-moe-2.4b-a0.6b"], default="qwen3-0.6b")
    ap.add_argument("--bf16-params", action="store_true",
                    help="bf16 parameters, gradients and AdamW moments, no autocast: transformers' compiled "
                    "grouped_mm experts take only bf16 weights")
    ap.add_argument("--experts", default="", help="transformers' experts backend for the MoE preset "
                    "(eager, grouped_mm, batched_mm; empty: the library's default)")
    args = ap.parse_args()

    distributed = args.strategy != "single"
    if distributed:
        dist.init_process_group("nccl")
        local = int(os.environ["LOCAL_RANK"])
    else:
        local = 0
    torch.cuda.set_device(local)
    world = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0

    from transformers import Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    config = qwen3_06b_config(args.seq)
    if args.preset == "qwen3-1.7b":
        config.hidden_size, config.intermediate_size = 2048, 6144
    moe = args.preset == "qwen3-moe-2.4b-a0.6b"
    if moe:  # models/config.cc's preset
        config = Qwen3MoeConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1e6,
                                rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=max(args.seq, 4096),
                                num_experts=64, num_experts_per_tok=8, moe_intermediate_size=384, norm_topk_prob=True,
                                decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False)
    config._attn_implementation = args.attn
    model = (Qwen3MoeForCausalLM if moe else Qwen3ForCausalLM)(config).cuda()
    if args.bf16_params:
        model = model.to(torch.bfloat16)
    experts = ""
    if moe:
        if args.experts:
            model.set_experts_implementation(args.experts)
        try:
            experts = str(model.get_experts_implementation().get("", ""))
        except AttributeError:  # a transformers without the experts interface
            experts = "eager"
    n_params = sum(p.numel() for p in model.parameters())  # the tied embedding once
    if moe:  # the experts a token does not reach do no work
        idle = config.num_hidden_layers * (config.num_experts - config.num_experts_per_tok) * 3 * \
            config.hidden_size * config.moe_intermediate_size
        n_params -= idle
    if args.strategy == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    elif args.strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    if args.compile:
        model = torch.compile(model)
    tokens = torch.randint(0, config.vocab_size, (args.micro, args.seq + 1), device="cuda")
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.strategy != "fsdp2" and not args.bf16_params):
            out = model(input_ids=tokens[:, :-1], labels=tokens[:, 1:])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[5:])
    job_tokens = args.micro * args.seq * world / step_s
    if rank == 0:
        print(json.dumps({"impl": "pytorch" + (" compile" if args.compile else " eager") +
                                  (" bf16" if args.bf16_params else ""), "preset": args.preset,
                          "attn": args.attn, **({"experts": experts} if moe else {}),
                          "params": "bf16" if args.bf16_params else "fp32", "strategy": args.strategy, "gpus": world, "seq": args.seq,
                          "micro_batch": args.micro, "tokens_per_s": round(job_tokens),
                          "tokens_per_s_per_gpu": round(job_tokens / world),
                          "mfu": round(6 * n_params * job_tokens / world / 989e12, 4),
                          "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
