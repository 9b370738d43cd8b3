#!/usr/bin/env bash
# The server's start, requests and drain under valgrind's memcheck: a
# streaming request, a plain one and a keep-alive connection left open when
# SIGINT arrives; any invalid read, write or free fails the test (the
# io_context was once destroyed before the acceptor and the connections).
#   serve_memcheck_test.sh WORKER      (exit 77: valgrind or curl missing)
set -uo pipefail
worker=${1:?worker binary}
for tool in valgrind curl python3; do
  command -v $tool >/dev/null || { echo "SKIP: $tool is not installed (scripts/setup.sh installs it)"; exit 77; }
done
dir=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/job.toml" <<TOML
[job]
name = "memcheck"
kind = "serve"
output_dir = "$dir/out"
[model]
preset = "tiny"
[serve]
host = "127.0.0.1"
port = $port
max_running = 4
max_queue = 16
temperature = 0.0
TOML
COHORT_DEVICE=cpu valgrind --error-exitcode=9 --num-callers=30 --quiet \
  --suppressions="$(dirname "$0")/valgrind.supp" "$worker" "$dir/job.toml" \
  >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 240); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "FAIL: the server did not come up"; cat "$dir/log"; exit 1; }
curl -sf "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"hello","max_tokens":6,"stream":true}' \
  | grep -q '\[DONE\]' || { echo "FAIL: no streamed completion"; cat "$dir/log"; exit 1; }
curl -sf "http://127.0.0.1:$port/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":6}' | grep -q '"choices"' \
  || { echo "FAIL: no chat completion"; cat "$dir/log"; exit 1; }
# A client that keeps its connection open through the shutdown.
python3 - "$port" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
time.sleep(30)
PY
keeper=$!
sleep 1
kill -INT $pid
wait $pid
rc=$?
kill $keeper 2>/dev/null
if [[ $rc -ne 0 ]]; then
  echo "FAIL: the server exited with $rc under memcheck (9: memory errors)"
  cat "$dir/log"
  exit 1
fi
echo "PASS: start, requests and drain clean under memcheck"
