// The real Prometheus server scrapes the coordinator's /metrics while a CPU
// training job runs, and its HTTP API returns the per-job series with the
// labels docs/cluster-operations.md documents. Temporary config and storage,
// free ports, bounded time.
//   node tests/web/prometheus_test.mjs     (exit 77: skipped, with the reason)
import fs from 'node:fs';
import path from 'node:path';
import { Cluster, failingJob, freePort, skip, trainJob, waitFor } from './cluster.mjs';

const prometheus = process.env.PROMETHEUS || '/usr/bin/prometheus';
if (!fs.existsSync(prometheus)) skip(`no Prometheus at ${prometheus} (scripts/setup.sh installs Debian's prometheus)`);

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

const cluster = new Cluster('prom');
try {
  const url = await cluster.startCoordinator();
  await cluster.addAgent('node-a', ['--cpu-slots', '2']);
  await cluster.addAgent('node-b', ['--fake-gpus', '2']);
  const [toml, sets] = trainJob(path.join(cluster.dir, 'train'), 2000);
  const train = cluster.submit('quickstart', toml, sets);
  await waitFor('the training job to run', async () => (await cluster.job(train)).state === 'running');
  const failed = cluster.submit('doomed', failingJob(path.join(cluster.dir, 'doomed')));
  await waitFor('the command job to fail', async () => (await cluster.job(failed)).state === 'failed', 30000);

  const port = await freePort();
  const config = path.join(cluster.dir, 'prometheus.yml');
  // honor_labels: keep cohort's `job` label (the job id) rather than renaming
  // it exported_job under the scrape job's own.
  fs.writeFileSync(config, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: cohort
    honor_labels: true
    static_configs:
      - targets: ["${new URL(url).host}"]
`);
  cluster.start([prometheus, `--config.file=${config}`, `--storage.tsdb.path=${path.join(cluster.dir, 'tsdb')}`,
                 `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], 'prometheus.log');
  const api = `http://127.0.0.1:${port}/api/v1/query?query=`;
  const query = async (q) => {
    const r = await (await fetch(api + encodeURIComponent(q))).json();
    return r.status === 'success' ? r.data.result : [];
  };
  const series = (q) => waitFor(`Prometheus to have ${q}`, async () => {
    const r = await query(q);
    return r.length ? r : null;
  }, 60000, 500);

  const step = await series(`cohort_job_step{job="${train}"}`);
  check(Number(step[0].value[1]) > 0, `cohort_job_step{job="${train}"} = ${step[0].value[1]}`);
  for (const name of ['cohort_job_loss', 'cohort_job_learning_rate', 'cohort_job_tokens_per_second',
                      'cohort_job_restarts_total', 'cohort_job_queue_wait_seconds']) {
    const r = await series(`${name}{job="${train}"}`);
    check(r.length === 1 && Number.isFinite(Number(r[0].value[1])), `${name}{job="${train}"} = ${r[0].value[1]}`);
  }
  const state = await series(`cohort_job_state{job="${train}",state="running"}`);
  check(state[0].value[1] === '1', 'cohort_job_state says the training job is running');
  const ranks = await series(`cohort_job_ranks{job="${train}"}`);
  check(ranks[0].metric.node === 'node-a' && ranks[0].value[1] === '2', 'cohort_job_ranks has the job on node-a, 2 ranks');
  const hist = await series(`cohort_job_attempt_duration_seconds_count{job="${failed}"}`);
  check(hist[0].value[1] === '2', `the failed job's two attempts are in the duration histogram (${hist[0].value[1]})`);
  const restarts = await series(`cohort_job_restarts_total{job="${failed}"}`);
  check(restarts[0].value[1] === '1', 'cohort_job_restarts_total counts the failed job\'s restart');
  const q = await series(`histogram_quantile(0.5, cohort_job_attempt_duration_seconds_bucket{job="${failed}"})`);
  check(Number(q[0].value[1]) > 0, `histogram_quantile over the attempt durations works (${q[0].value[1]} s)`);
  const util = await series('cohort_gpu_utilization_ratio{node="node-b"}');
  check(util.length === 2 && util.every((s) => s.metric.gpu !== undefined), 'per-GPU utilisation of node-b (fake values)');
  const mem = await series('cohort_gpu_memory_used_bytes{node="node-b",gpu="1"}');
  check(mem[0].value[1] === String(2 * 2 ** 30), 'per-GPU memory in use, in bytes');
  const up = await series('up{job="cohort"}');
  check(up[0].value[1] === '1', 'the scrape target is up');
} catch (e) {
  console.log(`FAIL ${e.stack || e}`);
  failures++;
  for (const log of ['coordinator.log', 'prometheus.log']) {
    try { console.log(`--- ${log}\n${cluster.log(log).slice(-3000)}`); } catch {}
  }
} finally {
  cluster.stop();
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
