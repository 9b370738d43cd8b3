// kind = "serve" against real peers: the official OpenAI client (npm
// `openai`, installed by scripts/test-peers.sh) and the Prometheus server.
// Starts servers as real worker processes on free ports (port = 0), runs the
// offline infer job on the same prompts, and checks what issue 18 asks.
//
//   node serve_openai_test.mjs WORKER PEERS_DIR
// Exit 0: all passed; 77: skipped (no openai package), printed why; 1: failed.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const [workerArg, peers] = process.argv.slice(2);
const worker = path.resolve(workerArg);
let OpenAI;
try {
  OpenAI = createRequire(path.resolve(peers, "package.json"))("openai").OpenAI;
} catch (e) {
  console.log(`SKIP: the npm package 'openai' is not in ${peers} (run scripts/test-peers.sh): ${e.message}`);
  process.exit(77);
}

const root = fs.mkdtempSync(path.join(os.tmpdir(), "cohort_serve_"));
const children = [];
let failures = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function check(cond, what) {
  if (!cond) throw new Error(what);
}
async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}
async function until(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch {}
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

const MODEL = `preset = "tiny"\nmax_seq = 4096`;
function jobFile(name, kind, body, jobLines = "") {
  const dir = path.join(root, name);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "job.toml");
  fs.writeFileSync(file, `[job]\nname = "${name}"\nkind = "${kind}"\noutput_dir = "${dir}/out"\n${jobLines}\n` +
                         `[model]\n${MODEL}\n\n${body}\n`);
  return { dir, file };
}

// Starts a server of `ranks` processes; resolves with its URL once /health is 200.
async function startServer(name, serveLines, ranks = 1, jobLines = "") {
  const { dir, file } = jobFile(name, "serve", `[serve]\nport = 0\nmax_tokens = 16\n${serveLines}`, jobLines);
  const master = await freePort();
  const procs = [];
  for (let r = 0; r < ranks; r++) {
    const env = { ...process.env, COHORT_DEVICE: "cpu", COHORT_COLLECTIVE_TIMEOUT_S: "60" };
    if (ranks > 1) {
      Object.assign(env, { RANK: `${r}`, WORLD_SIZE: `${ranks}`, LOCAL_RANK: `${r}`, LOCAL_WORLD_SIZE: `${ranks}`,
                           MASTER_ADDR: "127.0.0.1", MASTER_PORT: `${master}`, COHORT_INFER_CHECK_LOCKSTEP: "1" });
    }
    const log = fs.openSync(path.join(dir, `rank${r}.log`), "w");
    const p = spawn(worker, [file], { env, stdio: ["ignore", log, log] });
    p.exited = new Promise((resolve) => p.on("exit", (code, signal) => resolve({ code, signal })));
    children.push(p);
    procs.push(p);
  }
  const endpoint = path.join(dir, "out", "endpoint.json");
  const url = await until(`${name}'s endpoint.json`, () => fs.existsSync(endpoint) && JSON.parse(fs.readFileSync(endpoint)).url);
  const base = url.replace(/\/v1$/, "");
  await until(`${name} to be ready`, async () => (await fetch(`${base}/health`)).status === 200, 60000);
  return { url, base, procs, dir };
}

function offlineTokens(prompts, maxNew) {
  const { dir, file } = jobFile("offline", "infer", `[infer]\nprompts = "${root}/offline/prompts.jsonl"\n` +
    `max_new_tokens = ${maxNew}\nbatch_size = 2\ntemperature = 0.0`);
  fs.writeFileSync(path.join(dir, "prompts.jsonl"), prompts.map((p) => JSON.stringify(p)).join("\n") + "\n");
  const r = spawnSync(worker, [file], { env: { ...process.env, COHORT_DEVICE: "cpu" }, encoding: "utf8" });
  check(r.status === 0, `offline infer job failed: ${r.stderr}`);
  return fs.readFileSync(path.join(dir, "out", "outputs.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l).tokens);
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{") && l.split(" ")[0] === name);
  return line ? Number(line.split(" ").pop()) : undefined;
}

function chatml(messages) {
  return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";
}

async function collect(stream) {
  const out = { ids: [], text: "", finish: null, usage: null, chunks: 0, role: null };
  for await (const c of stream) {
    out.chunks++;
    if (c.usage) out.usage = c.usage;
    for (const ch of c.choices) {
      out.ids.push(...(ch.token_ids || []));
      out.text += ch.text ?? ch.delta?.content ?? "";
      if (ch.delta?.role) out.role = ch.delta.role;
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  return out;
}

const PROMPTS = [[72, 101, 108, 108, 111], [1, 2, 3], [200, 100, 50, 25, 12, 6, 3], [65]];
const MESSAGES = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi there" }];
const N = 12;

async function main() {
  const offline = offlineTokens([...PROMPTS.map((t) => ({ tokens: t })), { prompt: chatml(MESSAGES) }], N);
  const A = await startServer("a", `max_running = 8\nmax_queue = 40\nmax_batched_tokens = 12`);
  const client = new OpenAI({ baseURL: A.url, apiKey: "unused", maxRetries: 0 });
  console.log(`server a at ${A.url}`);

  await step("GET /v1/models lists the job's model", async () => {
    const models = await client.models.list();
    check(models.data.length === 1 && models.data[0].id === "a", JSON.stringify(models.data));
  });
  await step("greedy completions equal the offline job's tokens (non-streaming)", async () => {
    for (let i = 0; i < PROMPTS.length; i++) {
      const r = await client.completions.create({ model: "a", prompt: PROMPTS[i], max_tokens: N, temperature: 0, return_token_ids: true });
      check(JSON.stringify(r.choices[0].token_ids) === JSON.stringify(offline[i]), `prompt ${i}: ${r.choices[0].token_ids} vs ${offline[i]}`);
      check(r.usage.prompt_tokens === PROMPTS[i].length && r.usage.completion_tokens === N, JSON.stringify(r.usage));
      check(r.choices[0].finish_reason === "length" && r.object === "text_completion", JSON.stringify(r));
    }
  });
  await step("greedy streamed completions equal the offline job's tokens", async () => {
    for (let i = 0; i < PROMPTS.length; i++) {
      const s = await client.completions.create({ prompt: PROMPTS[i], max_tokens: N, temperature: 0, stream: true,
                                                  stream_options: { include_usage: true }, return_token_ids: true });
      const out = await collect(s);
      check(JSON.stringify(out.ids) === JSON.stringify(offline[i]), `prompt ${i}: ${out.ids} vs ${offline[i]}`);
      check(out.finish === "length" && out.usage?.completion_tokens === N, JSON.stringify(out));
    }
  });
  await step("several prompts and n choices: each choice has its prompt's tokens, streamed or not", async () => {
    const r = await client.completions.create({ prompt: PROMPTS, n: 2, max_tokens: N, temperature: 0, return_token_ids: true });
    check(r.choices.length === PROMPTS.length * 2, `${r.choices.length} choices`);
    for (const ch of r.choices) {
      const want = offline[Math.floor(ch.index / 2)];
      check(JSON.stringify(ch.token_ids) === JSON.stringify(want), `choice ${ch.index}: ${ch.token_ids} vs ${want}`);
    }
    check(r.usage.prompt_tokens === PROMPTS.flat().length && r.usage.completion_tokens === N * PROMPTS.length * 2,
          JSON.stringify(r.usage));
    const s = await client.completions.create({ prompt: PROMPTS.slice(0, 2), n: 3, max_tokens: N, temperature: 0, stream: true,
                                                stream_options: { include_usage: true }, return_token_ids: true });
    const ids = {}, finish = {};
    let usage = null;
    for await (const c of s) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        (ids[ch.index] ??= []).push(...(ch.token_ids || []));
        if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
      }
    }
    for (let i = 0; i < 6; i++) {
      const want = offline[Math.floor(i / 3)];
      check(JSON.stringify(ids[i]) === JSON.stringify(want) && finish[i] === "length", `streamed choice ${i}: ${ids[i]}`);
    }
    check(usage?.completion_tokens === 6 * N, JSON.stringify(usage));
  });
  await step("n = 3 sampled chat choices differ, and repeat with the seed", async () => {
    const ask = () => client.chat.completions.create({ messages: MESSAGES, n: 3, max_tokens: 8, temperature: 1, seed: 11,
                                                       return_token_ids: true });
    const [x, y] = [await ask(), await ask()];
    check(x.choices.length === 3 && x.choices.every((c, i) => c.index === i && c.message.role === "assistant"),
          JSON.stringify(x.choices));
    const tokens = (r) => r.choices.map((c) => JSON.stringify(c.token_ids));
    check(new Set(tokens(x)).size > 1, `all three choices sampled the same tokens: ${tokens(x)}`);
    check(JSON.stringify(tokens(x)) === JSON.stringify(tokens(y)), "the same seed gave other choices");
  });
  await step("response_format json_schema and json_object: the (random) model's replies parse and fit the schema", async () => {
    const schema = { type: "object", properties: { city: { type: "string", maxLength: 12 }, rain: { type: "boolean" },
                     days: { type: "array", items: { type: "integer" }, maxItems: 3 } }, required: ["city", "rain", "days"],
                     additionalProperties: false };
    const r = await client.chat.completions.create({ messages: MESSAGES, max_tokens: 300, temperature: 1, seed: 3, n: 3,
      response_format: { type: "json_schema", json_schema: { name: "weather", schema, strict: true } } });
    for (const ch of r.choices) {
      check(ch.finish_reason === "stop", `choice ${ch.index} ended with ${ch.finish_reason}: ${ch.message.content}`);
      const doc = JSON.parse(ch.message.content);
      check(Object.keys(doc).join() === "city,rain,days" && typeof doc.city === "string" && [...doc.city].length <= 12 &&
            typeof doc.rain === "boolean" && doc.days.length <= 3 && doc.days.every(Number.isInteger), ch.message.content);
    }
    const o = await client.completions.create({ prompt: "{", max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
    if (o.choices[0].finish_reason === "stop") {
      const doc = JSON.parse(o.choices[0].text);
      check(typeof doc === "object" && !Array.isArray(doc), o.choices[0].text);
    }
    const bad = await client.chat.completions.create({ messages: MESSAGES, response_format: { type: "json_schema",
      json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } } }).catch((e) => e);
    check(bad.status === 400 && bad.param === "response_format.json_schema.schema" && /pattern/.test(bad.message), bad.message);
  });
  await step("tools: a forced call comes back as tool_calls, whole and streamed", async () => {
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
                     parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer" } },
                                   required: ["city", "days"] } } },
                   { type: "function", function: { name: "noop", parameters: { type: "object", properties: {} } } }];
    const r = await client.chat.completions.create({ messages: [{ role: "user", content: "Weather in Paris?" }], tools,
      tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 300, temperature: 0 });
    const ch = r.choices[0];
    check(ch.finish_reason === "tool_calls" && ch.message.tool_calls?.length === 1, JSON.stringify(ch));
    const call = ch.message.tool_calls[0];
    const args = JSON.parse(call.function.arguments);
    check(call.type === "function" && call.function.name === "get_weather" && call.id.startsWith("call_") &&
          typeof args.city === "string" && Number.isInteger(args.days), JSON.stringify(call));
    const s = await client.chat.completions.create({ messages: [{ role: "user", content: "Weather in Paris?" }], tools,
      tool_choice: "required", max_tokens: 300, temperature: 0.8, seed: 5, stream: true });
    const calls = [];
    let finish = null, deltas = 0;
    for await (const c of s) {
      for (const d of c.choices) {
        for (const t of d.delta?.tool_calls || []) {
          deltas++;
          if (t.id) calls[t.index] = { id: t.id, name: t.function.name, arguments: "" };
          calls[t.index].arguments += t.function.arguments || "";
        }
        finish = d.finish_reason || finish;
      }
    }
    check(finish === "tool_calls" && calls.length === 1 && ["get_weather", "noop"].includes(calls[0].name),
          `${finish} ${JSON.stringify(calls)}`);
    JSON.parse(calls[0].arguments);
    console.log(`     (the streamed call came in ${deltas} deltas: ${calls[0].name}(${calls[0].arguments}))`);
  });
  await step("chat completions use the chat rendering, streaming and not", async () => {
    const expect = offline[PROMPTS.length];
    const r = await client.chat.completions.create({ messages: MESSAGES, max_tokens: N, temperature: 0, return_token_ids: true });
    check(r.object === "chat.completion" && r.choices[0].message.role === "assistant", JSON.stringify(r));
    check(JSON.stringify(r.choices[0].token_ids) === JSON.stringify(expect), `${r.choices[0].token_ids} vs ${expect}`);
    check(r.usage.prompt_tokens === Buffer.byteLength(chatml(MESSAGES)), JSON.stringify(r.usage));
    const s = await collect(await client.chat.completions.create({ messages: MESSAGES, max_completion_tokens: N, temperature: 0,
                                                                   stream: true, return_token_ids: true }));
    check(s.role === "assistant" && JSON.stringify(s.ids) === JSON.stringify(expect) && s.text === r.choices[0].message.content,
          JSON.stringify(s));
  });
  await step("sampling with a seed repeats; logprobs come back", async () => {
    const ask = () => client.completions.create({ prompt: "abc", max_tokens: 8, temperature: 0.9, top_p: 0.9, top_k: 20,
                                                  seed: 7, logprobs: 1, return_token_ids: true });
    const [x, y] = [await ask(), await ask()];
    check(JSON.stringify(x.choices[0].token_ids) === JSON.stringify(y.choices[0].token_ids), "same seed, different tokens");
    const lp = x.choices[0].logprobs.token_logprobs;
    check(lp.length === 8 && lp.every((v) => v <= 0 && Number.isFinite(v)), JSON.stringify(x.choices[0].logprobs));
  });
  await step("stop strings and stop ids end the sequence at their first token", async () => {
    // A random model's bytes are rarely UTF-8, so the stop string is one
    // ASCII byte it generates; the tokens end at its first occurrence.
    const ids = offline[0];
    const at = ids.findIndex((t, k) => k > 0 && t > 0 && t < 128);
    check(at > 0, `no ASCII byte in ${ids}`);
    const want = JSON.stringify(ids.slice(0, ids.indexOf(ids[at]) + 1));
    const s = await client.completions.create({ prompt: PROMPTS[0], max_tokens: N, temperature: 0,
                                                stop: [String.fromCharCode(ids[at])], return_token_ids: true });
    check(s.choices[0].finish_reason === "stop" && JSON.stringify(s.choices[0].token_ids) === want &&
          !s.choices[0].text.includes(String.fromCharCode(ids[at])), `${JSON.stringify(s.choices[0])} vs ${want}`);
    const t = await collect(await client.completions.create({ prompt: PROMPTS[0], max_tokens: N, temperature: 0, stream: true,
                                                              stop_token_ids: [ids[at]], return_token_ids: true }));
    check(t.finish === "stop" && JSON.stringify(t.ids) === want, `${JSON.stringify(t)} vs ${want}`);
  });
  await step("32 concurrent streams all complete with their token counts", async () => {
    const want = Array.from({ length: 32 }, (_, i) => 5 + (i % 9) * 7);
    const outs = await Promise.all(want.map((n, i) => client.completions.create({
      prompt: [1 + i, 2 + i, 3], max_tokens: n, temperature: 0, stream: true, return_token_ids: true }).then(collect)));
    outs.forEach((o, i) => check(o.ids.length === want[i] && o.finish === "length", `stream ${i}: ${o.ids.length} of ${want[i]}`));
  });
  await step("malformed bodies get 400 naming the field", async () => {
    const post = (p, body) => fetch(`${A.url}${p}`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const cases = [["/completions", "{", null], ["/completions", "[1]", null],
                   ["/completions", `{"prompt": "x", "temperature": "hot"}`, "temperature"],
                   ["/completions", `{"prompt": "x", "max_tokens": 0}`, "max_tokens"],
                   ["/completions", `{"prompt": "x", "max_tokens": 99999}`, "max_tokens"],
                   ["/completions", `{"prompt": "x", "n": 0}`, "n"], ["/completions", `{}`, "prompt"],
                   ["/completions", `{"prompt": [1, 999]}`, "prompt"], ["/completions", `{"prompt": "x", "stop": 5}`, "stop"],
                   ["/chat/completions", `{"messages": []}`, "messages"],
                   ["/chat/completions", `{"messages": [{"role": "bot", "content": "x"}]}`, "messages[0].role"]];
    for (const [p, body, param] of cases) {
      const r = await post(p, body);
      const j = await r.json();
      check(r.status === 400 && j.error.param === param && j.error.type === "invalid_request_error" && j.error.message,
            `${body}: ${r.status} ${JSON.stringify(j)}`);
    }
    const bad = await client.completions.create({ prompt: "x", top_p: 5 }).catch((e) => e);
    check(bad.status === 400 && bad.param === "top_p", `openai client saw ${bad.status} ${bad.param}`);
    const unknown = await post("/completions", `{"model": "gpt-4", "prompt": "x"}`);
    check(unknown.status === 404 && (await unknown.json()).error.code === "model_not_found", "unknown model");
    const nowhere = await fetch(`${A.base}/v2/nothing`);
    check(nowhere.status === 404 && (await nowhere.json()).error, "unknown path");
  });
  await step("a client that disconnects mid-stream frees its slot", async () => {
    const before = (await metric(A.base, 'cohort_serve_finished_total{reason="cancelled"}')) || 0;
    const ctl = new AbortController();
    const s = await client.completions.create({ prompt: [9, 9], max_tokens: 4000, temperature: 0, stream: true }, { signal: ctl.signal });
    let seen = 0;
    try {
      for await (const _ of s) if (++seen === 3) ctl.abort();
    } catch {}
    await until("the cancelled request to leave", async () =>
      (await metric(A.base, 'cohort_serve_finished_total{reason="cancelled"}')) === before + 1 &&
      (await metric(A.base, "cohort_serve_running")) === 0);
  });
  await step("Prometheus scrapes /metrics", async () => {
    const prom = spawnSync("sh", ["-c", "command -v prometheus"], { encoding: "utf8" }).stdout.trim();
    if (!prom) return console.log("     (skipped: the prometheus binary is not installed; scripts/setup.sh installs it)");
    const port = await freePort();
    const dir = path.join(root, "prometheus");
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, "prometheus.yml"), `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cohort\n` +
      `    static_configs:\n      - targets: ["${A.base.replace("http://", "")}"]\n`);
    const log = fs.openSync(path.join(dir, "log"), "w");
    const p = spawn(prom, [`--config.file=${dir}/prometheus.yml`, `--storage.tsdb.path=${dir}/data`,
                           `--web.listen-address=127.0.0.1:${port}`], { stdio: ["ignore", log, log] });
    children.push(p);
    try {
      const q = (expr) => fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(expr)}`).then((r) => r.json());
      await until("Prometheus to scrape cohort", async () => {
        const up = await q('up{job="cohort"}');
        const tokens = await q("cohort_serve_generation_tokens_total");
        const ttft = await q("cohort_serve_time_to_first_token_seconds_count");
        const prefill = await q("cohort_serve_request_prefill_time_seconds_count");
        const queued = await q("cohort_serve_request_queue_time_seconds_count");
        // Every first token the server sent also counts its prefill and its wait.
        const firsts = Number(ttft.data.result[0]?.value[1]);
        return up.data.result[0]?.value[1] === "1" && Number(tokens.data.result[0]?.value[1]) > 0 &&
               firsts > 0 && Number(prefill.data.result[0]?.value[1]) === firsts &&
               Number(queued.data.result[0]?.value[1]) === firsts;
      }, 45000);
    } finally {
      p.kill("SIGTERM");
    }
  });
  await step("SIGTERM drains: the running stream finishes, new requests get 503, exit 0", async () => {
    const s = await client.completions.create({ prompt: [5, 6], max_tokens: 600, temperature: 0, stream: true, return_token_ids: true });
    const it = s[Symbol.asyncIterator]();
    const first = await it.next();
    const ids = [...(first.value.choices[0].token_ids || [])];
    A.procs[0].kill("SIGTERM");
    await until("/health to say draining", async () => (await fetch(`${A.base}/health`)).status === 503, 10000);
    const refused = await fetch(`${A.url}/completions`, { method: "POST", body: `{"prompt": "x"}` });
    check(refused.status === 503, `a new request during the drain got ${refused.status}`);
    let finish = null;
    for (let n = await it.next(); !n.done; n = await it.next()) {
      for (const ch of n.value.choices) ids.push(...(ch.token_ids || [])), finish = ch.finish_reason || finish;
    }
    check(ids.length === 600 && finish === "length", `the drained stream got ${ids.length} tokens, ${finish}`);
    const exit = await A.procs[0].exited;
    check(exit.code === 0, `the server exited ${JSON.stringify(exit)}`);
  });

  const B = await startServer("b", `max_running = 1\nmax_queue = 1\napi_key = "sekrit"\nmax_body_bytes = 4096`, 1,
                              "stop_grace = 1.5");
  await step("without the API key: 401; with it: 200", async () => {
    const r = await fetch(`${B.url}/models`);
    check(r.status === 401 && (await r.json()).error.code === "invalid_api_key", `got ${r.status}`);
    const ok = await new OpenAI({ baseURL: B.url, apiKey: "sekrit", maxRetries: 0 }).models.list();
    check(ok.data[0].id === "b", JSON.stringify(ok));
    const wrong = await new OpenAI({ baseURL: B.url, apiKey: "nope", maxRetries: 0 }).models.list().catch((e) => e);
    check(wrong.status === 401, `wrong key got ${wrong.status}`);
  });
  await step("a body over max_body_bytes gets 413", async () => {
    const r = await fetch(`${B.url}/completions`, { method: "POST", headers: { authorization: "Bearer sekrit" },
                                                    body: JSON.stringify({ prompt: "x".repeat(10000) }) });
    check(r.status === 413 && (await r.json()).error, `got ${r.status}`);
  });
  await step("a full queue gets 429", async () => {
    const b = new OpenAI({ baseURL: B.url, apiKey: "sekrit", maxRetries: 0 });
    const ctl = new AbortController();
    const long = () => b.completions.create({ prompt: [7], max_tokens: 4000, stream: true }, { signal: ctl.signal });
    const running = await long(), queued = await long();
    const third = await long().catch((e) => e);
    ctl.abort();
    check(third.status === 429 && third.code === "queue_full", `the third request got ${third.status}`);
    for (const s of [running, queued]) try { for await (const _ of s); } catch {}
  });
  await step("a drain that outlasts stop_grace cancels what is left and still exits 0", async () => {
    const b = new OpenAI({ baseURL: B.url, apiKey: "sekrit", maxRetries: 0 });
    // The server frees the previous step's aborted requests when it sees
    // their disconnects, which can come after the client has moved on: until
    // then a new request gets 429.
    const s = await until("a slot after the aborted requests", () =>
      b.completions.create({ prompt: [7], max_tokens: 4000, stream: true, return_token_ids: true }), 10000);
    const it = s[Symbol.asyncIterator]();
    await it.next();
    const t0 = Date.now();
    B.procs[0].kill("SIGTERM");
    let n = 1, finish = null;
    try {
      for (let x = await it.next(); !x.done; x = await it.next()) {
        n += x.value.choices.length;
        for (const ch of x.value.choices) finish = ch.finish_reason || finish;
      }
    } catch {}
    const streamEnd = Date.now() - t0;
    // A cut stream says so; one that finished within the grace says length.
    check(finish === "abort" || (finish === "length" && n >= 4000), `the cut stream ended with ${finish} after ${n} chunks`);
    const exit = await B.procs[0].exited;
    console.log(`     (stream ended after ${streamEnd} ms with ${n} chunks; exit after ${Date.now() - t0} ms)`);
    // The grace is 1.5 - 1 = 0.5 s; the exit must not wait for the client.
    check(exit.code === 0 && Date.now() - t0 < 2500, `exit ${JSON.stringify(exit)} after ${Date.now() - t0} ms`);
    if (n >= 4000) console.log("     (the stream finished within the grace; nothing was left to cut)");
  });

  const T = await startServer("tp2", `max_running = 4\nmax_queue = 16`, 2);
  const tp = new OpenAI({ baseURL: T.url, apiKey: "unused", maxRetries: 0 });
  await step("tensor parallel over 2 ranks: the same greedy tokens, in lockstep", async () => {
    const outs = await Promise.all(PROMPTS.map((p) => tp.completions.create({ prompt: p, max_tokens: N, temperature: 0, stream: true,
                                                                               return_token_ids: true }).then(collect)));
    outs.forEach((o, i) => check(JSON.stringify(o.ids) === JSON.stringify(offline[i]), `prompt ${i}: ${o.ids} vs ${offline[i]}`));
    const sampled = await Promise.all([1, 2, 3].map((seed) => tp.completions.create({ prompt: "xy", max_tokens: 20, temperature: 1, seed })));
    check(sampled.every((r) => r.usage.completion_tokens === 20), "sampled requests on tp 2");
    // Structured output: the other rank holds its sequence to the same grammar.
    const guided = { messages: MESSAGES, max_tokens: 200, temperature: 1, seed: 9, response_format: { type: "json_schema",
      json_schema: { name: "p", schema: { type: "object", properties: { n: { type: "integer" }, ok: { type: "boolean" } },
                                          required: ["n", "ok"] } } } };
    const [one, two] = await Promise.all([tp.chat.completions.create(guided), tp.chat.completions.create(guided)]);
    const doc = JSON.parse(two.choices[0].message.content);
    check(one.choices[0].message.content === two.choices[0].message.content && Number.isInteger(doc.n) &&
          typeof doc.ok === "boolean", `${one.choices[0].message.content} / ${two.choices[0].message.content}`);
  });
  await step("tensor parallel: SIGTERM stops both ranks cleanly", async () => {
    for (const p of T.procs) p.kill("SIGTERM");
    const exits = await Promise.all(T.procs.map((p) => p.exited));
    check(exits.every((e) => e.code === 0), JSON.stringify(exits));
  });
}

try {
  await main();
} catch (e) {
  failures++;
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
}
if (failures) {
  for (const f of fs.readdirSync(root, { recursive: true }).filter((f) => f.endsWith(".log"))) {
    const text = fs.readFileSync(path.join(root, f), "utf8");
    console.log(`--- ${f}:\n${text.slice(-3000)}`);
  }
}
console.log(failures ? `${failures} check(s) failed; files in ${root}` : "all checks passed");
if (!failures) fs.rmSync(root, { recursive: true, force: true });
process.exit(failures ? 1 : 0);
