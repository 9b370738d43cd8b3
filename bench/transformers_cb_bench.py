#!/usr/bin/env python3
"""transformers' continuous-batching engine (generate_batch, the engine under
`transformers serve --continuous-batching`) on a Hugging Face folder, for the
serving comparison where `transformers serve` itself cannot start (its HTTP
dependencies, fastapi/uvicorn/openai, are not installed on the GPU machine).

  python3 bench/transformers_cb_bench.py HF_DIR [--requests 64] [--prompt 128] [--output 128]

The prompts are bench/serve_load.py's ("hello" repeated, one token each with
bench/make_hf_folder.py's tokenizer). Prints one JSON line: output tokens/s
over the wall time of the second of two runs (the first warms up), and the
inter-token latency p50/p99 from the recorded token timestamps where the
installed version records them.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation import GenerationConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--attn", default="paged|sdpa")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, attn_implementation=args.attn, dtype=torch.bfloat16,
                                                 device_map="cuda")
    hello = tok.encode(" hello")[0]
    inputs = [[hello] * args.prompt for _ in range(args.requests)]
    config = GenerationConfig(max_new_tokens=args.output, do_sample=False, eos_token_id=-1, pad_token_id=0)
    result = {}
    for attempt in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        outputs = model.generate_batch(inputs=inputs, generation_config=config, progress_bar=False,
                                       record_timestamps=True)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        tokens = sum(len(o.generated_tokens) for o in outputs.values())
        gaps = []
        for o in outputs.values():
            stamps = getattr(o, "timestamps", None) or []
            gaps += [1e3 * (b - a) for a, b in zip(stamps, stamps[1:])]
        gaps.sort()
        result = {"engine": "transformers generate_batch", "attn": args.attn, "requests": args.requests,
                  "output_tokens": tokens, "wall_s": wall, "output_tok_s": tokens / wall,
                  "itl_p50_ms": statistics.median(gaps) if gaps else None,
                  "itl_p99_ms": gaps[int(0.99 * (len(gaps) - 1))] if gaps else None}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
