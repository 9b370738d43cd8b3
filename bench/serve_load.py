#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers: cohort's `kind = "serve"` and
`transformers serve` alike (standard library only, so it runs anywhere).

Each level keeps CONCURRENCY streaming requests in flight until REQUESTS have
finished, and reports output tokens/s over the level's wall time, time to
first token and inter-token latency (p50/p99, from the stream's chunk
arrival times) and end-to-end latency.

  bench/serve_load.py --url http://127.0.0.1:8000/v1 --concurrency 1,16,64,256
  bench/serve_load.py --url ... --mixed            # prompt 16-1024, output 16-512 tokens
  bench/serve_load.py --url ... --endpoint completions --json out.json

Prompts are "hello" repeated (about one BPE token each for Qwen/Llama
tokenizers; --token-ids sends completions prompts as token ids instead,
and asks for the ids back, so that a token whose text is held for its
character's next bytes still counts when it arrives)
after a few words that number the request, so no two prompts share a KV
block and a server's prefix cache finds nothing; --shared-prefix N puts the
same N words before that number (a system prompt or a conversation every
request repeats).
Requests ask for exactly max_tokens: `ignore_eos` for servers that know it
(cohort, vLLM); start others so that they do not stop early, or read the
reported output tokens, which count what came back (usage when the server
sends it, else one token per content chunk).
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


async def read_body_lines(reader, chunked):
    """Yields the body's lines, decoding chunked transfer encoding."""
    pending = b""
    while True:
        if chunked:
            size_line = await reader.readline()
            if not size_line:
                break
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            data = await reader.readexactly(size)
            await reader.readexactly(2)
        else:
            data = await reader.read(65536)
            if not data:
                break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line.rstrip(b"\r")
    if pending:
        yield pending


async def one_request(args, url, body):
    """Sends one streaming request; returns (ttft, gaps, tokens, e2e) or raises."""
    reader, writer = await asyncio.open_connection(url.hostname, url.port or 80)
    payload = json.dumps(body).encode()
    headers = [f"POST {url.path.rstrip('/')}/{args.endpoint_path} HTTP/1.1", f"Host: {url.netloc}",
               "Content-Type: application/json", f"Content-Length: {len(payload)}", "Accept: text/event-stream",
               "Connection: close"]
    if args.api_key:
        headers.append(f"Authorization: Bearer {args.api_key}")
    t0 = time.perf_counter()
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + payload)
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        rest = await reader.read(2000)
        writer.close()
        raise RuntimeError(f"{status.decode().strip()}: {rest.decode(errors='replace')[-300:]}")
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    times, usage_tokens = [], None
    async for line in read_body_lines(reader, chunked):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage_tokens = chunk["usage"].get("completion_tokens")
        for choice in chunk.get("choices", []):
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if text or choice.get("token_ids"):
                times.append(time.perf_counter())
    writer.close()
    end = time.perf_counter()
    if not times:
        raise RuntimeError("the stream carried no tokens")
    gaps = [b - a for a, b in zip(times, times[1:])]
    return times[0] - t0, gaps, usage_tokens or len(times), end - t0


def request_body(args, rng, index):
    if args.mixed:
        prompt_len, out_len = rng.randint(16, 1024), rng.randint(16, 512)
    else:
        prompt_len, out_len = args.prompt_tokens, args.output_tokens
    body = {"model": args.models[index % len(args.models)], "max_tokens": out_len, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    unique = random.SystemRandom()  # what no other run draws (the lengths stay seeded)
    if args.token_ids:
        # Exactly shared_prefix + prompt_len ids: the shared ones fixed, the
        # first of the rest drawn afresh so no two prompts share a block.
        ids = [1000 + (7 * i) % 50000 for i in range(args.shared_prefix)]
        ids += [unique.randint(1000, 100000) for _ in range(min(4, prompt_len))]
        ids += [rng.randint(1000, 100000) for _ in range(prompt_len - min(4, prompt_len))]
        body["prompt"] = ids
        # A token whose bytes do not yet end a character streams a chunk
        # without text; its id still marks when the token came (TTFT, ITL).
        body["return_token_ids"] = True
        return body
    shared = "hello " * args.shared_prefix
    text = f"{shared}request {index} {unique.getrandbits(40)}: " + " ".join(["hello"] * prompt_len)
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


async def run_level(args, url, concurrency):
    rng = random.Random(args.seed + concurrency)
    total = max(args.min_requests, args.requests_per_stream * concurrency)
    bodies = [request_body(args, rng, i) for i in range(total)]
    results, errors = [], []
    queue = list(reversed(bodies))

    async def worker():
        while queue:
            body = queue.pop()
            try:
                results.append(await one_request(args, url, body))
            except Exception as e:  # noqa: BLE001 - reported, never fatal
                errors.append(str(e))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in results]
    gaps = [g for r in results for g in r[1]]
    tokens = sum(r[2] for r in results)
    return {"concurrency": concurrency, "requests": len(results), "errors": len(errors),
            "first_error": errors[0] if errors else "", "wall_s": wall, "output_tokens": tokens,
            "output_tok_s": tokens / wall if wall > 0 else 0.0,
            "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
            "itl_p50_ms": 1e3 * percentile(gaps, 50), "itl_p99_ms": 1e3 * percentile(gaps, 99),
            "e2e_p50_s": statistics.median([r[3] for r in results]) if results else float("nan")}


def first_model(args, url):
    import urllib.request
    req = urllib.request.Request(f"{args.url.rstrip('/')}/models")
    if args.api_key:
        req.add_header("Authorization", f"Bearer {args.api_key}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the server's /v1 URL")
    p.add_argument("--model", help="model id, or several (a,b,c) that the requests take in turn "
                   "(default: the first /v1/models lists)")
    p.add_argument("--api-key", default="")
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--concurrency", default="1,16,64,256")
    p.add_argument("--requests-per-stream", type=int, default=4, help="requests per level = this x concurrency")
    p.add_argument("--min-requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--mixed", action="store_true", help="prompt 16-1024 and output 16-512 tokens, seeded")
    p.add_argument("--shared-prefix", type=int, default=0, help="words (or ids) every prompt starts with")
    p.add_argument("--token-ids", action="store_true",
                   help="completions prompts as token ids of exactly the lengths asked (no tokenizer between)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="", help="a name for this server in the output")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    args.endpoint_path = "chat/completions" if args.endpoint == "chat" else "completions"
    url = urllib.parse.urlparse(args.url)
    args.model = args.model or first_model(args, url)
    args.models = args.model.split(",")
    shape = "mixed" if args.mixed else f"prompt {args.prompt_tokens}, output {args.output_tokens}"
    print(f"# {args.label or args.url} model {args.model}, {args.endpoint}, {shape}")
    print("| concurrency | requests | errors | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | e2e p50 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c in [int(x) for x in args.concurrency.split(",")]:
        r = asyncio.run(run_level(args, url, c))
        r.update({"label": args.label, "model": args.model, "shape": shape, "endpoint": args.endpoint})
        rows.append(r)
        print(f"| {c} | {r['requests']} | {r['errors']} | {r['output_tok_s']:.0f} | {r['ttft_p50_ms']:.1f} | "
              f"{r['ttft_p99_ms']:.1f} | {r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} | {r['e2e_p50_s']:.2f} |",
              flush=True)
        if r["errors"]:
            print(f"#   first error: {r['first_error']!r}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
