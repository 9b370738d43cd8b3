#!/usr/bin/env python3
"""Serving checks on a GPU machine (issue 40), cohort only:

  python3 bench/serve_checks.py --worker build/bin/cohort-worker --work /tmp/serve-checks

1. KV cache sized by GPU memory: a Qwen3-1.7B-shaped server (preset weights)
   with max_running 2048 and context 4096 (1 TB of cache if reserved) starts
   with the default settings, logs its cache, and serves 64 streams.
2. The same with gpu_memory_fraction 0.05 stops with the numbers.
3. Structured output on a 151,936-token vocabulary (bench/make_hf_folder.py,
   qwen3-small shape): tokens/s of replies held to a JSON schema and of free
   ones, 1 and 16 streams, and a forced tool call.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(worker, work, name, model_lines, serve_lines):
    os.makedirs(f"{work}/{name}", exist_ok=True)
    port = free_port()
    job = (f'[job]\nname = "{name}"\nkind = "serve"\noutput_dir = "{work}/{name}/out"\n'
           f"[model]\n{model_lines}\n[serve]\nport = {port}\n{serve_lines}\n")
    path = f"{work}/{name}/job.toml"
    with open(path, "w") as f:
        f.write(job)
    log = open(f"{work}/{name}/log", "w")
    env = dict(os.environ, COHORT_LOG="info")
    proc = subprocess.Popen([worker, path], stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, port, f"{work}/{name}/log"


def wait_health(proc, port, seconds=600):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/{path}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def rate(port, body, streams, per_stream, path="chat/completions"):
    """Output tokens/s of `streams` clients sending `per_stream` requests each."""
    tokens = [0]
    lock = threading.Lock()
    errors = []

    def client():
        for _ in range(per_stream):
            try:
                r = post(port, path, body)
                with lock:
                    tokens[0] += r["usage"]["completion_tokens"]
                    # A reply cut by max_tokens is a prefix of a document;
                    # one that ended by itself is whole.
                    if body.get("response_format") and r["choices"][0]["finish_reason"] == "stop":
                        json.loads(r["choices"][0]["message"]["content"])
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
    t = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(streams)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return tokens[0] / (time.perf_counter() - t), errors


MODEL = 'preset = "qwen3-1.7b"\nmax_seq = 4096'


def check_memory(args):
    """1. The cache by memory: 1 TB if reserved, so it must be sized."""
    proc, port, log = start(args.worker, args.work, "by_memory", MODEL,
                            "max_running = 2048\nmax_queue = 4096\ncontext = 4096\ntemperature = 0.0")
    up = wait_health(proc, port)
    text = open(log).read()
    cache = re.findall(r"KV cache of .*", text)
    print(f"by_memory: started={up}; {cache[0] if cache else 'no KV cache line'}")
    failed = 0
    if up:
        body = {"prompt": [(7 * i) % 151000 + 10 for i in range(512)], "max_tokens": 256, "temperature": 0,
                "ignore_eos": True}
        tps, errors = rate(port, body, 64, 2, path="completions")
        print(f"by_memory: 64 streams, 512-token prompts, 256 new: {tps:,.0f} output tok/s, {len(errors)} errors")
        failed += bool(errors)
    else:
        print(text[-2000:])
        failed += 1
    print(f"by_memory: exit {stop(proc)}")
    return failed


def check_small(args):
    """2. Too small a share of the GPU: the job stops and says why."""
    proc, port, log = start(args.worker, args.work, "too_small", MODEL,
                            "max_running = 16\ncontext = 4096\ngpu_memory_fraction = 0.03")
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = stop(proc)
        print("too_small: the server started")
        return 1
    lines = [line for line in open(log).read().splitlines() if "does not fit" in line]
    print(f"too_small: exit {code}; {lines[0][-400:] if lines else 'no message'}")
    return int(code == 0 or not lines)


def check_structured(args):
    """3. Structured output over a 151,936-token vocabulary."""
    folder = f"{args.work}/small"
    if not os.path.exists(f"{folder}/config.json"):
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_hf_folder.py"), folder,
                        "--shape", "qwen3-small"], check=True)
    proc, port, log = start(args.worker, args.work, "structured", f'hf_dir = "{folder}"',
                            "max_running = 64\ncontext = 2048")
    failed = 0
    if wait_health(proc, port):
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                   "days": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
                                                   "note": {"type": "string"}}, "required": ["city", "days", "note"]}
        base = {"messages": [{"role": "user", "content": "weather?"}], "max_tokens": args.new, "temperature": 1.0}
        guided = dict(base, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
        for streams in (1, 8):
            free_tps, e1 = rate(port, dict(base, ignore_eos=True), streams, 2)
            t = time.perf_counter()
            json_tps, e2 = rate(port, guided, streams, 2)
            print(f"structured: {streams} streams: free {free_tps:,.0f} tok/s, json_schema {json_tps:,.0f} tok/s "
                  f"({time.perf_counter() - t:.1f} s), {len(e1) + len(e2)} errors {(e1 + e2)[:2]}")
            failed += bool(e1 or e2)
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
        r = post(port, "chat/completions", dict(base, tools=tools, tool_choice="required"))
        call = r["choices"][0]["message"].get("tool_calls", [{}])[0]
        print(f"structured: forced call {call.get('function', {}).get('name')} finish {r['choices'][0]['finish_reason']} "
              f"arguments {call.get('function', {}).get('arguments', '')[:80]}")
        if r["choices"][0]["finish_reason"] == "tool_calls":
            json.loads(call["function"]["arguments"])
    else:
        print(open(log).read()[-2000:])
        failed += 1
    print(f"structured: exit {stop(proc)}")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default="build/bin/cohort-worker")
    ap.add_argument("--work", default="/tmp/serve-checks")
    ap.add_argument("--skip", default="", help="checks to leave out, comma-separated: memory, small, structured")
    ap.add_argument("--new", type=int, default=128, help="max_tokens of the structured-output requests")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    skip = set(args.skip.split(","))
    failed = 0
    for name, check in (("memory", check_memory), ("small", check_small), ("structured", check_structured)):
        if name not in skip:
            failed += check(args)
    print("serve checks:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
