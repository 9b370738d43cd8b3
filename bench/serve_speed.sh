#!/usr/bin/env bash
# The serving figures issue 40 is judged by, for one cohort-worker binary:
#   bench/serve_speed.sh WORKER HF_DIR OUT_DIR [LABEL]
# A serve job on HF_DIR (bench/make_hf_folder.py makes one), then streaming
# completions of token-id prompts of exactly the lengths below, greedy,
# ignore_eos:
#   ttft2k    one 2,048-token prompt at a time, 8 new tokens (time to first token)
#   single    one stream, 512-token prompts, 256 new
#   burst64   64 requests at once, 512/256
#   streams64 64 streams, 4 requests each, 512/256
#   mixed64   64 streams, prompts 16-1,024 and outputs 16-512 tokens
#   prefix2k  one at a time, 2,048 tokens every prompt shares, then 16 of its
#             own, 8 new tokens: after the first, the prefix is cached
# Tables go to stdout and OUT_DIR/LABEL-*.json, each load followed by its
# mean TTFT as the server measured it (/metrics); MAX_BATCHED sets
# serve.max_batched_tokens when the binary knows it, PREFIX_CACHING=false
# turns serve.prefix_caching off, KV_TOKENS sets serve.kv_cache_tokens,
# KV_DTYPE=fp8 sets serve.kv_cache_dtype, ITL_TARGET sets serve.itl_target_ms
# (0: off), and
# LOADS="single streams64" (or single+streams64) runs only those loads.
# ADAPTERS=N serves N random rank-16 LoRA adapters beside the base
# (bench/make_peft_adapters.py) and the requests take them in turn.
set -euo pipefail
worker=$(realpath "$1") hf=$(realpath "$2") out=$(mkdir -p "$3" && realpath "$3") label=${4:-cohort}
cd "$(dirname "$0")/.."
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
kv_dtype_line=${KV_DTYPE:+kv_cache_dtype = \"$KV_DTYPE\"}
cat >"$out/$label.toml" <<TOML
[job]
name = "bench"
kind = "serve"
output_dir = "$out/$label-run"
[model]
hf_dir = "$hf"
max_seq = 4096
[serve]
port = $port
max_running = 256
max_queue = 1024
context = 4096
temperature = 0.0
${MAX_BATCHED:+max_batched_tokens = $MAX_BATCHED}
${PREFIX_CACHING:+prefix_caching = $PREFIX_CACHING}
${KV_TOKENS:+kv_cache_tokens = $KV_TOKENS}
${ITL_TARGET:+itl_target_ms = $ITL_TARGET}
$kv_dtype_line
TOML
models=""
if [[ ${ADAPTERS:-0} -gt 0 ]]; then
  python3 bench/make_peft_adapters.py "$hf" "$out/$label-adapters" --count "$ADAPTERS" >/dev/null
  echo "[serve.adapters]" >>"$out/$label.toml"
  for ((a = 0; a < ADAPTERS; ++a)); do
    echo "a$a = \"$out/$label-adapters/a$a\"" >>"$out/$label.toml"
    models+="${models:+,}a$a"
  done
fi
# STEP_TIMES=1: the engine logs its decode steps' GPU, launch and wall time at the end.
env COHORT_LOG=info ${STEP_TIMES:+COHORT_INFER_STEP_TIMES=1} "$worker" "$out/$label.toml" >"$out/$label.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $pid 2>/dev/null || { echo "the server exited:" >&2; tail -20 "$out/$label.log" >&2; exit 1; }
  sleep 1
done
# The server's own time to first token, summed and counted so far (its
# /metrics histogram: from a request's arrival to its first token), and the
# sums of its parts: the wait for a slot and the prefill.
server_ttft() {
  curl -s "http://127.0.0.1:$port/metrics" |
    awk '/^cohort_serve_time_to_first_token_seconds_sum/ {s = $2} /^cohort_serve_time_to_first_token_seconds_count/ {c = $2}
         /^cohort_serve_request_queue_time_seconds_sum/ {q = $2} /^cohort_serve_request_prefill_time_seconds_sum/ {p = $2}
         END {print s + 0, c + 0, q + 0, p + 0}'
}
load() {  # name args...
  local name=$1; shift
  [[ -z ${LOADS:-} || " ${LOADS//+/ } " == *" $name "* ]] || return 0
  local before after
  before=$(server_ttft)
  python3 bench/serve_load.py --url "http://127.0.0.1:$port/v1" --label "$label $name" --endpoint completions \
    ${models:+--model "$models"} --token-ids --json "$out/$label-$name.json" "$@" | tail -1 | sed "s/^/$name /"
  after=$(server_ttft)
  # The load's mean TTFT as the server saw it (the client's includes its own send and parse).
  echo "$before $after" | awk -v n="$name" '$6 > $2 {printf "%s server TTFT mean %.2f ms over %d requests (queued %.2f, prefill %.2f)\n",
    n, 1e3 * ($5 - $1) / ($6 - $2), $6 - $2, 1e3 * ($7 - $3) / ($6 - $2), 1e3 * ($8 - $4) / ($6 - $2)}'
}
echo "# $label: $(grep -o 'ready in [0-9.]* s' "$out/$label.log" | head -1)"
echo "| load | concurrency | requests | errors | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | e2e p50 s |"
load ttft2k --concurrency 1 --requests-per-stream 8 --min-requests 8 --prompt-tokens 2048 --output-tokens 8
load single --concurrency 1 --requests-per-stream 4 --min-requests 4 --prompt-tokens 512 --output-tokens 256
load burst64 --concurrency 64 --requests-per-stream 1 --min-requests 64 --prompt-tokens 512 --output-tokens 256
load streams64 --concurrency 64 --requests-per-stream 4 --prompt-tokens 512 --output-tokens 256
load mixed64 --concurrency 64 --requests-per-stream 4 --mixed
load prefix2k --concurrency 1 --requests-per-stream 8 --min-requests 8 --shared-prefix 2048 --prompt-tokens 16 \
  --output-tokens 8
curl -s "http://127.0.0.1:$port/metrics" | grep -E "^cohort_serve_(prefix_cache|preemptions)" || true
kill -INT $pid; wait $pid || true
grep -E "decode steps of (1|64|256) rows" "$out/$label.log" | cut -c1-260 || true
