// The router as real processes on loopback: a `kite serve` standing in as the cloud (the same small
// model, so greedy answers can be compared token for token), the fault-injecting proxy
// (fault_server.mjs) in front of it, and `kite serve --router` choosing per rule. Each decision is read
// from the x-kite-backend header and the answer's "route" field; each fault must end in one complete
// answer (the client's concatenated text is the local model's own greedy answer where the remote runs
// the same model), counted in /metrics. Run by ctest: node tests/route/test_router.mjs.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';

import { SRC, BIN, MODEL, TEMPLATE } from '../test_env.mjs';
const CLOUD_KEY = 'sk-cloud-secret-4242424242';
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'kite-router-'));
const children = [];
process.on('exit', () => { for (const c of children) try { c.kill('SIGKILL'); } catch { /* gone */ } });

// ---- processes ---------------------------------------------------------------------------------------
function startKite(args, env = {}) {
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  children.push(proc);
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kite serve did not start: ${stderr}`)), 30000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /listening on (http:\/\/[^ ]+) /.exec(stderr);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`kite serve exited ${code}: ${stderr}`)); });
  });
  return { proc, base, exited, stderr: () => stderr };
}

async function stopKite(k) {
  k.proc.kill('SIGTERM');
  const { code, signal } = await k.exited;
  assert.equal(signal, null, `kite died of ${signal}: ${k.stderr()}`);
  assert.equal(code, 0, `kite exited ${code}: ${k.stderr()}`);
  assert.ok(!k.stderr().includes(CLOUD_KEY), 'the API key must never be logged');
}

function startFaultServer(upstream) {
  const proc = spawn(process.execPath, [path.join(SRC, 'tests/route/fault_server.mjs'), '--port', '0', '--upstream', upstream,
                                        '--lifeline'], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(proc);
  return new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /listening (\d+)/.exec(out);
      if (m) resolve({ proc, base: `http://127.0.0.1:${m[1]}` });
    });
    proc.on('exit', (code) => reject(new Error(`fault_server exited ${code}`)));
  });
}

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

function writeConfig(name, config) {
  const file = path.join(TMP, name);
  fs.writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

const cloudBackend = (url, extra = {}) => ({
  url, model: 'big', api_key_env: 'CLOUD_API_KEY',
  timeout_ms: { connect: 1000, first_token: 1500, total: 20000 },
  max_retries: 1, retry_base_ms: 50, failures_to_cooldown: 1000, cooldown_ms: 500, token_ids: true, ...extra,
});

// ---- HTTP --------------------------------------------------------------------------------------------
async function post(base, url, body, headers = {}) {
  const r = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, backend: r.headers.get('x-kite-backend'), reason: r.headers.get('x-kite-route-reason'), text, json };
}

// A stream read raw: the concatenated text, the finish reason, the last chunk's route field.
async function stream(base, url, body, headers = {}) {
  const r = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
                                      body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200, await r.clone().text());
  const raw = await r.text();
  const events = raw.split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
  assert.equal(events.at(-1), '[DONE]', 'the stream ends with [DONE]');
  let text = '', finish = null, route = null, ids = new Set();
  for (const e of events.slice(0, -1)) {
    const chunk = JSON.parse(e);
    assert.ok(!chunk.error, `no in-band error after a 200: ${e}`);
    ids.add(chunk.id);
    const c = chunk.choices?.[0];
    if (!c) continue;
    text += (c.delta ? c.delta.content ?? '' : c.text) ?? '';
    if (c.finish_reason) { finish = c.finish_reason; route = chunk.route; }
  }
  assert.equal(ids.size, 1, 'one id across the stream');
  return { backend: r.headers.get('x-kite-backend'), reason: r.headers.get('x-kite-route-reason'), text, finish, route };
}

async function metrics(base) { return (await fetch(base + '/metrics')).text(); }
function metric(text, name, labels) {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`) || (labels === '' && l.startsWith(`${name} `)));
  return line ? Number(line.split(' ').at(-1)) : NaN;
}
async function setFault(proxy, mode, count = 1) {
  const r = await fetch(proxy.base + '/__fault', { method: 'POST', body: JSON.stringify({ mode, count }) });
  assert.equal(r.status, 200);
}
async function proxyStats(proxy) { return (await fetch(proxy.base + '/__stats')).json(); }
async function resetProxy(proxy) { await fetch(proxy.base + '/__reset', { method: 'POST' }); }


// ---- the servers ------------------------------------------------------------------------------------
const cloud = startKite(['serve', '--model', MODEL, '--port', '0', '--chat-template', TEMPLATE, '--model-name', 'big',
                         '--api-key', CLOUD_KEY, '--threads', '1', '--parallel', '2']);
const cloudBase = await cloud.base;
const proxy = await startFaultServer(cloudBase);
const mainConfig = writeConfig('router.json', {
  backends: { local: { model: MODEL }, cloud: cloudBackend(`${proxy.base}/v1`) },
  segments: { users: { alice: ['pro'] } },
  rules: [
    { when: { prompt_tokens_over: 40 }, use: 'cloud' },
    { when: { segment: ['pro'] }, use: 'cloud' },
    { when: { max_latency_ms_under: 300 }, use: 'fastest' },
    { use: 'local', fallback: 'cloud' },
  ],
});
const router = startKite(['serve', '--router', mainConfig, '--port', '0', '--chat-template', TEMPLATE, '--threads', '1',
                          '--parallel', '1', '--queue', '1'], { CLOUD_API_KEY: CLOUD_KEY });
const R = await router.base;
after(async () => { await stopKite(router); await stopKite(cloud); proxy.proc.kill(); fs.rmSync(TMP, { recursive: true, force: true }); });

const SHORT = 'Once upon a time, there was a little girl named Lily. She loved to';
const LONG = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. ' +
             'One day, she saw a big red ball under a tree. She ran to get it, but a boy named Tom got there first. ' +
             'Lily was sad. Tom saw that she was sad, so he gave her the ball and they played together all day long. ';
const completion = (prompt, extra = {}) => ({ prompt, max_tokens: 24, temperature: 0, ...extra });
const chat = (content, extra = {}) => ({ messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0, ...extra });

// What the local model answers alone (route: local), the reference for every fallback below.
const localShort = await post(R, '/v1/completions', completion(SHORT, { route: 'local', max_tokens: 40 }));
assert.equal(localShort.status, 200, localShort.text);

test('rules: prompt length, segment (header and user), latency budget, the default; every answer says where and why', async () => {
  const long = await post(R, '/v1/completions', completion(LONG));
  assert.equal(long.status, 200, long.text);
  assert.equal(long.backend, 'cloud');
  assert.match(long.reason, /^rule 0: prompt \d+ tokens > 40/);
  assert.equal(long.json.route.backend, 'cloud');
  assert.equal(long.json.route.rule, 0);
  // the same model on both sides: the remote's greedy answer, re-framed by the router, is the local one
  const longLocal = await post(R, '/v1/completions', completion(LONG, { route: 'local' }));
  assert.equal(longLocal.backend, 'local');
  assert.equal(long.json.choices[0].text, longLocal.json.choices[0].text);

  const pro = await post(R, '/v1/completions', completion(SHORT), { 'x-kite-segment': 'pro' });
  assert.equal(pro.backend, 'cloud');
  assert.match(pro.reason, /^rule 1: segment pro/);
  const alice = await post(R, '/v1/chat/completions', chat(SHORT, { user: 'alice' }));
  assert.equal(alice.backend, 'cloud', alice.text);
  assert.equal(alice.json.object, 'chat.completion');
  assert.ok(alice.json.choices[0].message.content.length > 0);
  const bob = await post(R, '/v1/chat/completions', chat(SHORT, { user: 'bob' }));
  assert.equal(bob.backend, 'local');
  assert.match(bob.reason, /^rule 3/);
  assert.equal(bob.json.choices[0].message.content, alice.json.choices[0].message.content, 'same model, same greedy answer');

  const budget = await post(R, '/v1/completions', completion(SHORT, { max_latency_ms: 200 }));
  assert.match(budget.reason, /^rule 2: /, 'a budget under 300 ms picks the fastest');
  assert.match(budget.reason, /local \d+(\.\d+)? ms/, 'the reason gives the predictions');

  const explicit = await post(R, '/v1/completions', completion(SHORT, { route: 'remote' }));
  assert.equal(explicit.backend, 'cloud');
  assert.match(explicit.reason, /explicit/);
  const byModel = await post(R, '/v1/completions', completion(SHORT, { model: 'cloud' }));
  assert.equal(byModel.backend, 'cloud');
});

test('latency budget: the remote\'s prediction follows its observed latency (a slowed remote)', async () => {
  const predicted = async () => {
    const r = await post(R, '/v1/completions', completion(SHORT, { max_latency_ms: 250, max_tokens: 16 }));
    assert.equal(r.status, 200, r.text);
    const m = /cloud (\d+) ms/.exec(r.reason);
    assert.ok(m, `the reason gives the remote's prediction: ${r.reason}`);
    assert.equal(r.backend, 'local', 'the local side meets the budget');
    return Number(m[1]);
  };
  await resetProxy(proxy);
  for (let i = 0; i < 3; i++) await post(R, '/v1/completions', completion(SHORT, { route: 'remote', max_tokens: 16 }));
  const fast = await predicted();
  await setFault(proxy, 'slow=60', 6); // 60 ms before each event: the remote's time per token grows
  for (let i = 0; i < 6; i++) await post(R, '/v1/completions', completion(SHORT, { route: 'remote', max_tokens: 16 }));
  const slow = await predicted();
  assert.ok(slow > fast + 200, `the slowed remote is predicted slower: ${fast} ms -> ${slow} ms`);
});

test('stream: the headers and the last chunk name the backend', async () => {
  const s = await stream(R, '/v1/chat/completions', chat(SHORT), { 'x-kite-segment': 'pro' });
  assert.equal(s.backend, 'cloud');
  assert.equal(s.route.backend, 'cloud');
  assert.ok(['stop', 'length'].includes(s.finish));
  const l = await stream(R, '/v1/chat/completions', chat(SHORT));
  assert.equal(l.backend, 'local');
  assert.equal(l.text, s.text);
});

test('faults before the first token fall back to the local model: 500, hang, hang before headers, malformed, not SSE', async () => {
  const reference = localShort.json.choices[0].text;
  const before = await metrics(R);
  for (const [mode, count, outcome] of [['status=500', 2, 'http_5xx'], ['hang', 1, 'first_token_timeout'],
                                        ['hang-before-headers', 1, 'first_token_timeout'], ['malformed', 1, 'malformed'],
                                        ['not-sse', 1, 'malformed']]) {
    await resetProxy(proxy);
    await setFault(proxy, mode, count);
    const t0 = Date.now();
    const s = await stream(R, '/v1/completions', completion(SHORT, { route: 'remote', max_tokens: 40 }));
    assert.equal(s.backend, 'local', `${mode}: answered locally`);
    assert.equal(s.text, reference, `${mode}: the local answer, whole`);
    assert.ok(['stop', 'length'].includes(s.finish));
    assert.equal(s.route.attempts[0].backend, 'cloud');
    assert.match(s.route.attempts[0].outcome, new RegExp(outcome), `${mode}: ${JSON.stringify(s.route.attempts)}`);
    assert.ok(Date.now() - t0 < 8000, `${mode}: within the timeouts`);
  }
  const now = await metrics(R);
  assert.ok(metric(now, 'kite_route_fallbacks_total', 'backend="cloud"') >= metric(before, 'kite_route_fallbacks_total', 'backend="cloud"') + 5);
  assert.ok(metric(now, 'kite_route_upstream_faults_total', 'backend="cloud",fault="http_5xx"') >= 1);
  assert.ok(metric(now, 'kite_route_upstream_faults_total', 'backend="cloud",fault="first_token_timeout"') >= 2);
  assert.ok(!now.includes(CLOUD_KEY), 'no key in /metrics');
});

test('429 with Retry-After is retried after the wait and answered by the remote', async () => {
  await resetProxy(proxy);
  await setFault(proxy, 'status=429,retry-after=1', 1);
  const t0 = Date.now();
  const r = await post(R, '/v1/completions', completion(SHORT, { route: 'remote', max_tokens: 40 }));
  assert.equal(r.backend, 'cloud', r.text);
  assert.ok(Date.now() - t0 >= 950, 'Retry-After honoured');
  assert.equal(r.json.choices[0].text, localShort.json.choices[0].text);
  const st = await proxyStats(proxy);
  assert.equal(st.requests['/v1/completions'], 2, 'one retry');
  assert.ok(st.authorization.includes(`Bearer ${CLOUD_KEY}`), 'the key reached the remote');
});

test('a remote cut mid-stream is continued locally from the text sent: one answer, exactly the local one', async () => {
  for (const [mode, endpoint] of [['cut-after=4', 'completions'], ['malformed-after=5', 'completions'], ['cut-after=6', 'chat']]) {
    await resetProxy(proxy);
    await setFault(proxy, mode, 1);
    const body = endpoint === 'chat' ? chat(SHORT, { route: 'remote', max_tokens: 40 })
                                     : completion(SHORT, { route: 'remote', max_tokens: 40 });
    const url = endpoint === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    const s = await stream(R, url, body);
    assert.equal(s.backend, 'cloud', `${mode}: the remote started the answer: ${JSON.stringify(s.route)}`);
    assert.equal(s.route.continued_by, 'local', `${mode}: ${JSON.stringify(s.route)}`);
    assert.ok(['stop', 'length'].includes(s.finish), `${mode}: a normal finish`);
    // greedy on the same model: the joined answer is the local one, so nothing at the seam is repeated
    // or missing (a stronger check than looking for a repeated span, which a small model's loops defeat)
    const whole = endpoint === 'chat' ? (await stream(R, url, { ...body, route: 'local' })).text : localShort.json.choices[0].text;
    assert.equal(s.text, whole, `${mode}: greedy on the same model, the joined answer is the local one`);
    assert.ok(s.text.length > 40, 'a real answer');
  }
  const m = await metrics(R);
  assert.ok(metric(m, 'kite_route_continuations_total', '') >= 3);
});

test('local queue full: requests overflow to the remote instead of 429', async () => {
  await resetProxy(proxy);
  const reqs = [];
  for (let i = 0; i < 6; i++) reqs.push(post(R, '/v1/completions', completion(SHORT, { max_tokens: 200, ignore_eos: true })));
  const answers = await Promise.all(reqs);
  for (const a of answers) assert.equal(a.status, 200, a.text);
  const remote = answers.filter((a) => a.backend === 'cloud');
  assert.ok(remote.length >= 1, 'some overflowed');
  assert.ok(answers.some((a) => a.backend === 'local'));
  for (const a of remote) assert.equal(a.json.route.attempts[0].outcome, 'queue_full');
  assert.ok(metric(await metrics(R), 'kite_route_overflows_total', '') >= 1);
});

test('offline: a refused remote is answered locally at once, and later requests wait on no timeout', async () => {
  const dead = await freePort();
  const config = writeConfig('offline.json', {
    backends: { local: { model: MODEL }, cloud: cloudBackend(`http://127.0.0.1:${dead}/v1`, { failures_to_cooldown: 3, cooldown_ms: 60000 }) },
    rules: [{ use: 'cloud' }],
  });
  const k = startKite(['serve', '--router', config, '--port', '0', '--threads', '1'], { CLOUD_API_KEY: CLOUD_KEY });
  const base = await k.base;
  assert.match(k.stderr(), /backends\.cloud\.url/, 'an unreachable remote at start is named');
  for (let i = 0; i < 3; i++) {
    const t0 = Date.now();
    const r = await post(base, '/v1/completions', completion(SHORT, { max_tokens: 40 }));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.backend, 'local');
    assert.equal(r.json.choices[0].text, localShort.json.choices[0].text);
    assert.ok(Date.now() - t0 < 1000, `answered in ${Date.now() - t0} ms`);
  }
  const m = await metrics(base);
  assert.equal(metric(m, 'kite_route_backend_up', 'backend="cloud"'), 0);
  await stopKite(k);
});

test('confidence: a threshold calibrated by kite route calibrate splits a prompt set; low-confidence answers come from the remote', async () => {
  const prompts = ['Once upon a time, there was a little girl named Lily.', 'The dog ran to the park and', 'Tom had a red ball. He',
                   'One day, a big bird flew', 'Sue liked to eat apples. She', 'The sun was hot and the', 'Max the cat saw a mouse. He',
                   'Mom said, "Go to bed," and'];
  const promptFile = path.join(TMP, 'prompts.json');
  fs.writeFileSync(promptFile, JSON.stringify(prompts));
  const calibrate = await new Promise((resolve, reject) => execFile(BIN, ['route', 'calibrate', mainConfig, '--prompts', promptFile,
    '--first-tokens', '4', '--quantile', '0.5', '--remote-fraction', '0.5', '--json', '--threads', '1'],
    { env: { ...process.env, CLOUD_API_KEY: CLOUD_KEY } }, (error, stdout, stderr) => error ? reject(new Error(stderr)) : resolve(JSON.parse(stdout))));
  const threshold = calibrate.thresholds[0].min_logprob;
  assert.equal(calibrate.scores.length, prompts.length);
  const config = writeConfig('confidence.json', {
    backends: { local: { model: MODEL }, cloud: cloudBackend(`${proxy.base}/v1`) },
    rules: [{ confidence: { first_tokens: 4, quantile: 0.5, min_logprob: threshold }, else: 'cloud' }],
  });
  const k = startKite(['serve', '--router', config, '--port', '0', '--threads', '1'], { CLOUD_API_KEY: CLOUD_KEY });
  const base = await k.base;
  await resetProxy(proxy);
  const sides = { local: 0, cloud: 0 };
  for (let i = 0; i < prompts.length; i++) {
    const body = { prompt: prompts[i], max_tokens: 12, temperature: 0 };
    const a = i % 2 ? await stream(base, '/v1/completions', body) : await post(base, '/v1/completions', body);
    const route = a.route ?? a.json.route;
    const expect = calibrate.scores[i] < threshold ? 'cloud' : 'local';
    assert.equal(a.backend, expect, `prompt ${i}: score ${calibrate.scores[i]} vs ${threshold}: ${JSON.stringify(route)}`);
    assert.ok(Math.abs(route.confidence - calibrate.scores[i]) < 1e-4, 'the gate saw the calibration score');
    if (expect === 'cloud') assert.equal(route.attempts[0].outcome, 'low_confidence');
    sides[expect]++;
  }
  assert.equal(sides.cloud, calibrate.thresholds[0].below, 'the calibrated fraction went to the remote');
  assert.ok(sides.local > 0 && sides.cloud > 0);
  assert.equal(metric(await metrics(base), 'kite_route_confidence_escalations_total', ''), sides.cloud);
  // nothing of the discarded local start reached the client: the remote's answer is whole
  const st = await proxyStats(proxy);
  assert.equal(st.requests['/v1/completions'], sides.cloud);
  // the gate sends one on and the remote fails: the local answer (ungated) is still an answer
  const low = calibrate.scores.findIndex((x) => x < threshold);
  await setFault(proxy, 'status=500', 2);
  const fallback = await post(base, '/v1/completions', { prompt: prompts[low], max_tokens: 12, temperature: 0 });
  assert.equal(fallback.status, 200, fallback.text);
  assert.equal(fallback.backend, 'local');
  assert.deepEqual(fallback.json.route.attempts.map((a) => a.outcome), ['low_confidence', 'http_5xx', 'ok']);
  await stopKite(k);
});

test('kite run --router: the same request from the command line, and where it ran on stderr', async () => {
  const run = (args) => new Promise((resolve) => execFile(BIN, ['run', '--router', mainConfig, '--threads', '1', ...args],
    { env: { ...process.env, CLOUD_API_KEY: CLOUD_KEY } }, (error, stdout, stderr) => resolve({ code: error?.code ?? 0, stdout, stderr })));
  const remote = await run(['--prompt', SHORT, '--max-tokens', '40', '--temperature', '0', '--route', 'remote']);
  assert.equal(remote.code, 0, remote.stderr);
  assert.equal(remote.stdout, localShort.json.choices[0].text + '\n');
  assert.match(remote.stderr, /answered by cloud \(explicit: route=remote\)/);
  const local = await run(['--prompt', SHORT, '--max-tokens', '40', '--temperature', '0', '--json']);
  assert.equal(local.code, 0, local.stderr);
  const result = JSON.parse(local.stdout);
  assert.equal(result.text, localShort.json.choices[0].text);
  assert.equal(result.route.backend, 'local');
  assert.ok(!remote.stderr.includes(CLOUD_KEY) && !local.stderr.includes(CLOUD_KEY));
});

test('bad configs are refused naming the field, and never print the key', async () => {
  const run = (config, env = {}) => new Promise((resolve) => {
    execFile(BIN, ['serve', '--router', writeConfig(`bad-${Math.random()}.json`, config), '--port', '0'],
             { env: { ...process.env, ...env } }, (error, stdout, stderr) => resolve({ code: error?.code ?? 0, stderr }));
  });
  let r = await run({ backends: { local: { model: MODEL, colour: 'red' } }, rules: [{ use: 'local' }] });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /backends\.local: unknown key "colour"/);
  r = await run({ backends: { local: { model: MODEL }, cloud: cloudBackend('http://127.0.0.1:1/v1', { api_key_env: 'KITE_NO_SUCH_VARIABLE' }) },
                  rules: [{ use: 'local' }] });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /api_key_env/);
  assert.match(r.stderr, /KITE_NO_SUCH_VARIABLE/);
  r = await run({ backends: { local: { model: MODEL } }, rules: [{ use: 'nowhere' }] });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /rules\[0\]\.use/);
});
