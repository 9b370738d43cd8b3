// The web page in a real browser: Playwright drives Debian's Chromium
// (headless) against a coordinator and two agents, with a CPU training job
// running and a command job that fails. Screenshots go to
// $COHORT_ARTIFACTS (default build/test-artifacts) for people to look at.
//   node tests/web/dashboard_test.mjs      (exit 77: skipped, with the reason)
import fs from 'node:fs';
import path from 'node:path';
import { Cluster, failingJob, skip, trainJob, waitFor } from './cluster.mjs';

const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(chromium)) skip(`no Chromium at ${chromium} (scripts/setup.sh installs Debian's chromium)`);
const peers = process.env.COHORT_TEST_PEERS || path.resolve(import.meta.dirname, '../../build/test-peers');
const entry = path.join(peers, 'node_modules/playwright-core/index.mjs');
if (!fs.existsSync(entry)) skip(`playwright-core is not in ${peers} (scripts/test-peers.sh installs it)`);
const playwright = await import(entry);
const artifacts = process.env.COHORT_ARTIFACTS || path.resolve(import.meta.dirname, '../../build/test-artifacts');
fs.mkdirSync(artifacts, { recursive: true });
const shot = (name) => path.join(artifacts, name);
let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

const cluster = new Cluster('web');
const token = 'dashboard-test-token';
const browser = await playwright.chromium.launch({ executablePath: chromium, args: ['--no-sandbox'] });
try {
  const url = await cluster.startCoordinator(['--http-token', token]);
  await cluster.addAgent('node-a', ['--cpu-slots', '2']);
  await cluster.addAgent('node-b', ['--fake-gpus', '2']);
  const [toml, sets] = trainJob(path.join(cluster.dir, 'train'));
  const train = cluster.submit('quickstart', toml, sets);  // 2 ranks: only node-a is free for both
  await waitFor('the training job to run', async () => (await cluster.job(train)).state === 'running');
  const failed = cluster.submit('doomed', failingJob(path.join(cluster.dir, 'doomed')));

  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // With a token, a job's page (its logs may carry secrets) needs it.
  const refused = await page.goto(`${url}/jobs/${train}`);
  check(refused.status() === 401, `without the token the job page is refused (${refused.status()})`);
  // The job page: the loss plot fills in while the job runs.
  await page.goto(`${url}/jobs/${train}?token=${token}`);
  const points = () => page.$eval('#plot-loss polyline[data-label="loss"]', (e) => Number(e.dataset.points)).catch(() => 0);
  await waitFor('20 loss points on the plot', async () => (await points()) >= 20, 90000, 500);
  check((await points()) >= 20, `the loss plot shows points (${await points()})`);
  const firstCount = await points();
  await waitFor('the plot to update in place', async () => (await points()) > firstCount, 30000, 500);
  check((await points()) > firstCount, `the plot updates without a reload (${firstCount} → ${await points()})`);
  check(await page.isVisible('#plot-tokens polyline'), 'the tokens/s plot has a line');
  check(await page.isVisible('#plot-lr polyline'), 'the learning-rate plot has a line');
  await waitFor('an eval loss point', () => page.isVisible('#plot-loss polyline[data-label="eval loss"]'), 60000, 500);
  check(await page.isVisible('#plot-loss polyline[data-label="eval loss"]'), 'the loss plot has eval loss points');

  // The log tail grows from /api/jobs/<id>/logs without a reload.
  const lines = () => page.$eval('#log', (e) => e.textContent.split('\n').filter((l) => l.startsWith('[rank')).length);
  const before = await lines();
  await waitFor('new log lines', async () => (await lines()) > before, 30000, 500);
  check((await lines()) > before, `the log tail updates (${before} → ${await lines()} lines)`);
  const ranksText = await page.textContent('#ranks');
  check(/node-a/.test(ranksText) && (ranksText.match(/running/g) || []).length >= 2, 'both ranks run on node-a');
  await page.screenshot({ path: shot('dashboard-job.png'), fullPage: true });

  // Rank filter: one rank's lines only (rank 0 logs the steps; rank 1 is quiet).
  for (const rank of ['1', '0']) {
    await page.selectOption('#rank-filter', rank);
    await page.waitForURL(new RegExp(`rank=${rank}`));
    const kept = await page.$eval('#log', (e) => e.textContent.split('\n').filter((l) => l.startsWith('[rank')));
    check(kept.every((l) => l.startsWith(`[rank ${rank}]`)) && (rank === '1' || kept.length > 0),
          `the rank filter keeps rank ${rank} only (${kept.length} lines)`);
  }

  // Against time: the x axis is wall-clock.
  await page.goto(`${url}/jobs/${train}?x=time`);
  check((await page.textContent('#plot-loss')).includes('time (UTC)'), 'the plots can use wall-clock time');

  // The cluster page: nodes, GPUs and who holds them, jobs.
  await page.goto(url);
  const gpus = await page.textContent('#gpus');
  check(gpus.includes('Fake GPU') && gpus.includes(train), 'the GPU table names GPUs and the job that holds them');
  check((await page.textContent('#jobs')).includes('quickstart'), 'the jobs table lists the training job');
  await page.screenshot({ path: shot('dashboard-cluster.png'), fullPage: true });

  // The failed job shows its root cause.
  await waitFor('the command job to fail', async () => (await cluster.job(failed)).state === 'failed', 30000);
  await page.goto(`${url}/jobs/${failed}`);
  const rc = await page.textContent('#rootcause').catch(() => '');
  check(/rank 0/.test(rc) && /node-b/.test(rc) && /exit code 3/.test(rc), `the root cause names rank, node and exit: ${rc.slice(0, 80)}`);
  check(rc.includes('fatal: shard 7 is truncated'), 'the root cause shows the last log lines');
  const attempts = await page.$$eval('#attempts tr', (rows) => rows.slice(1).map((r) => r.textContent));
  check(attempts.length === 2 && attempts.every((a) => a.includes('exited with code 3')) && attempts[1].includes('counted'),
        `the attempts table has the restart and why each attempt ended (${attempts.length} attempts)`);
  check((await page.$$('#timeline rect')).length === 2, 'the timeline has a bar per attempt');
  await page.screenshot({ path: shot('dashboard-failed.png'), fullPage: true });

  // Without JavaScript the tables are all there.
  const plain = await browser.newPage({ javaScriptEnabled: false });
  await plain.goto(`${url}/jobs/${train}?token=${token}`);
  check((await plain.$$('#attempts tr')).length >= 2 && (await plain.$$('#plot-loss polyline')).length >= 1,
        'without JavaScript the job page has its tables and plots');
  await plain.close();

  // With the token: a cancel button that cancels.
  await page.goto(`${url}/jobs/${train}?token=${token}`);
  check(await page.isVisible('button.cancel'), 'the token shows the cancel button');
  await page.click('button.cancel');
  await waitFor('the job to be cancelled', async () => (await cluster.job(train)).state === 'cancelled', 30000);
  check((await cluster.job(train)).state === 'cancelled', 'the cancel button cancels the job');
} catch (e) {
  console.log(`FAIL ${e.stack || e}`);
  failures++;
  for (const log of ['coordinator.log', 'agent-node-a.log']) {
    try { console.log(`--- ${log}\n${cluster.log(log).slice(-3000)}`); } catch {}
  }
} finally {
  await browser.close();
  cluster.stop();
}
console.log(`screenshots: ${artifacts}/dashboard-{job,cluster,failed}.png`);
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
