#!/usr/bin/env bash
# deploy/slurm/cohort.sbatch without Slurm: `bash -n` and shellcheck, then the
# script run as sbatch would run it, inside a fake two-node allocation whose
# `srun` starts one task per node on this machine (each with its own
# SLURM_PROCID/SLURM_NODEID/SLURMD_NODENAME) and whose `scontrol show
# hostnames` answers localhost for every node. A 2-node train job (one rank
# per node, Gloo between them) must succeed, a failing job must give exit 1,
# and bad use must give exit 2.
#   sbatch_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
script=$src/deploy/slurm/cohort.sbatch
tmp=$(mktemp -d /tmp/cohort-sbatch-XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

bash -n "$script" || fail "bash -n $script"
if command -v shellcheck >/dev/null; then
  shellcheck "$script" || fail "shellcheck $script"
else
  echo "shellcheck not found: syntax checked with bash -n only"
fi

mkdir -p "$tmp/bin"
cat >"$tmp/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
# scontrol show hostnames LIST: one line per node; every fake node is this host.
[[ $1 == show && $2 == hostnames ]] || { echo "fake scontrol: only 'show hostnames'" >&2; exit 1; }
for ((i = 0; i < ${FAKE_SLURM_NODES:?}; i++)); do echo localhost; done
EOF
cat >"$tmp/bin/srun" <<'EOF'
#!/usr/bin/env bash
# srun [options] COMMAND...: --ntasks tasks (one per fake node) of COMMAND,
# each with the variables srun sets; SIGTERM is forwarded to the tasks.
ntasks=1
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    --ntasks=*) ntasks=${1#--ntasks=} ;;
    --nodes=* | --nodelist=* | --ntasks-per-node=* | --kill-on-bad-exit=*) ;;
    --overlap | --label) ;;
    *) echo "fake srun: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
step_file=${FAKE_SLURM_DIR:?}/step
step=$(($(cat "$step_file" 2>/dev/null || echo -1) + 1))
echo "$step" >"$step_file"
pids=()
for ((t = 0; t < ntasks; t++)); do
  SLURM_STEP_ID=$step SLURM_PROCID=$t SLURM_NTASKS=$ntasks SLURM_NODEID=$t SLURM_LOCALID=0 \
    SLURMD_NODENAME=fake$t "$@" &
  pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for pid in "${pids[@]}"; do
  while true; do
    wait "$pid" && break
    code=$?
    kill -0 "$pid" 2>/dev/null && continue   # interrupted by the trap; wait again
    ((code > rc)) && rc=$code
    break
  done
done
exit "$rc"
EOF
chmod +x "$tmp/bin/scontrol" "$tmp/bin/srun"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for ((i = 0; i < 200; i++)); do echo "line $i: the quick brown fox jumps over the lazy dog" >>"$tmp/corpus.txt"; done

# run_batch JOB_ID ARGS...: the script as sbatch runs it, in $tmp/submit.
port=0
run_batch() {
  local job_id=$1
  shift
  port=$(free_port)
  mkdir -p "$tmp/submit"
  (cd "$tmp/submit" && env PATH="$tmp/bin:$PATH" FAKE_SLURM_NODES=2 FAKE_SLURM_DIR="$tmp" \
    SLURM_JOB_ID="$job_id" SLURM_JOB_NODELIST="fake[0-1]" SLURM_SUBMIT_DIR="$tmp/submit" \
    COHORT="$build/bin/cohort" COHORT_PORT="$port" COHORT_AGENT_ARGS="--cpu-slots 1" \
    COHORT_NODES_TIMEOUT=30 bash "$script" "$@")
}

echo "== a 2-node train job"
rc=0
run_batch 101 "$src/jobs/examples/quickstart.toml" --set job.nodes=2 --set job.gpus_per_node=1 \
  --set job.output_dir="$tmp/run" --set train.data="$tmp/corpus.txt" --set train.steps=3 \
  --set train.warmup_steps=1 --set train.eval_every=0 --set train.checkpoint_every=0 \
  --set train.sample_tokens=0 --set train.precision=fp32 >"$tmp/train.log" 2>&1 || rc=$?
run_dir=$tmp/submit/cohort-101
[[ $rc == 0 ]] || fail "the train job's script exited $rc:
$(cat "$tmp/train.log" "$run_dir/coordinator.log" "$run_dir/agents.log" 2>/dev/null)"
grep -q '"step":3' "$tmp/run/metrics.jsonl" || fail "no step 3 in metrics.jsonl"
grep -q "2 nodes" "$tmp/train.log" || fail "the script did not report its nodes: $(cat "$tmp/train.log")"
for node in fake0 fake1; do
  grep -q "agent $node" "$run_dir/agents.log" || fail "no agent $node: $(cat "$run_dir/agents.log")"
done
grep -q "world 2" "$tmp/train.log" || fail "the job did not train on 2 ranks: $(cat "$tmp/train.log")"
[[ $(stat -c %a "$run_dir/keys") == 700 ]] || fail "the allocation's keys are readable by others"
# Nothing is left running: the agents and the coordinator stopped with the script.
if pgrep -f "tcp://localhost:$port" >/dev/null; then fail "processes of the allocation outlived the script"; fi
echo "train job: ok (2 nodes, 2 ranks, exit 0)"

echo "== a failing job"
cat >"$tmp/fails.toml" <<EOF
[job]
name = "fails"
kind = "command"
nodes = 2
gpus_per_node = 1
output_dir = "$tmp/fails"
[command]
argv = ["sh", "-c", "exit 3"]
EOF
rc=0
run_batch 102 "$tmp/fails.toml" >"$tmp/fails.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "a failing job gave exit $rc, not 1: $(cat "$tmp/fails.log")"
grep -q "exited with code 3" "$tmp/fails.log" || fail "no root cause: $(cat "$tmp/fails.log")"
echo "failing job: ok (exit 1)"

echo "== bad use"
rc=0
run_batch 103 >"$tmp/usage.log" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "no job file gave exit $rc, not 2"
grep -q "usage: sbatch" "$tmp/usage.log" || fail "no usage line: $(cat "$tmp/usage.log")"
rc=0
env -u SLURM_JOB_ID bash "$script" job.toml >"$tmp/outside.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || fail "the script ran outside an allocation"
grep -q "not inside a Slurm allocation" "$tmp/outside.log" || fail "$(cat "$tmp/outside.log")"
echo "PASS"
