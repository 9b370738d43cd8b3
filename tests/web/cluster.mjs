// A small cluster of real processes for the web tests: `cohort coordinator`
// with its HTTP server on a free loopback port, and agents, over an ipc://
// endpoint private to the test. Everything is killed on stop() or exit.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const SKIP = 77;  // ctest's SKIP_RETURN_CODE for these tests

export function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

export function binDir() {
  return path.resolve(process.env.COHORT_BIN_DIR || path.join(import.meta.dirname, '../../build/bin'));
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(what, fn, timeoutMs = 60000, everyMs = 250) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

export class Cluster {
  constructor(name) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `cohort-${name}-`));
    this.endpoint = `ipc://${this.dir}/coordinator.sock`;
    this.children = [];
    process.on('exit', () => this.stop());
  }

  start(argv, logName) {
    const log = fs.openSync(path.join(this.dir, logName), 'w');
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', log, log], cwd: this.dir });
    this.children.push(child);
    return child;
  }

  log(name) {
    return fs.readFileSync(path.join(this.dir, name), 'utf8');
  }

  async startCoordinator(extra = []) {
    this.start([path.join(binDir(), 'cohort'), 'coordinator', '--listen', this.endpoint, '--state-dir',
                path.join(this.dir, 'state'), '--http', '127.0.0.1:0', ...extra], 'coordinator.log');
    const m = await waitFor('the coordinator\'s HTTP port',
                            () => this.log('coordinator.log').match(/HTTP API on http:\/\/127\.0\.0\.1:(\d+)\//), 20000);
    this.url = `http://127.0.0.1:${m[1]}`;
    // With a token, a job's details need it (docs/security.md).
    const t = extra.indexOf('--http-token');
    this.token = t >= 0 ? extra[t + 1] : '';
    return this.url;
  }

  async addAgent(name, flags) {
    this.start([path.join(binDir(), 'cohort'), 'agent', '--coordinator', this.endpoint, '--name', name, ...flags],
               `agent-${name}.log`);
    await waitFor(`node ${name} to register`, async () => {
      const nodes = await (await fetch(`${this.url}/api/nodes`)).json();
      return nodes.some((n) => n.name === name && n.state === 'alive');
    }, 20000);
  }

  // Writes `toml` as a job file and submits it; returns the job id.
  submit(name, toml, sets = []) {
    const file = path.join(this.dir, `${name}.toml`);
    fs.writeFileSync(file, toml);
    const args = ['submit', file, '--coordinator', this.endpoint, ...sets.flatMap((s) => ['--set', s])];
    const r = spawnSync(path.join(binDir(), 'cohort'), args, { cwd: this.dir, encoding: 'utf8', timeout: 30000 });
    if (r.status !== 0) throw new Error(`cohort submit ${name} failed (${r.status}): ${r.stderr}`);
    return r.stdout.trim();
  }

  async job(id) {
    const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
    return (await fetch(`${this.url}/api/jobs/${id}`, { headers })).json();
  }

  stop() {
    for (const c of this.children) {
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }
    this.children = [];
  }
}

// The quickstart's tiny model on CPU, long enough to watch.
export function trainJob(outputDir, steps = 400) {
  const quickstart = fs.readFileSync(path.resolve(import.meta.dirname, '../../jobs/examples/quickstart.toml'), 'utf8');
  return [quickstart, [`job.output_dir=${outputDir}`, `train.steps=${steps}`, 'train.log_every=5',
                       'train.eval_every=25', 'train.checkpoint_every=0', 'train.sample_tokens=0']];
}

export const failingJob = (outputDir) => `[job]
name = "doomed"
kind = "command"
gpus_per_node = 1
max_restarts = 1
output_dir = "${outputDir}"
[command]
argv = ["sh", "-c", "echo loading shards; sleep 1; echo 'fatal: shard 7 is truncated' >&2; exit 3"]
`;
