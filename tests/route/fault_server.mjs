#!/usr/bin/env node
// A fake OpenAI streaming upstream and a fault-injecting reverse proxy, for the router's tests (Node's
// http module only).
//
//   node tests/route/fault_server.mjs [--port N] [--host H] [--upstream ORIGIN] [--text TEXT] [--echo]
//                                     [--model NAME] [--lifeline]
//
// Prints "listening PORT" on stdout once it accepts connections (--port 0, the default, picks a free one).
//   --upstream ORIGIN  proxy mode: requests go to ORIGIN (scheme://host:port; the request's path is kept)
//                      and the answer's bytes stream back, SSE events counted, with faults injected; without
//                      it the server itself answers POST /v1/chat/completions and /v1/completions (stream
//                      or not) with TEXT split into word pieces, one chunk each, a finish chunk and [DONE].
//   --text TEXT        the fake upstream's answer (default "The quick brown fox jumps over the lazy dog.");
//                      a request header x-fake-text overrides it; --echo answers the last user message.
//   --lifeline         exit when stdin closes (so a test that dies takes the server with it).
//
// Faults. A fault is a comma-separated list of items, chosen per request by the header `x-fault: ITEMS`
// or for the next N requests by POST /__fault {"mode": "ITEMS", "count": N} (count defaults to 1, -1 means
// until replaced; a header wins over the queue and does not consume it). Items:
//   ok                      no fault
//   cut-after=N             destroy the TCP connection after N data events (0: right after the headers)
//   close-before-headers    destroy the connection before any answer
//   status=CODE             answer CODE with an OpenAI error JSON {"error": {"message": "fault injected:
//                           status CODE", ...}}; with retry-after=S a Retry-After of S seconds, with
//                           retry-after-date=S an HTTP-date S seconds ahead, with echo-auth the message
//                           quotes the Authorization header received (to check the client scrubs the key)
//   malformed-after=N       after N data events, an event whose data is not JSON, then the end (malformed = 0)
//   error-event-after=N     after N data events, data: {"error": {...}}, then the end
//   not-sse                 200 with content-type application/json
//   no-done                 the stream ends cleanly with neither a finish_reason nor [DONE] (fake mode)
//   hang                    200 and the SSE headers, then nothing
//   hang-before-headers     read the request, never answer
//   slow=MS                 wait MS before each event
// GET /v1/models (the health probe) has its own queue: POST /__fault {"mode": "probe-down", "count": N}
// answers 503, "probe-hang" never answers, "probe-ok" clears it; a header x-fault works there too.
// Control: POST /__fault (above); POST /__reset clears faults and stats; GET /__stats returns
//   {"requests": {PATH: n, ...}, "connections": n, "authorization": [distinct values seen], "events": n,
//    "faults_applied": n}
// (control paths are not counted in requests).
import http from 'node:http';
import https from 'node:https';

const args = process.argv.slice(2);
const opt = { port: 0, host: '127.0.0.1', upstream: null, text: 'The quick brown fox jumps over the lazy dog.',
  echo: false, model: 'fake-model', lifeline: false };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const next = () => { if (i + 1 >= args.length) { console.error(`${a} needs a value`); process.exit(2); } return args[++i]; };
  if (a === '--port') opt.port = Number(next());
  else if (a === '--host') opt.host = next();
  else if (a === '--upstream') opt.upstream = next();
  else if (a === '--text') opt.text = next();
  else if (a === '--model') opt.model = next();
  else if (a === '--echo') opt.echo = true;
  else if (a === '--lifeline') opt.lifeline = true;
  else { console.error(`unknown option ${a}`); process.exit(2); }
}

let stats, queue, probeQueue;
function reset() {
  stats = { requests: {}, connections: 0, authorization: [], events: 0, faults_applied: 0 };
  queue = { mode: 'ok', count: 0 };
  probeQueue = { mode: 'probe-ok', count: 0 };
}
reset();

function parseFault(text) {
  const f = {};
  for (const item of String(text || '').split(',').map((s) => s.trim()).filter(Boolean)) {
    const eq = item.indexOf('=');
    if (eq < 0) f[item] = true;
    else f[item.slice(0, eq)] = item.slice(eq + 1);
  }
  if (f.malformed === true) f['malformed-after'] = '0';
  return f;
}

function takeFault(req, q) {
  if (req.headers['x-fault'] !== undefined) return parseFault(req.headers['x-fault']);
  if (q.count === 0) return {};
  if (q.count > 0) q.count--;
  return parseFault(q.mode);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function readBody(req) {
  return new Promise((resolve) => {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', () => resolve(Buffer.concat(parts)));
  });
}

function sendJson(res, status, obj, extra = {}) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...extra });
  res.end(body);
}

// Answers the faults that need no stream; returns true when it did.
function answerStatic(req, res, fault) {
  if (fault['close-before-headers']) { req.socket.destroy(); return true; }
  if (fault['hang-before-headers']) return true; // the socket stays open until the client gives up
  if (fault.status) {
    const code = Number(fault.status);
    const headers = {};
    if (fault['retry-after'] !== undefined) headers['retry-after'] = String(fault['retry-after']);
    if (fault['retry-after-date'] !== undefined)
      headers['retry-after'] = new Date(Date.now() + Number(fault['retry-after-date']) * 1000).toUTCString();
    let message = `fault injected: status ${code}`;
    if (fault['echo-auth']) message += `: Incorrect API key provided: ${req.headers.authorization || '(none)'}`;
    const type = code === 429 ? 'rate_limit_error' : code >= 500 ? 'server_error' : 'invalid_request_error';
    sendJson(res, code, { error: { message, type, param: null, code: null } }, headers);
    return true;
  }
  if (fault['not-sse']) {
    sendJson(res, 200, { id: 'x', object: 'chat.completion', choices: [] });
    return true;
  }
  if (fault.hang) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    return true;
  }
  return false;
}

// Writes SSE events (each a complete "...\n\n" string) through the stream faults. `next()` gives the
// next event or null at the end.
async function pipeEvents(req, res, fault, next) {
  const slow = fault.slow !== undefined ? Number(fault.slow) : 0;
  const cutAfter = fault['cut-after'] !== undefined ? Number(fault['cut-after']) : -1;
  const badAfter = fault['malformed-after'] !== undefined ? Number(fault['malformed-after']) : -1;
  const errAfter = fault['error-event-after'] !== undefined ? Number(fault['error-event-after']) : -1;
  let closed = false;
  res.on('close', () => { closed = true; });
  let dataEvents = 0;
  for (;;) {
    if (closed) return;
    if (dataEvents === cutAfter) { req.socket.destroy(); return; }
    if (dataEvents === badAfter) { res.end('data: {"choices": [{"delta": {"content": "x"\n\n'); return; }
    if (dataEvents === errAfter) {
      res.end('data: {"error": {"message": "fault injected: error event", "type": "server_error"}}\n\n');
      return;
    }
    const ev = await next();
    if (ev === null) { res.end(); return; }
    if (slow > 0) await sleep(slow);
    if (closed) return;
    await new Promise((r) => res.write(ev, r)); // flushed, so a cut that follows loses none of it
    if (/^data:/m.test(ev)) { dataEvents++; stats.events++; }
  }
}

function pieces(text) {
  return text.match(/\s*\S+/g) || [];
}

function lastUserText(body) {
  const msgs = Array.isArray(body.messages) ? body.messages : [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i].role !== 'user') continue;
    const c = msgs[i].content;
    if (typeof c === 'string') return c;
    if (Array.isArray(c)) return c.map((p) => p.text || '').join('');
  }
  return typeof body.prompt === 'string' ? body.prompt : '';
}

async function fakeCompletion(req, res, fault, raw) {
  let body = {};
  try { body = JSON.parse(raw.toString('utf8') || '{}'); } catch {
    sendJson(res, 400, { error: { message: 'body is not JSON', type: 'invalid_request_error' } });
    return;
  }
  const chat = req.url.startsWith('/v1/chat/completions');
  const text = req.headers['x-fake-text'] !== undefined ? String(req.headers['x-fake-text'])
    : opt.echo ? lastUserText(body) : opt.text;
  let parts = pieces(text);
  let finish = 'stop';
  if (Number.isInteger(body.max_tokens) && body.max_tokens < parts.length) {
    parts = parts.slice(0, body.max_tokens);
    finish = 'length';
  }
  const id = `cmpl-${Date.now()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model || opt.model;
  const object = chat ? 'chat.completion.chunk' : 'text_completion';
  const choice = (piece, fin) => chat
    ? { index: 0, delta: piece === null ? {} : piece === '' ? { role: 'assistant', content: '' } : { content: piece },
        logprobs: null, finish_reason: fin }
    : { index: 0, text: piece || '', logprobs: null, finish_reason: fin };
  if (!body.stream) {
    const full = parts.join('');
    sendJson(res, 200, chat
      ? { id, object: 'chat.completion', created, model,
          choices: [{ index: 0, message: { role: 'assistant', content: full }, finish_reason: finish }],
          usage: { prompt_tokens: 1, completion_tokens: parts.length, total_tokens: parts.length + 1 } }
      : { id, object: 'text_completion', created, model, choices: [{ index: 0, text: full, finish_reason: finish }] });
    return;
  }
  const events = [];
  const ev = (obj) => `data: ${JSON.stringify(obj)}\n\n`;
  if (chat) events.push(ev({ id, object, created, model, choices: [choice('', null)] }));
  for (const p of parts) events.push(ev({ id, object, created, model, choices: [choice(p, null)] }));
  if (!fault['no-done']) {
    events.push(ev({ id, object, created, model, choices: [choice(null, finish)] }));
    if (body.stream_options && body.stream_options.include_usage)
      events.push(ev({ id, object, created, model, choices: [],
        usage: { prompt_tokens: 1, completion_tokens: parts.length, total_tokens: parts.length + 1 } }));
    events.push('data: [DONE]\n\n');
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let i = 0;
  await pipeEvents(req, res, fault, async () => (i < events.length ? events[i++] : null));
}

function proxy(req, res, fault, raw) {
  const target = new URL(req.url, opt.upstream);
  const headers = { ...req.headers, host: target.host };
  delete headers['x-fault'];
  headers['content-length'] = String(raw.length);
  const lib = target.protocol === 'https:' ? https : http;
  const up = lib.request(target, { method: req.method, headers }, (ur) => {
    const sse = /^text\/event-stream/i.test(ur.headers['content-type'] || '');
    const outHeaders = { ...ur.headers };
    delete outHeaders['content-length'];
    delete outHeaders['transfer-encoding'];
    delete outHeaders.connection;
    delete outHeaders['keep-alive'];
    if (!sse) {
      res.writeHead(ur.statusCode, outHeaders);
      ur.pipe(res);
      return;
    }
    res.writeHead(ur.statusCode, outHeaders);
    res.flushHeaders();
    // split the upstream's bytes into events at blank lines (LF LF, CR LF CR LF or CR CR)
    let buf = '';
    let ended = false;
    const ready = [];
    let wake = null;
    ur.setEncoding('utf8');
    ur.on('data', (c) => {
      buf += c;
      for (;;) {
        const m = /\r\n\r\n|\n\n|\r\r/.exec(buf);
        if (!m) break;
        ready.push(buf.slice(0, m.index + m[0].length));
        buf = buf.slice(m.index + m[0].length);
      }
      if (wake) { wake(); wake = null; }
    });
    const finish = () => { ended = true; if (wake) { wake(); wake = null; } };
    ur.on('end', finish);
    ur.on('error', finish);
    res.on('close', () => ur.destroy());
    pipeEvents(req, res, fault, async () => {
      for (;;) {
        if (ready.length) return ready.shift();
        if (ended) { if (buf) { const rest = buf; buf = ''; return rest; } return null; }
        await new Promise((r) => { wake = r; });
      }
    });
  });
  up.on('error', (err) => {
    if (!res.headersSent) sendJson(res, 502, { error: { message: `proxy: upstream: ${err.message}`, type: 'server_error' } });
    else req.socket.destroy();
  });
  up.end(raw);
}

const server = http.createServer(async (req, res) => {
  const path = req.url.split('?')[0];
  if (path === '/__stats' && req.method === 'GET') { sendJson(res, 200, stats); return; }
  if (path === '/__reset' && req.method === 'POST') { await readBody(req); reset(); sendJson(res, 200, { ok: true }); return; }
  if (path === '/__fault' && req.method === 'POST') {
    let f;
    try { f = JSON.parse((await readBody(req)).toString('utf8')); } catch {
      sendJson(res, 400, { error: { message: 'body is not JSON' } }); return;
    }
    const mode = String(f.mode || 'ok');
    const count = f.count === undefined ? 1 : Number(f.count);
    if (mode.startsWith('probe-')) probeQueue = { mode, count };
    else queue = { mode, count };
    sendJson(res, 200, { ok: true });
    return;
  }
  stats.requests[path] = (stats.requests[path] || 0) + 1;
  const auth = req.headers.authorization;
  if (auth !== undefined && !stats.authorization.includes(auth)) stats.authorization.push(auth);
  const raw = await readBody(req);

  if (req.method === 'GET' && path === '/v1/models') {
    const fault = takeFault(req, probeQueue);
    if (Object.keys(fault).length && !fault['probe-ok'] && !fault.ok) stats.faults_applied++;
    if (fault['probe-hang']) return;
    if (fault['probe-down']) { sendJson(res, 503, { error: { message: 'fault injected: probe down', type: 'server_error' } }); return; }
    if (opt.upstream) { proxy(req, res, {}, raw); return; }
    sendJson(res, 200, { object: 'list', data: [{ id: opt.model, object: 'model', created: 0, owned_by: 'kite-test' }] });
    return;
  }
  const fault = takeFault(req, queue);
  if (Object.keys(fault).length && !fault.ok) stats.faults_applied++;
  if (answerStatic(req, res, fault)) return;
  if (opt.upstream) { proxy(req, res, fault, raw); return; }
  if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) {
    await fakeCompletion(req, res, fault, raw);
    return;
  }
  sendJson(res, 404, { error: { message: `no route ${req.method} ${path}`, type: 'invalid_request_error' } });
});
server.keepAliveTimeout = 60000;
server.on('connection', () => { stats.connections++; });
server.listen(opt.port, opt.host, () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
if (opt.lifeline) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('close', () => process.exit(0));
  process.stdin.resume();
}
process.on('SIGTERM', () => process.exit(0));
