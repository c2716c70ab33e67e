// kite serve as a real process on loopback, driven by the official `openai` npm client, curl and raw
// HTTP: chat and completions (stream and non-stream), logprobs, stop strings, seeds, the usage chunk,
// /v1/models, /health, /metrics, bad input, the API key, the queue, an abort that frees the slot,
// SIGTERM, and exactness under load (8 concurrent requests give the tokens each gets alone).
// Run by ctest: node tests/serve/test_serve.mjs (env KITE_BIN, KITE_SOURCE_DIR, KITE_TEST_DATA).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { BIN, OpenAI, MODEL, TEMPLATE } from '../test_env.mjs';
const NAME = 'tiny';
const KEY = 'sk-kite-test-0123456789';
const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';

// ---- the server process ------------------------------------------------------------------------
async function startServer(extra = [], { key = KEY, template = TEMPLATE } = {}) {
  const args = ['serve', '--model', MODEL, '--port', '0', ...(template ? ['--chat-template', template] : []), '--model-name', NAME,
                '--threads', '1', ...(key ? ['--api-key', key] : []), ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kite serve did not start: ${stderr}`)), 20000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /listening on (http:\/\/[^ ]+) \(model (\S+), (\d+) slots\)/.exec(stderr);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`kite serve exited ${code}: ${stderr}`)); });
  });
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key ?? 'none', maxRetries: 0, timeout: 60000 });
  return { proc, base, client, exited, stderr: () => stderr };
}

async function stopServer(server) {
  server.proc.kill('SIGTERM');
  const { code, signal } = await server.exited;
  assert.equal(signal, null, `kite serve died of ${signal}: ${server.stderr()}`);
  assert.equal(code, 0, `kite serve exited ${code}: ${server.stderr()}`);
  assert.doesNotMatch(server.stderr(), new RegExp(KEY), 'the API key must never be logged');
}

const auth = { authorization: `Bearer ${KEY}` };

async function post(base, url, body, headers = auth) {
  const r = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
                                      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// A raw SSE stream: the events' data lines, the comments, and the bytes as sent.
async function sse(base, url, body) {
  const r = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json', ...auth },
                                      body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const raw = await r.text();
  const blocks = raw.split('\n\n');
  assert.equal(blocks.pop(), '', 'the stream ends with a blank line');
  const data = [], comments = [];
  for (const b of blocks) {
    if (b.startsWith(':')) { comments.push(b); continue; }
    assert.match(b, /^data: /, `every event is one data line: ${JSON.stringify(b)}`);
    assert.ok(!b.includes('\n'), 'one line per event');
    data.push(b.slice(6));
  }
  assert.equal(data.at(-1), '[DONE]');
  return { raw, comments, events: data.slice(0, -1).map((d) => JSON.parse(d)) };
}

const chatReq = (content, extra = {}) => ({ model: NAME, messages: [{ role: 'user', content }], ...extra });

// ---- the main server ---------------------------------------------------------------------------
const main = await startServer(['--parallel', '4']);
process.on('exit', () => { try { main.proc.kill('SIGKILL'); } catch { /* gone */ } });

test('chat: non-stream answer in OpenAI shape; the stream carries the same text', async () => {
  const req = chatReq('Tell me a story about a cat.', { max_tokens: 40, temperature: 0 });
  const a = await main.client.chat.completions.create(req);
  assert.match(a.id, /^chatcmpl-[0-9a-f]{24}$/);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.model, NAME);
  assert.ok(Number.isInteger(a.created) && Math.abs(a.created - Date.now() / 1000) < 60);
  assert.equal(a.choices.length, 1);
  const c = a.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.ok(c.message.content.length > 0);
  assert.equal(c.logprobs, null);
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.ok(a.usage.prompt_tokens > 5);
  assert.ok(a.usage.completion_tokens > 0 && a.usage.completion_tokens <= 40);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);

  const stream = await main.client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' }, 'the first delta carries the role');
  for (const ch of chunks) {
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.equal(ch.id, chunks[0].id);
    assert.match(ch.id, /^chatcmpl-/);
  }
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, [], 'the usage chunk has no choices');
  assert.deepEqual(usage.usage, a.usage);
  const last = chunks.at(-2);
  assert.deepEqual(last.choices[0].delta, {});
  assert.equal(last.choices[0].finish_reason, c.finish_reason);
  const body = chunks.slice(1, -2);
  for (const ch of body) {
    assert.equal(ch.choices[0].finish_reason, null);
    assert.equal(ch.usage, null, 'with include_usage every chunk has usage: null');
    assert.ok(!ch.choices[0].delta.content.includes('\uFFFD'), 'no split UTF-8 character');
  }
  assert.equal(body.map((ch) => ch.choices[0].delta.content).join(''), c.message.content);
});

test('completions: non-stream and stream agree; 16 tokens by default; raw SSE framing', async () => {
  const req = { model: NAME, prompt: STORY, temperature: 0, ignore_eos: true };
  const a = await main.client.completions.create(req);
  assert.match(a.id, /^cmpl-/);
  assert.equal(a.object, 'text_completion');
  assert.equal(a.usage.completion_tokens, 16, 'legacy completions default to max_tokens 16');
  assert.equal(a.choices[0].finish_reason, 'length');
  const { events } = await sse(main.base, '/v1/completions', req);
  for (const e of events) assert.equal(e.object, 'text_completion');
  assert.ok(!('usage' in events[0]), 'no usage field without stream_options.include_usage');
  assert.equal(events.at(-1).choices[0].finish_reason, 'length');
  assert.equal(events.map((e) => e.choices[0].text).join(''), a.choices[0].text);
});

test('completions: special-token text is one special token by default, plain text with "parse_special": false', async () => {
  const usage = async (prompt, extra = {}) =>
    (await main.client.completions.create({ model: NAME, prompt, max_tokens: 1, temperature: 0, ...extra })).usage.prompt_tokens;
  const plain = await usage('Once upon a time');
  assert.equal(await usage('<|end_story|>Once upon a time'), plain + 1);
  assert.ok(await usage('<|end_story|>Once upon a time', { parse_special: false }) > plain + 1);
  // token ids go in as they are
  const ids = await usage([1, 200, 300, 400]);
  assert.equal(ids, 4);
});

test('completions: the end marker the model spells in plain pieces ends the text, unless skip_special_tokens is false', async () => {
  // TinyStories-656K writes "<|end_story|>" in plain pieces after its story (tests/cli_run/test_run_stops.py
  // shows it against a reference decode); vLLM's skip_special_tokens (default true) hides it.
  const req = { model: NAME, prompt: 'Once upon a time', max_tokens: 300, temperature: 0 };
  const raw = await main.client.completions.create({ ...req, skip_special_tokens: false });
  const marker = raw.choices[0].text.indexOf('<|end_story|>');
  assert.ok(marker > 0, `the raw text holds the marker: ${JSON.stringify(raw.choices[0].text.slice(-60))}`);
  const clean = await main.client.completions.create(req);
  assert.equal(clean.choices[0].text, raw.choices[0].text.slice(0, marker));
  assert.equal(clean.choices[0].finish_reason, 'stop');
  const { events } = await sse(main.base, '/v1/completions', req);
  assert.equal(events.map((e) => e.choices[0].text).join(''), clean.choices[0].text);
  const bad = await fetch(`${main.base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ ...req, skip_special_tokens: 'yes' }) });
  assert.equal(bad.status, 400);
});

test('chat logprobs: top_logprobs listed best first, the greedy token is the top one', async () => {
  const a = await main.client.chat.completions.create(chatReq('A dog and a ball.', {
    max_tokens: 20, temperature: 0, logprobs: true, top_logprobs: 3 }));
  const content = a.choices[0].logprobs.content;
  assert.equal(content.length, a.usage.completion_tokens);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.token, e.top_logprobs[0].token);
    assert.equal(e.logprob, e.top_logprobs[0].logprob);
    assert.ok(e.logprob <= 0);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
  }
  assert.equal(content.map((e) => e.token).join(''), a.choices[0].message.content);
  // the stream reports the same log-probabilities, one entry per chunk
  const { events } = await sse(main.base, '/v1/chat/completions', chatReq('A dog and a ball.', {
    max_tokens: 20, temperature: 0, logprobs: true, top_logprobs: 3 }));
  const streamed = events.flatMap((e) => e.choices[0]?.logprobs?.content ?? []);
  assert.deepEqual(streamed, content);
});

test('completions logprobs: tokens, token_logprobs, top_logprobs, text_offset', async () => {
  const a = await main.client.completions.create({ model: NAME, prompt: STORY, max_tokens: 12, temperature: 0, logprobs: 2,
                                                  ignore_eos: true });
  const lp = a.choices[0].logprobs;
  assert.equal(lp.tokens.length, 12);
  assert.equal(lp.tokens.join(''), a.choices[0].text);
  let offset = 0;
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.equal(lp.text_offset[i], offset);
    offset += Buffer.byteLength(lp.tokens[i]);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 2);
    assert.equal(lp.token_logprobs[i], Math.max(...top));
    assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);
  }
});

test('stop strings end the answer before them, across token boundaries, stream and not', async () => {
  // the story goes on after ' One day,' (STORY alone is a finished story: the model ends it at once)
  const base = await main.client.completions.create({ model: NAME, prompt: STORY + ' One day,', max_tokens: 60, temperature: 0 });
  const text = base.choices[0].text;
  // a stop string that starts in the middle of a word some way into the text
  const at = Math.floor(text.length / 2);
  const stop = text.slice(at, at + 5);
  const cut = text.indexOf(stop);
  assert.ok(cut > 0 && stop.length === 5);
  const a = await main.client.completions.create({ model: NAME, prompt: STORY + ' One day,', max_tokens: 60, temperature: 0, stop: ['zzzz', stop] });
  assert.equal(a.choices[0].text, text.slice(0, cut));
  assert.equal(a.choices[0].finish_reason, 'stop');
  const { events } = await sse(main.base, '/v1/completions', { model: NAME, prompt: STORY + ' One day,', max_tokens: 60, temperature: 0, stop });
  const streamed = events.map((e) => e.choices[0].text).join('');
  assert.equal(streamed, text.slice(0, cut));
  assert.equal(events.at(-1).choices[0].finish_reason, 'stop');
  // chat, a single string
  const c0 = await main.client.chat.completions.create(chatReq('The sun.', { max_tokens: 40, temperature: 0 }));
  const ct = c0.choices[0].message.content;
  const cstop = ct.slice(10, 13);
  const c1 = await main.client.chat.completions.create(chatReq('The sun.', { max_tokens: 40, temperature: 0, stop: cstop }));
  assert.equal(c1.choices[0].message.content, ct.slice(0, ct.indexOf(cstop)));
  assert.ok(!c1.choices[0].message.content.includes(cstop));
  assert.equal(c1.choices[0].finish_reason, 'stop');
});

test('seeded sampling repeats with the same seed and varies with the seed', async () => {
  const req = (seed) => ({ model: NAME, prompt: 'Once upon a time', max_tokens: 30, temperature: 1.0, top_p: 0.95, seed });
  const a = await main.client.completions.create(req(7));
  const b = await main.client.completions.create(req(7));
  assert.equal(a.choices[0].text, b.choices[0].text);
  const others = await Promise.all([8, 9, 10].map((s) => main.client.completions.create(req(s))));
  assert.ok(others.some((o) => o.choices[0].text !== a.choices[0].text), 'different seeds give different samples');
});

test('/v1/models, /health, and curl', async () => {
  const models = await main.client.models.list();
  assert.deepEqual(models.data.map((m) => [m.id, m.object, m.owned_by]), [[NAME, 'model', 'kite']]);
  const m = await main.client.models.retrieve(NAME);
  assert.equal(m.id, NAME);
  const h = await fetch(`${main.base}/health`); // open without the key
  assert.equal(h.status, 200);
  assert.deepEqual(await h.json(), { status: 'ok' });

  const body = JSON.stringify(chatReq('Hi there.', { max_tokens: 12, temperature: 0 }));
  const out = await new Promise((resolve, reject) => execFile('curl', ['-sS', '-f', `${main.base}/v1/chat/completions`,
    '-H', 'Content-Type: application/json', '-H', `Authorization: Bearer ${KEY}`, '-d', body],
    (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout))));
  const viaCurl = JSON.parse(out);
  const viaClient = await main.client.chat.completions.create(JSON.parse(body));
  assert.equal(viaCurl.choices[0].message.content, viaClient.choices[0].message.content);
  assert.deepEqual(viaCurl.usage, viaClient.usage);
});

test('bad input gets the right 4xx with a clear message, and the server keeps serving', async () => {
  const expectError = (r, status, param, messageRe, code) => {
    assert.equal(r.status, status, r.text);
    assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
    if (param !== undefined) assert.equal(r.json.error.param, param);
    if (code !== undefined) assert.equal(r.json.error.code, code);
    assert.match(r.json.error.message, messageRe);
  };
  const C = '/v1/chat/completions', P = '/v1/completions';
  expectError(await post(main.base, C, '{"messages": [}'), 400, null, /not valid JSON/);
  expectError(await post(main.base, C, { messages: 'hello' }), 400, 'messages', /must be an array/);
  expectError(await post(main.base, C, chatReq('x', { temperature: 'hot' })), 400, 'temperature', /number/);
  expectError(await post(main.base, C, chatReq('x', { max_tokens: 2.5 })), 400, 'max_tokens', /integer/);
  expectError(await post(main.base, C, chatReq('x', { n: 2 })), 400, 'n', /'n' must be 1/);
  expectError(await post(main.base, C, chatReq('x', { stop: [1] })), 400, 'stop', /strings/);
  expectError(await post(main.base, C, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
              400, 'messages[0].content[0]', /only 'text' parts/);
  expectError(await post(main.base, P, { prompt: ['a', 'b'] }), 400, 'prompt', /one prompt per request/);
  expectError(await post(main.base, P, { prompt: [5, 99999] }), 400, 'prompt', /outside the vocabulary/);
  expectError(await post(main.base, C, '{"messages":' + '['.repeat(100) + ']'.repeat(100) + '}'), 400, null, /nests deeper than 64/);
  const invalid = Buffer.concat([Buffer.from('{"prompt":"bad '), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
  expectError(await post(main.base, P, invalid), 400, null, /not valid JSON.*(UTF-8|decode)/i);
  // structured output and tools: shapes checked before anything runs
  const fn = (name, parameters) => ({ type: 'function', function: { name, ...(parameters ? { parameters } : {}) } });
  expectError(await post(main.base, C, chatReq('x', { response_format: { type: 'yaml' } })), 400, 'response_format.type', /'text', 'json_object' or 'json_schema'/);
  expectError(await post(main.base, C, chatReq('x', { response_format: { type: 'json_schema' } })), 400, 'response_format.json_schema', /must be an object/);
  expectError(await post(main.base, C, chatReq('x', { response_format: { type: 'json_schema', json_schema: { name: 'a', schema: 5 } } })),
              400, 'response_format.json_schema.schema', /JSON Schema object/);
  expectError(await post(main.base, P, { prompt: 'x', grammar: 'root ::= "a"', response_format: { type: 'json_object' } }), 400, 'grammar', /one of/);
  expectError(await post(main.base, C, chatReq('x', { tools: {} })), 400, 'tools', /must be an array/);
  expectError(await post(main.base, C, chatReq('x', { tools: [{ type: 'retrieval' }] })), 400, 'tools[0]', /"type": "function"/);
  expectError(await post(main.base, C, chatReq('x', { tools: [fn('get weather')] })), 400, 'tools[0].function.name', /letters, digits/);
  expectError(await post(main.base, C, chatReq('x', { tools: [fn('a'), fn('a')] })), 400, 'tools[1].function.name', /two tools are named 'a'/);
  expectError(await post(main.base, C, chatReq('x', { tools: [fn('a', [])] })), 400, 'tools[0].function.parameters', /JSON Schema object/);
  expectError(await post(main.base, C, chatReq('x', { tools: [fn('a')], tool_choice: 'always' })), 400, 'tool_choice', /'none', 'auto', 'required'/);
  expectError(await post(main.base, C, chatReq('x', { tools: [fn('a')], tool_choice: { type: 'function', function: { name: 'b' } } })),
              400, 'tool_choice', /'b', which is not among 'tools'/);
  expectError(await post(main.base, C, chatReq('x', { tool_choice: 'required' })), 400, 'tool_choice', /'tools' is empty/);
  expectError(await post(main.base, C, { messages: [{ role: 'assistant', content: null, tool_calls: [{ type: 'function' }] }] }),
              400, 'messages[0].tool_calls[0]', /"function": \{"name"/);
  expectError(await post(main.base, C, chatReq('x', { model: 'gpt-4o' })), 404, 'model', /gpt-4o.*does not exist/, 'model_not_found');
  expectError(await post(main.base, P, { prompt: 'Once upon a time '.repeat(200) }), 400, 'prompt',
              /context is 512 tokens.*prompt has \d+ tokens/, 'context_length_exceeded');
  expectError(await post(main.base, C, chatReq('x'), {}), 401, null, /API key/, 'invalid_api_key');
  expectError(await post(main.base, C, chatReq('x'), { authorization: `Bearer ${KEY}x` }), 401, null, /API key/, 'invalid_api_key');
  expectError(await post(main.base, C, chatReq('x'), { authorization: KEY }), 401, null, /API key/);
  const huge = JSON.stringify(chatReq('y'.repeat(9 << 20)));
  expectError(await post(main.base, C, huge), 413, null, /at most 8388608 bytes/);
  const models = await fetch(`${main.base}/v1/models`);
  assert.equal(models.status, 401, 'the API key guards /v1/models');
  const nowhere = await fetch(`${main.base}/v1/embeddings`, { headers: auth });
  assert.equal(nowhere.status, 404);
  // unknown fields are ignored; the server still answers
  const ok = await post(main.base, C, chatReq('Still there?', { max_tokens: 5, temperature: 0, frobnicate: { a: [1] }, user: 'u' }));
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.json.choices[0].message.role, 'assistant');
  // the OpenAI client surfaces the errors as its own exceptions
  await assert.rejects(main.client.chat.completions.create(chatReq('x', { model: 'nope' })),
                       (e) => e.status === 404 && e.code === 'model_not_found');
});

test('/metrics is Prometheus text with requests, tokens, TTFT and prefix-cache hits', async () => {
  // the same prompt twice: the second starts from the first one's K/V
  for (let i = 0; i < 2; i++) await main.client.completions.create({ model: NAME, prompt: STORY + ' The end.', max_tokens: 4, temperature: 0 });
  const r = await fetch(`${main.base}/metrics`, { headers: auth });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const text = await r.text();
  const samples = new Map(), types = new Map();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let m;
    if ((m = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/.exec(line))) {
      if (m[1] === 'TYPE') { assert.match(m[3], /^(counter|gauge|histogram|summary|untyped)$/); types.set(m[2], m[3]); }
      continue;
    }
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)\})? ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$/.exec(line);
    assert.ok(m, `not a Prometheus sample line: ${JSON.stringify(line)}`);
    const family = m[1].replace(/_(bucket|sum|count)$/, '');
    assert.ok(types.has(m[1]) || types.has(family), `sample before its TYPE: ${line}`);
    samples.set(m[1] + (m[2] ?? ''), Number(m[4]));
  }
  assert.ok(samples.get('kite_requests_total{endpoint="/v1/chat/completions",status="200"}') >= 5);
  assert.ok(samples.get('kite_requests_total{endpoint="/v1/completions",status="400"}') >= 1);
  assert.ok(samples.get('kite_requests_total{endpoint="/v1/chat/completions",status="401"}') >= 2);
  assert.ok(samples.get('kite_generated_tokens_total') > 100);
  assert.ok(samples.get('kite_prompt_tokens_total') > 100);
  assert.equal(samples.get('kite_slots_total'), 4);
  assert.equal(samples.get('kite_queue_depth'), 0);
  assert.ok(samples.get('kite_decode_tokens_per_second') > 0);
  assert.ok(samples.get('kite_prefill_tokens_per_second') > 0);
  assert.ok(samples.get('kite_prefix_cache_hits_total') >= 1);
  assert.ok(samples.get('kite_prefix_cache_reused_tokens_total') >= 20);
  assert.equal(types.get('kite_time_to_first_token_seconds'), 'histogram');
  const buckets = [...samples].filter(([k]) => k.startsWith('kite_time_to_first_token_seconds_bucket'));
  for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i][1] >= buckets[i - 1][1], 'buckets are cumulative');
  assert.equal(buckets.at(-1)[0], 'kite_time_to_first_token_seconds_bucket{le="+Inf"}');
  assert.equal(buckets.at(-1)[1], samples.get('kite_time_to_first_token_seconds_count'));
  assert.ok(samples.get('kite_time_to_first_token_seconds_count') >= 10);
});

// ---- one slot, a queue of one: 429, and an abort that frees the slot at once --------------------
test('queue full -> 429 with Retry-After; an aborted stream frees its slot for the next request', async () => {
  const one = await startServer(['--parallel', '1', '--queue', '1', '--ctx', '4096']);
  try {
    const long = { model: NAME, prompt: 'Once upon a time', max_tokens: 4000, temperature: 0, ignore_eos: true };
    // how long the long request takes when it runs to the end
    let t0 = performance.now();
    const full = await one.client.completions.create(long);
    const fullMs = performance.now() - t0;
    assert.equal(full.usage.completion_tokens, 4000);
    const metric = async (name) => {
      const text = await (await fetch(`${one.base}/metrics`, { headers: auth })).text();
      return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)[1]);
    };
    const generatedBefore = await metric('kite_generated_tokens_total');

    const abort = new AbortController();
    const stream = await one.client.completions.create({ ...long, stream: true }, { signal: abort.signal });
    const it = stream[Symbol.asyncIterator]();
    await it.next(); // it is running
    const queued = one.client.completions.create({ model: NAME, prompt: 'The cat', max_tokens: 8, temperature: 0 });
    for (let i = 0; i < 200 && (await metric('kite_queue_depth')) < 1; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(await metric('kite_queue_depth'), 1);
    const rejected = await post(one.base, '/v1/completions', { model: NAME, prompt: 'x', max_tokens: 1 });
    assert.equal(rejected.status, 429);
    assert.equal(rejected.headers.get('retry-after'), '1');
    assert.equal(rejected.json.error.type, 'rate_limit_error');

    t0 = performance.now();
    abort.abort();
    const served = await queued;
    const servedMs = performance.now() - t0;
    assert.equal(served.choices[0].text.length > 0, true);
    console.log(`# abort: served ${servedMs.toFixed(0)} ms after, full run ${fullMs.toFixed(0)} ms`);
    assert.ok(servedMs < fullMs / 3, `the queued request waited ${servedMs.toFixed(0)} ms after the abort (a full run takes ${fullMs.toFixed(0)} ms)`);
    const generated = (await metric('kite_generated_tokens_total')) - generatedBefore;
    console.log(`# abort: ${generated} tokens generated after the abort point`);
    assert.ok(generated < 4000, `the aborted request stopped generating (${generated} tokens since)`);
    assert.equal(await metric('kite_slots_busy'), 0);

    // a non-stream request whose client leaves is cancelled too
    const before = await metric('kite_generated_tokens_total');
    const gone = new AbortController();
    const pending = fetch(`${one.base}/v1/completions`, { method: 'POST', signal: gone.signal,
      headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify(long) }).catch((e) => e);
    for (let i = 0; i < 200 && (await metric('kite_slots_busy')) < 1; i++) await new Promise((r) => setTimeout(r, 5));
    gone.abort();
    assert.equal((await pending).name, 'AbortError');
    let busy = 1;
    for (let i = 0; i < 100 && busy; i++) {
      await new Promise((r) => setTimeout(r, 5));
      busy = await metric('kite_slots_busy');
    }
    assert.equal(busy, 0, 'the slot is free soon after the client left');
    assert.ok((await metric('kite_generated_tokens_total')) - before < 4000);
  } finally {
    await stopServer(one);
  }
});

test('a request past --timeout-ms is cancelled with 504 (stream: an error event), and the next one is served', async () => {
  const quick = await startServer(['--parallel', '1', '--ctx', '4096', '--timeout-ms', '300']);
  try {
    const long = { model: NAME, prompt: 'Once upon a time', max_tokens: 4000, temperature: 0, ignore_eos: true };
    const t0 = performance.now();
    const r = await post(quick.base, '/v1/completions', long);
    assert.equal(r.status, 504, r.text);
    assert.equal(r.json.error.code, 'timeout');
    assert.match(r.json.error.message, /timeout \(300 ms\)/);
    assert.ok(performance.now() - t0 < 2000);
    const { events } = await sse(quick.base, '/v1/completions', long);
    assert.equal(events.at(-1).error.code, 'timeout');
    const ok = await quick.client.completions.create({ model: NAME, prompt: 'The cat', max_tokens: 4, temperature: 0 });
    assert.equal(ok.usage.completion_tokens, 4);
  } finally {
    await stopServer(quick);
  }
});

test('a model without a chat template: chat answers 400 saying so, completions work; CLI usage errors', async () => {
  const bare = await startServer(['--parallel', '1'], { key: null, template: null });
  try {
    const r = await post(bare.base, '/v1/chat/completions', chatReq('hi'), {});
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'no_chat_template');
    assert.match(r.json.error.message, /--chat-template/);
    const ok = await post(bare.base, '/v1/completions', { prompt: 'The cat', max_tokens: 3 }, {});
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.model, NAME);
  } finally {
    await stopServer(bare);
  }
  const run = (args) => new Promise((resolve) => execFile(BIN, ['serve', ...args], (err, stdout, stderr) =>
    resolve({ code: err ? err.code : 0, stdout, stderr })));
  const help = await run(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /usage: kite serve --model PATH/);
  const bad = await run(['--model', MODEL, '--parallel', 'many']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--parallel expects/);
  const host = await run(['--model', MODEL, '--host', 'not-an-address', '--port', '0']);
  assert.equal(host.code, 1);
  assert.match(host.stderr, /--host must be an IPv4 or IPv6 address/);
});

// ---- exactness under load ----------------------------------------------------------------------
const LOAD = [
  { kind: 'chat', body: chatReq('Tell me about a red ball.', { max_tokens: 48, temperature: 0 }) },
  { kind: 'completion', body: { prompt: 'Once upon a time', max_tokens: 64, temperature: 0 } },
  { kind: 'completion', body: { prompt: STORY.repeat(24), max_tokens: 40, temperature: 0.9, top_p: 0.9, seed: 11 } }, // prefilled in chunks
  { kind: 'chat', body: chatReq('A story about a brave little fox who lived in the forest.', { max_tokens: 56, temperature: 1.0, seed: 3 }) },
  { kind: 'completion', body: { prompt: 'The dog ran', max_tokens: 64, temperature: 0.7, top_k: 40, seed: 5, stop: ['.', '!'] } },
  { kind: 'completion', body: { prompt: STORY.repeat(2) + ' One day', max_tokens: 50, temperature: 0, stop: ['the park'] } },
  { kind: 'chat', body: chatReq('Lily and Ben.', { max_tokens: 40, temperature: 0.8, top_p: 0.8, seed: 99, presence_penalty: 0.5, stop: ['\n'] }) },
  { kind: 'completion', body: { prompt: 'Tom had a big', max_tokens: 64, temperature: 1.2, min_p: 0.05, seed: 1234, frequency_penalty: 0.3 } },
];

async function runOne(server, { kind, body }) {
  if (kind === 'chat') {
    const r = await server.client.chat.completions.create({ model: NAME, ...body, logprobs: true });
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage,
             tokens: r.choices[0].logprobs.content.map((e) => e.token) };
  }
  const r = await server.client.completions.create({ model: NAME, ...body, logprobs: 0 });
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage, tokens: r.choices[0].logprobs.tokens };
}

test('exactness under load: 8 concurrent requests give the tokens each gets alone (plain, n-gram and EAGLE-3 drafting)', async () => {
  // an EAGLE-3 head for the model: its drafts read the hidden states the batched passes capture
  const headDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kite-serve-head-'));
  const head = path.join(headDir, 'head.gguf');
  const made = spawnSync(BIN, ['gen-model', '--shape', 'eagle3', '--target', MODEL, '--type', 'f32', '--out', head], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  const alone = [];
  const single = await startServer(['--parallel', '1']);
  try {
    for (const req of LOAD) alone.push(await runOne(single, req));
  } finally {
    await stopServer(single);
  }
  assert.ok(alone[2].usage.prompt_tokens > 256, 'one prompt is longer than a pass of 8 sessions (256 rows)');
  for (const extra of [[], ['--draft', 'ngram'], ['--draft', head, '--spec-budget', '4']]) {
    const eight = await startServer(['--parallel', '8', ...extra]);
    try {
      const together = await Promise.all(LOAD.map((req) => runOne(eight, req)));
      for (let i = 0; i < LOAD.length; i++)
        assert.deepEqual(together[i], alone[i], `request ${i} (${extra.join(' ') || 'plain'}) differs under load`);
      const text = await (await fetch(`${eight.base}/metrics`, { headers: auth })).text();
      assert.match(text, /^kite_requests_total\{endpoint="\/v1\/completions",status="200"\} 5$/m);
      // they did share passes: on average more than two requests per forward pass
      const steps = Number(/^kite_batch_steps_total (\d+)$/m.exec(text)[1]);
      const slotSteps = Number(/^kite_batch_slot_steps_total (\d+)$/m.exec(text)[1]);
      assert.ok(slotSteps / steps > 2, `${slotSteps} slot-steps in ${steps} passes`);
      if (extra[1] === head) assert.match(text, /^kite_spec_drafted_tokens_total [1-9]\d*$/m, 'the head drafted');
    } finally {
      await stopServer(eight);
    }
  }
  fs.rmSync(headDir, { recursive: true, force: true });
});

test('prefix cache: K/V copied from a busy slot or kept in a free one gives the tokens of a fresh prefill', async () => {
  const shared = STORY.repeat(3);
  const long = { model: NAME, prompt: shared + ' Then', max_tokens: 3500, temperature: 0, ignore_eos: true };
  const probe = { model: NAME, prompt: shared + ' Later that day', max_tokens: 30, temperature: 0.8, seed: 21, logprobs: 0 };
  const fresh = await startServer(['--parallel', '1', '--ctx', '4096']);
  let expected;
  try {
    expected = await fresh.client.completions.create(probe);
  } finally {
    await stopServer(fresh);
  }
  const two = await startServer(['--parallel', '2', '--ctx', '4096']);
  try {
    const abort = new AbortController();
    const stream = await two.client.completions.create({ ...long, stream: true }, { signal: abort.signal });
    const it = stream[Symbol.asyncIterator]();
    await it.next(); // the long request holds slot 0 with the shared prefix in its context
    const copied = await two.client.completions.create(probe);
    const again = await two.client.completions.create(probe); // now a free slot holds it
    abort.abort();
    for (const got of [copied, again]) {
      assert.equal(got.choices[0].text, expected.choices[0].text);
      assert.deepEqual(got.choices[0].logprobs.tokens, expected.choices[0].logprobs.tokens);
      assert.deepEqual(got.usage, expected.usage);
    }
    const text = await (await fetch(`${two.base}/metrics`, { headers: auth })).text();
    const metric = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)[1]);
    // the first probe copied the shared prefix from the busy slot, the second found its whole prompt but
    // the last token (which runs to give the logits) in its own free slot
    assert.equal(metric('kite_prefix_cache_copies_total'), 1, text);
    assert.equal(metric('kite_prefix_cache_hits_total'), 2, text);
    assert.ok(metric('kite_prefix_cache_reused_tokens_total') >= (expected.usage.prompt_tokens - 1) + 40, text);
  } finally {
    await stopServer(two);
  }
});

// ---- SIGTERM during a request: it completes (or is cancelled cleanly), exit 0 -----------------------
test('SIGTERM while a stream runs: new requests get 503, the stream ends cleanly, the process exits 0', async () => {
  await stopServer(main); // the main server stops idle
  const server = await startServer(['--parallel', '2', '--ctx', '4096']);
  // 1500 tokens: long enough to be in flight when SIGTERM and the probes below arrive (a Release build makes about
  // 3000 tokens/s here), short enough to finish inside the server's 10 s shutdown grace under ASan (about 200/s)
  const stream = await server.client.chat.completions.create(chatReq('A long story, please.', {
    max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.value.choices[0].delta.role, 'assistant');
  server.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 50));
  const health = await fetch(`${server.base}/health`);
  assert.equal(health.status, 503);
  assert.deepEqual(await health.json(), { status: 'shutting down' });
  const refused = await post(server.base, '/v1/completions', { model: NAME, prompt: 'x', max_tokens: 1 });
  assert.equal(refused.status, 503);
  assert.equal(refused.json.error.code, 'shutting_down');
  let finish = null, usage = null;
  for (let r = await it.next(); !r.done; r = await it.next()) {
    finish = r.value.choices[0]?.finish_reason ?? finish;
    usage = r.value.usage ?? usage;
  }
  assert.equal(finish, 'length', 'the request in flight ran to its end');
  assert.equal(usage.completion_tokens, 1500);
  const { code, signal } = await server.exited;
  assert.equal(signal, null);
  assert.equal(code, 0, server.stderr());
  assert.match(server.stderr(), /kite serve: stopped/);
  assert.doesNotMatch(server.stderr(), new RegExp(KEY));
});
