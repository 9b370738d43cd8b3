#!/usr/bin/env bash
# Two agents on one host as two nodes of one GPU each (`--gpus`), a coordinator,
# and an elastic training job (nodes = "1:2") on real GPUs; once a checkpoint
# exists, one agent is killed with -9 and the job carries on alone from the
# checkpoint with WORLD_SIZE 1 (issue 10's multi-node runs, at the size a
# 2-GPU machine allows).
#   bench/multinode_gpu.sh [PRESET] [STEPS]       (cohort on PATH)
set -u
preset=${1:-qwen3-0.6b}
steps=${2:-40}
work=${MULTINODE_DIR:-/tmp/cohort-multinode}
rm -rf "$work" && mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
port=$((7100 + RANDOM % 500))
addr=tcp://127.0.0.1:$port
vocab=151936
[[ $preset == tiny ]] && vocab=256
# MULTINODE_FAKE=1: agents with fake GPUs (CPU workers), to try the script anywhere.
fake=()
[[ -n ${MULTINODE_FAKE:-} ]] && fake=(--fake-gpus 2)
python3 -c "
import array, random
r = random.Random(0)
array.array('I', (r.randrange($vocab) for _ in range(1_000_000))).tofile(open('$work/tokens.u32', 'wb'))"
cat >"$work/job.toml" <<TOML
[job]
name = "multinode"
kind = "train"
nodes = "1:2"
gpus_per_node = 1
max_restarts = 2
output_dir = "$work/out"
[model]
preset = "$preset"
max_seq = 512
[parallel]
strategy = "fsdp2"
[train]
data = "$work/tokens.u32"
steps = $steps
micro_batch = 4
global_batch = 8
seq_len = 512
checkpoint_every = 10
log_every = 5
eval_fraction = 0.01
TOML
cohort coordinator --listen "$addr" --state-dir "$work/state" --heartbeat-timeout 3 >"$work/coordinator.log" 2>&1 &
coord=$!
sleep 1
cohort agent --coordinator "$addr" --name node-a "${fake[@]}" --gpus 0 >"$work/agent-a.log" 2>&1 &
agent_a=$!
cohort agent --coordinator "$addr" --name node-b "${fake[@]}" --gpus 1 >"$work/agent-b.log" 2>&1 &
agent_b=$!
sleep 2
cohort nodes --coordinator "$addr"
start=$(date +%s.%N)
COHORT_COORDINATOR=$addr cohort submit "$work/job.toml" --wait >"$work/submit.log" 2>&1 &
submit=$!
for _ in $(seq 1 600); do
  [[ -f $work/out/checkpoints/latest ]] && break
  sleep 0.2
done
echo "checkpoint $(cat "$work/out/checkpoints/latest" 2>/dev/null) exists after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s; kill -9 agent node-b"
kill -9 $agent_b
wait $submit
rc=$?
echo "cohort submit --wait exit code: $rc"
COHORT_COORDINATOR=$addr cohort status job-1 2>&1 | head -40
grep -h "WORLD_SIZE\|world\|resumed" "$work"/out/logs/*/rank-0.log | head -10
python3 - "$work/out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
print(f"metrics: {len(rows)} steps, first loss {rows[0]['loss']:.3f}, last loss {rows[-1]['loss']:.3f}, "
      f"last tokens/s {rows[-1]['tokens_per_s']:.0f}")
PY
kill $agent_a $coord 2>/dev/null
wait 2>/dev/null
exit $rc
