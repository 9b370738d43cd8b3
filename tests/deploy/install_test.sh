#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then the installed tree used as a
# cluster would use it: the layout, units that systemd accepts and that point
# into the prefix, a train job run by the installed coordinator and agent
# (cohort-worker found beside cohort, then moved and named by
# --worker-binary), `cohort run` of an installed example; then the .deb that
# cpack makes, read back with dpkg-deb.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/cohort-install-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
expect_in() {  # expect_in FILE TEXT: FILE contains TEXT
  grep -qF -- "$2" "$1" || fail "$1 lacks '$2':"$'\n'"$(cat "$1")"
}
wait_for_line() {  # wait_for_line FILE TEXT SECONDS
  for ((i = 0; i < $3 * 10; i++)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no '$2' in $1 after $3 s:"$'\n'"$(cat "$1" 2>/dev/null)"
}

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || fail "cmake --install: $(cat "$tmp/install.log")"

echo "== layout"
for f in bin/cohort bin/cohort-worker share/cohort/slurm/cohort.sbatch; do
  [[ -x $prefix/$f ]] || fail "$f is not installed as an executable"
done
for f in share/cohort/examples/quickstart.toml share/cohort/examples/print_env.toml \
  share/cohort/systemd/coordinator.env share/cohort/systemd/agent.env \
  lib/systemd/system/cohort-coordinator.service lib/systemd/system/cohort-agent.service \
  lib/sysusers.d/cohort.conf share/doc/cohort/README.md share/doc/cohort/docs/dashboard.png \
  share/doc/cohort/docs/cluster-operations.md share/doc/cohort/docs/job-file.md; do
  [[ -f $prefix/$f ]] || fail "$f is not installed"
done
# Nothing installed points back into the build or source tree.
if grep -rlF -e "$build" -e "$src" "$prefix/lib" "$prefix/share" >"$tmp/refs"; then
  fail "installed files name the build or source tree: $(cat "$tmp/refs")"
fi
for b in cohort cohort-worker; do
  if readelf -d "$prefix/bin/$b" | grep -E 'R(UN)?PATH' | grep -qF "$build"; then
    fail "bin/$b's RPATH points into the build tree"
  fi
done

echo "== systemd units"
units=("$prefix/lib/systemd/system/cohort-coordinator.service" "$prefix/lib/systemd/system/cohort-agent.service")
expect_in "${units[0]}" "ExecStart=$prefix/bin/cohort coordinator"
expect_in "${units[1]}" "ExecStart=$prefix/bin/cohort agent"
expect_in "${units[1]}" "Delegate=yes"
for u in "${units[@]}"; do
  for key in KillMode=mixed Restart=on-failure RestartPreventExitStatus=2 "User=cohort" \
    "EnvironmentFile=-/etc/cohort/" "Documentation=file://$prefix/share/doc/cohort/README.md" \
    "file://$prefix/share/doc/cohort/docs/cluster-operations.md"; do
    expect_in "$u" "$key"
  done
done
expect_in "${units[0]}" "StateDirectory=cohort"
expect_in "${units[0]}" "LimitNOFILE="
if command -v systemd-analyze >/dev/null; then
  # Unknown keys and bad values are only warnings for systemd: any output fails.
  if ! systemd-analyze verify "${units[@]}" >"$tmp/verify.log" 2>&1 || [[ -s $tmp/verify.log ]]; then
    fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
  fi
  echo "systemd-analyze verify: clean"
else
  echo "systemd-analyze not found: units checked by their keys only"
fi

echo "== the installed binaries run a cluster, away from the tree"
cd "$tmp"
cat >"$tmp/corpus.txt" <<'EOF'
the quick brown fox jumps over the lazy dog and the five boxing wizards jump quickly
EOF
for ((i = 0; i < 200; i++)); do echo "line $i of the corpus, the lazy dog sleeps" >>"$tmp/corpus.txt"; done
train_sets=(--set train.data="$tmp/corpus.txt" --set train.steps=3 --set train.warmup_steps=1
  --set train.eval_every=0 --set train.checkpoint_every=0 --set train.sample_tokens=0
  --set train.precision=fp32 --set job.gpus_per_node=2)
run_cluster() {  # run_cluster NAME WORKER_FLAGS...: a coordinator, an agent, one train job
  local name=$1 endpoint="ipc://$tmp/$1.sock"
  shift
  "$prefix/bin/cohort" coordinator --listen "$endpoint" >"$tmp/$name-coordinator.log" 2>&1 &
  pids+=($!)
  "$prefix/bin/cohort" agent --coordinator "$endpoint" --cpu-slots 2 --name "$name" "$@" \
    >"$tmp/$name-agent.log" 2>&1 &
  pids+=($!)
  wait_for_line "$tmp/$name-agent.log" "built-in worker" 20
  local rc=0
  "$prefix/bin/cohort" submit "$prefix/share/cohort/examples/quickstart.toml" --coordinator "$endpoint" \
    --set job.output_dir="$tmp/$name-run" "${train_sets[@]}" --wait >"$tmp/$name-submit.log" 2>&1 || rc=$?
  [[ $rc == 0 ]] || fail "the $name job exited $rc: $(cat "$tmp/$name-submit.log" "$tmp/$name-agent.log")"
  expect_in "$tmp/$name-run/metrics.jsonl" '"step":3'
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
run_cluster beside
expect_in "$tmp/beside-agent.log" "built-in worker $prefix/bin/cohort-worker"
echo "cohort-worker found beside cohort: $prefix/bin/cohort-worker"
mkdir -p "$tmp/elsewhere"
mv "$prefix/bin/cohort-worker" "$tmp/elsewhere/cohort-worker"
run_cluster moved --worker-binary "$tmp/elsewhere/cohort-worker"
expect_in "$tmp/moved-agent.log" "built-in worker $tmp/elsewhere/cohort-worker"
echo "cohort-worker given by --worker-binary: $tmp/elsewhere/cohort-worker"
rc=0
"$prefix/bin/cohort" agent --coordinator "ipc://$tmp/none.sock" --cpu-slots 1 \
  --worker-binary "$tmp/nowhere/cohort-worker" >"$tmp/bad-agent.log" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "an agent with a missing --worker-binary exited $rc, not 2"
expect_in "$tmp/bad-agent.log" "--worker-binary $tmp/nowhere/cohort-worker: No such file or directory"
mv "$tmp/elsewhere/cohort-worker" "$prefix/bin/cohort-worker"
"$prefix/bin/cohort" run "$prefix/share/cohort/examples/print_env.toml" --cpu-slots 2 \
  --set job.output_dir="$tmp/print-env" >"$tmp/run.log" 2>&1 || fail "cohort run print_env: $(cat "$tmp/run.log")"
expect_in "$tmp/run.log" "WORLD_SIZE=2"

echo "== the Debian package"
if ! command -v cpack >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "SKIP: cpack or dpkg-deb not found"
  exit 0
fi
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1 ||
  fail "cpack: $(cat "$tmp/cpack.log")"
deb=$(ls "$tmp"/pkg/cohort_*.deb)
dpkg-deb -I "$deb" >"$tmp/info"
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/contents"
expect_in "$tmp/info" "Package: cohort"
# Depends: Debian package names, found from the libraries the programs load.
sed -n 's/^ Depends: //p' "$tmp/info" | tr ',' '\n' | sed 's/(.*//; s/ //g' >"$tmp/depends"
for pkg in libzmq5 libsqlite3-0 libc6 libstdc++6; do
  grep -qxF "$pkg" "$tmp/depends" || fail "Depends lacks $pkg: $(cat "$tmp/info")"
done
for f in ./usr/bin/cohort ./usr/bin/cohort-worker ./usr/lib/systemd/system/cohort-agent.service \
  ./usr/lib/systemd/system/cohort-coordinator.service ./usr/lib/sysusers.d/cohort.conf \
  ./usr/share/cohort/examples/quickstart.toml ./usr/share/cohort/slurm/cohort.sbatch \
  ./usr/share/doc/cohort/README.md ./usr/share/doc/cohort/docs/cluster-operations.md; do
  grep -qxF "$f" "$tmp/contents" || fail "the package lacks $f"
done
if grep -q '^./usr/local' "$tmp/contents"; then fail "the package installs under /usr/local"; fi
mkdir -p "$tmp/deb" "$tmp/control"
dpkg-deb -x "$deb" "$tmp/deb"
dpkg-deb -e "$deb" "$tmp/control"
expect_in "$tmp/deb/usr/lib/systemd/system/cohort-agent.service" "ExecStart=/usr/bin/cohort agent"
expect_in "$tmp/deb/usr/lib/systemd/system/cohort-coordinator.service" "ExecStart=/usr/bin/cohort coordinator"
expect_in "$tmp/control/postinst" "systemd-sysusers /usr/lib/sysusers.d/cohort.conf"
for script in postinst prerm postrm; do
  [[ -x $tmp/control/$script ]] || fail "the package's $script is not executable"
  sh -n "$tmp/control/$script" || fail "the package's $script does not parse"
done
echo "package: $(basename "$deb"), $(grep -c . "$tmp/contents") entries"
echo "PASS"
