#!/usr/bin/env bash
# Serving side by side on one GPU (issue 18): cohort's `kind = "serve"` and
# `transformers serve` on the same Hugging Face folder, the same load from
# bench/serve_load.py (concurrency 1, 16, 64, 256; fixed 128/128 and mixed).
#   bench/serve_bench.sh HF_DIR OUT_DIR
# Each server runs alone on the GPU in turn; results go to OUT_DIR/*.json and
# the tables to stdout (paste into bench/RESULTS.md with the date and commit).
set -euo pipefail
hf=$(realpath "$1") out=$(mkdir -p "$2" && realpath "$2")
cd "$(dirname "$0")/.."
levels=${LEVELS:-1,16,64,256}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# REQS: requests per stream and level (serve_load.py's --requests-per-stream);
# MIXED=0 leaves out the mixed-length pass.
load() {  # label url model
  python3 bench/serve_load.py --url "$2" --model "$3" --label "$1" --endpoint chat --concurrency "$levels" \
    --requests-per-stream "${REQS:-4}" --json "$out/$1-fixed.json"
  [[ ${MIXED:-1} == 0 ]] && return 0
  python3 bench/serve_load.py --url "$2" --model "$3" --label "$1" --endpoint chat --concurrency "$levels" \
    --requests-per-stream "${REQS:-4}" --mixed --json "$out/$1-mixed.json"
}
wait_up() {  # url pid: until the URL answers, the server exits, or 600 s
  for _ in $(seq 600); do
    curl -sf "$1" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "the server for $1 exited" >&2; return 1; }
    sleep 1
  done
  echo "no server at $1" >&2; return 1
}

cat >"$out/serve.toml" <<TOML
[job]
name = "bench"
kind = "serve"
output_dir = "$out/cohort"
[model]
hf_dir = "$hf"
[serve]
port = $port
max_running = ${MAX_RUNNING:-256}
max_queue = 1024
context = 2048
temperature = 0.0
TOML
build/bin/cohort run "$out/serve.toml" >"$out/cohort.log" 2>&1 &
cohort_pid=$!
wait_up "http://127.0.0.1:$port/health" $cohort_pid
load cohort "http://127.0.0.1:$port/v1" bench
kill -INT $cohort_pid; wait $cohort_pid || true

# transformers serve loads the model a request names; --continuous-batching is
# its batched path (flags as of transformers 5.x: check `transformers serve -h`).
transformers serve --port "$port" --continuous-batching >"$out/transformers.log" 2>&1 &
tf_pid=$!
wait_up "http://127.0.0.1:$port/v1/models" $tf_pid || { tail -20 "$out/transformers.log"; exit 1; }
load transformers "http://127.0.0.1:$port/v1" "$hf"
kill $tf_pid; wait $tf_pid || true
