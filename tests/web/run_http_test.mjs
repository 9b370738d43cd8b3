// `cohort run JOB --http 127.0.0.1:0`: the embedded cluster serves the same
// page and figures, says where, and the run leaves metrics.jsonl rows with
// wall-clock times and TensorBoard event files (train.tensorboard).
//   node tests/web/run_http_test.mjs
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { binDir, trainJob, waitFor } from './cluster.mjs';

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cohort-run-http-'));
const [toml, sets] = trainJob(path.join(dir, 'out'), 60);
const file = path.join(dir, 'job.toml');
fs.writeFileSync(file, toml);
const args = ['run', file, '--http', '127.0.0.1:0', '--cpu-slots', '2',
              ...[...sets, 'train.tensorboard=true'].flatMap((s) => ['--set', s])];
const child = spawn(path.join(binDir(), 'cohort'), args, { cwd: dir });
let output = '';
child.stdout.on('data', (d) => { output += d; });
child.stderr.on('data', (d) => { output += d; });
const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
try {
  const m = await waitFor('the web page address', () => output.match(/web page on (http:\/\/127\.0\.0\.1:\d+)\//), 30000);
  const url = m[1];
  const jobs = await (await fetch(`${url}/api/jobs`)).json();
  check(jobs.length === 1 && jobs[0].kind === 'train', 'the embedded coordinator serves /api/jobs');
  const id = jobs[0].id;
  const points = await waitFor('training points', async () => {
    const s = await (await fetch(`${url}/api/jobs/${id}/metrics`)).json();
    return s.training.length >= 5 ? s.training.length : 0;
  }, 60000, 250);
  check(points >= 5, `the figures reach the embedded coordinator (${points} rows)`);
  const page = await (await fetch(`${url}/jobs/${id}`)).text();
  check(page.includes('id="plot-loss"'), 'the job page has the loss plot');
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 120000))]);
  check(code === 0, `cohort run exits 0 (${code})`);
  const rows = fs.readFileSync(path.join(dir, 'out', 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const now = Date.now() / 1000;
  check(rows.length >= 60 && rows.every((r) => r.time > now - 600 && r.time <= now + 1),
        `every metrics.jsonl row has a wall-clock time (${rows.length} rows)`);
  const events = fs.readdirSync(path.join(dir, 'out', 'tensorboard'));
  const size = events.length ? fs.statSync(path.join(dir, 'out', 'tensorboard', events[0])).size : 0;
  check(events.length === 1 && events[0].startsWith('events.out.tfevents.') && size > 1000,
        `train.tensorboard wrote an event file (${events[0]}, ${size} bytes)`);
} catch (e) {
  console.log(`FAIL ${e.stack || e}\n--- output\n${output.slice(-3000)}`);
  failures++;
} finally {
  if (child.exitCode === null) child.kill('SIGKILL');
}
fs.rmSync(dir, { recursive: true, force: true });
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
