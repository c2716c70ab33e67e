// bench/serve-load: drives an OpenAI-compatible server (kite serve, llama.cpp's llama-server, ...) with
// C concurrent streaming clients for a fixed time and reports what it served.
//
// Each client loops: send one streaming request (a prompt drawn from a prompt set, fixed max_tokens,
// temperature 0 or seeded), read the SSE stream to the end, record when every chunk arrived, repeat.
// A 429 is counted, the client waits Retry-After (at least 100 ms) and tries again. At the end of the
// duration no client starts a new request; the ones in flight are read to the end (up to --drain, after
// which they are cut and counted apart: neither served nor errors).
//
// Reported (text, or one JSON object with --json):
//   requests served, 429s, errors (HTTP status other than 200/429, broken streams, timeouts)
//   TTFT      request sent -> first chunk carrying generated text; p50 / p99
//   latency   request sent -> end of the stream; p50 / p99
//   aggregate generated tok/s, two ways:
//     window  tokens that arrived inside the measured window [start, start + duration], over its length
//             (a request's completion tokens are spread over its content chunks); the steady figure
//     total   all completion tokens over the time from the start to the last stream's end (drain included)
//   per-stream tok/s  (completion tokens - 1) / (last chunk - first chunk) of each request; p50 / p10
// Completion tokens come from the usage chunk (stream_options.include_usage), else from the number of
// content chunks (the report says which).
//
// Only node's built-ins (global fetch) are used.

import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

const USAGE = `usage: bench/serve-load [options]

  --url URL            server base URL (default http://127.0.0.1:8080); /v1/... is appended
  --api chat|completions
                       endpoint: /v1/chat/completions (one user message) or /v1/completions (raw
                       prompt); default completions
  --concurrency C      concurrent clients (default 4)
  --duration S         seconds during which clients start requests (default 30)
  --max-tokens N       max_tokens of every request (default 64)
  --temperature T      default 0 (greedy)
  --seed N             request seed; client i, request k sends seed N + 1000*i + k (default 1)
  --ignore-eos         send "ignore_eos": true (llama-server honours it; servers that ignore unknown
                       fields just stop at EOS, and the report shows the actual token counts)
  --ban-tokens LIST    send "logit_bias" -100 for these token ids (ranges A-B, comma-separated): for
                       random-weight models, whose byte-fallback tokens make invalid UTF-8
                       (llama-server fails such a stream with a 500)
  --prompts SET        mt_bench | spec_bench | a .jsonl file with "turns" (first turn used) or
                       "prompt"/"question"/"problem" fields (default mt_bench, from
                       $KITE_TEST_DATA/data, else ../shared/data next to the repo)
  --max-prompt-chars N cut each prompt to at most N characters (default 0: whole), for small contexts
  --model NAME         "model" field (default: the first id from GET /v1/models, else "default")
  --api-key KEY        sent as Authorization: Bearer KEY (default $OPENAI_API_KEY if set)
  --wait-ready S       first poll GET /health until it answers 200, up to S seconds (default 0: don't)
  --request-timeout S  abort a request (counted as an error) after S seconds (default 300)
  --drain S            after the duration, wait at most S seconds for requests in flight (default 120)
  --requests-out FILE  write one JSON line per request (timings, tokens, status) to FILE
  --json               print one JSON object instead of text
  -h, --help
`;

function fail(msg) {
    console.error(`serve-load: error: ${msg}`);
    process.exit(2);
}

function parseRanges(name, text) {
    const ids = [];
    for (const part of text.split(",")) {
        const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
        if (!m) fail(`${name}: '${part}' is not an id or a range A-B`);
        const lo = Number(m[1]), hi = Number(m[2] ?? m[1]);
        if (hi < lo || hi - lo > 100000) fail(`${name}: bad range '${part}'`);
        for (let id = lo; id <= hi; id++) ids.push(id);
    }
    return ids;
}

function parseArgs(argv) {
    const o = {
        url: "http://127.0.0.1:8080", api: "completions", concurrency: 4, duration: 30, maxTokens: 64,
        temperature: 0, seed: 1, ignoreEos: false, banTokens: null, prompts: "mt_bench", maxPromptChars: 0, model: null,
        apiKey: process.env.OPENAI_API_KEY || null, waitReady: 0, requestTimeout: 300, drain: 120,
        requestsOut: null, json: false,
    };
    const num = (name, v, { int = false, min = 0 } = {}) => {
        const n = Number(v);
        if (v === undefined || v === "" || !Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min)
            fail(`${name} needs ${int ? "an integer" : "a number"} >= ${min}, got '${v}'`);
        return n;
    };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const val = () => {
            if (i + 1 >= argv.length) fail(`${a} needs a value`);
            return argv[++i];
        };
        switch (a) {
            case "--url": o.url = val().replace(/\/+$/, ""); break;
            case "--api": o.api = val(); if (!["chat", "completions"].includes(o.api)) fail(`--api is chat or completions, got '${o.api}'`); break;
            case "--concurrency": o.concurrency = num(a, val(), { int: true, min: 1 }); break;
            case "--duration": o.duration = num(a, val(), { min: 0.1 }); break;
            case "--max-tokens": o.maxTokens = num(a, val(), { int: true, min: 1 }); break;
            case "--temperature": o.temperature = num(a, val()); break;
            case "--seed": o.seed = num(a, val(), { int: true }); break;
            case "--ignore-eos": o.ignoreEos = true; break;
            case "--ban-tokens": o.banTokens = parseRanges(a, val()); break;
            case "--prompts": o.prompts = val(); break;
            case "--max-prompt-chars": o.maxPromptChars = num(a, val(), { int: true }); break;
            case "--model": o.model = val(); break;
            case "--api-key": o.apiKey = val(); break;
            case "--wait-ready": o.waitReady = num(a, val()); break;
            case "--request-timeout": o.requestTimeout = num(a, val(), { min: 0.1 }); break;
            case "--drain": o.drain = num(a, val()); break;
            case "--requests-out": o.requestsOut = val(); break;
            case "--json": o.json = true; break;
            case "-h": case "--help": process.stdout.write(USAGE); process.exit(0);
            default: fail(`unknown option ${a} (see --help)`);
        }
    }
    return o;
}

// ---- prompts ---------------------------------------------------------------------------------------

function dataDir() {
    const base = process.env.KITE_TEST_DATA || path.join(here, "..", "..", "shared");
    return path.join(base, "data");
}

function loadPrompts(set, maxChars) {
    const file = set === "mt_bench" || set === "spec_bench" ? path.join(dataDir(), set, "question.jsonl") : set;
    let text;
    try {
        text = fs.readFileSync(file);
    } catch (e) {
        fail(`cannot read prompts '${file}': ${e.message}`);
    }
    if (file.endsWith(".gz")) text = zlib.gunzipSync(text);
    const prompts = [];
    text.toString("utf8").split("\n").forEach((line, n) => {
        if (!line.trim()) return;
        let rec;
        try {
            rec = JSON.parse(line);
        } catch (e) {
            fail(`${file}:${n + 1}: not JSON (${e.message})`);
        }
        let p = Array.isArray(rec.turns) ? rec.turns[0] : rec.prompt ?? rec.question ?? rec.problem;
        if (typeof p !== "string" || !p) fail(`${file}:${n + 1}: no "turns"[0], "prompt", "question" or "problem" string`);
        if (maxChars > 0 && p.length > maxChars) p = Array.from(p).slice(0, maxChars).join("");
        prompts.push(p);
    });
    if (!prompts.length) fail(`${file} holds no prompts`);
    return { file, prompts };
}

// ---- HTTP ------------------------------------------------------------------------------------------

function headers(o) {
    const h = { "Content-Type": "application/json" };
    if (o.apiKey) h.Authorization = `Bearer ${o.apiKey}`;
    return h;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitReady(o) {
    const deadline = performance.now() + o.waitReady * 1000;
    let last = "no answer";
    for (;;) {
        try {
            const r = await fetch(`${o.url}/health`, { headers: headers(o), signal: AbortSignal.timeout(2000) });
            await r.arrayBuffer();
            if (r.status === 200) return;
            last = `HTTP ${r.status}`;
        } catch (e) {
            last = e.cause?.code || e.message;
        }
        if (performance.now() > deadline) fail(`${o.url}/health not ready after ${o.waitReady} s (${last})`);
        await sleep(200);
    }
}

async function pickModel(o) {
    if (o.model) return o.model;
    try {
        const r = await fetch(`${o.url}/v1/models`, { headers: headers(o), signal: AbortSignal.timeout(10000) });
        const body = await r.json();
        if (r.status === 200 && body?.data?.[0]?.id) return body.data[0].id;
    } catch {
        // fall through: servers that serve one model accept any name
    }
    return "default";
}

function requestBody(o, model, prompt, seed) {
    const body = { model, max_tokens: o.maxTokens, temperature: o.temperature, seed, stream: true,
                   stream_options: { include_usage: true } };
    if (o.api === "chat") body.messages = [{ role: "user", content: prompt }];
    else body.prompt = prompt;
    if (o.ignoreEos) body.ignore_eos = true;
    if (o.banTokens) body.logit_bias = Object.fromEntries(o.banTokens.map((id) => [String(id), -100]));
    return JSON.stringify(body);
}

// One streaming request. Returns a record; never throws.
async function oneRequest(o, model, prompt, seed, client, drainSignal) {
    const rec = { client, seed, prompt_chars: prompt.length, status: 0, error: null, retry_after_s: null,
                  t_send: performance.now(), t_first: null, t_last: null, t_end: null, chunk_times: [],
                  content_chunks: 0, completion_tokens: null, prompt_tokens: null, finish_reason: null,
                  connection_retries: 0, cut: false };
    const endpoint = o.api === "chat" ? "/v1/chat/completions" : "/v1/completions";
    const signal = AbortSignal.any([AbortSignal.timeout(o.requestTimeout * 1000), drainSignal]);
    let res;
    // A connection the server closed while idle can fail the next request before any byte of an answer
    // (undici's UND_ERR_SOCKET / ECONNRESET on a kept-alive socket): such a request is sent once more,
    // as the openai client does, and counted in connection_retries. Anything else is an error.
    for (let attempt = 0; ; attempt++) {
        try {
            res = await fetch(`${o.url}${endpoint}`, { method: "POST", headers: headers(o),
                                                       body: requestBody(o, model, prompt, seed), signal });
            break;
        } catch (e) {
            const code = e.cause?.code || "";
            if (attempt === 0 && !signal.aborted && (code === "UND_ERR_SOCKET" || code === "ECONNRESET")) {
                rec.connection_retries++;
                rec.t_send = performance.now();
                continue;
            }
            if (drainSignal.aborted) rec.cut = true;
            else rec.error = `connect: ${code || e.name}: ${e.cause?.message || e.message}`;
            rec.t_end = performance.now();
            return rec;
        }
    }
    rec.status = res.status;
    if (res.status !== 200) {
        let text = "";
        try {
            text = await res.text();
        } catch {
            // the status says enough
        }
        if (res.status === 429) {
            const ra = Number(res.headers.get("retry-after"));
            rec.retry_after_s = Number.isFinite(ra) ? ra : null;
        } else {
            rec.error = `HTTP ${res.status}: ${text.slice(0, 200)}`;
        }
        rec.t_end = performance.now();
        return rec;
    }
    const decoder = new TextDecoder();
    let buf = "";
    let done = false;
    const onData = (data) => {
        if (data === "[DONE]") {
            done = true;
            return;
        }
        let ev;
        try {
            ev = JSON.parse(data);
        } catch {
            throw new Error(`bad SSE data: ${data.slice(0, 120)}`);
        }
        if (ev.error) throw new Error(`error event: ${JSON.stringify(ev.error).slice(0, 200)}`);
        const now = performance.now();
        if (ev.usage && Number.isInteger(ev.usage.completion_tokens)) {
            rec.completion_tokens = ev.usage.completion_tokens;
            rec.prompt_tokens = ev.usage.prompt_tokens ?? null;
        }
        for (const ch of ev.choices || []) {
            const text = o.api === "chat" ? ch.delta?.content : ch.text;
            if (typeof text === "string" && text.length > 0) {
                rec.content_chunks++;
                rec.chunk_times.push(now);
                if (rec.t_first === null) rec.t_first = now;
                rec.t_last = now;
            }
            if (ch.finish_reason) rec.finish_reason = ch.finish_reason;
        }
    };
    try {
        for await (const piece of res.body) {
            buf += decoder.decode(piece, { stream: true });
            let nl;
            while ((nl = buf.indexOf("\n")) >= 0) {
                const line = buf.slice(0, nl).replace(/\r$/, "");
                buf = buf.slice(nl + 1);
                if (line.startsWith("data:")) onData(line.slice(5).trimStart());
                // blank lines end events; ':' lines are keep-alive comments
            }
        }
        if (!done) throw new Error("stream ended without data: [DONE]");
    } catch (e) {
        if (drainSignal.aborted) rec.cut = true; // the run's end, not the server's fault: counted apart
        else rec.error = `stream: ${e.name === "TimeoutError" || e.name === "AbortError" ? `no end after --request-timeout ${o.requestTimeout} s` : e.message}`;
    }
    rec.t_end = performance.now();
    return rec;
}

// ---- statistics --------------------------------------------------------------------------------------

function percentile(sorted, p) {
    if (!sorted.length) return null;
    const rank = Math.ceil((p / 100) * sorted.length); // nearest rank
    return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function summarize(o, records, t0, tWindowEnd, tAllEnd, promptFile) {
    const served = records.filter((r) => r.status === 200 && !r.error && !r.cut);
    const cut = records.filter((r) => r.cut).length;
    const tooMany = records.filter((r) => r.status === 429).length;
    const errors = records.filter((r) => r.error);
    const tokensOf = (r) => (r.completion_tokens ?? r.content_chunks);
    const usageSeen = served.length > 0 && served.every((r) => r.completion_tokens !== null);
    const sortedMs = (xs) => xs.filter((x) => x !== null).sort((a, b) => a - b);
    const ttft = sortedMs(served.map((r) => (r.t_first === null ? null : r.t_first - r.t_send)));
    const lat = sortedMs(served.map((r) => r.t_end - r.t_send));
    const perStream = sortedMs(served.map((r) => {
        const n = tokensOf(r);
        return n >= 2 && r.t_last > r.t_first ? ((n - 1) * 1000) / (r.t_last - r.t_first) : null;
    }));
    // Tokens inside the window: every served request's tokens spread evenly over its content chunks;
    // requests cut at the drain limit count one token a chunk (they never got their usage chunk).
    let windowTokens = 0;
    const servedSet = new Set(served);
    for (const r of records.filter((x) => x.cut || servedSet.has(x))) {
        if (!r.content_chunks) continue;
        const perChunk = tokensOf(r) / r.content_chunks;
        for (const t of r.chunk_times) if (t <= tWindowEnd) windowTokens += perChunk;
    }
    const totalTokens = served.reduce((s, r) => s + tokensOf(r), 0);
    const windowS = (tWindowEnd - t0) / 1000;
    const allS = (tAllEnd - t0) / 1000;
    const r3 = (x) => (x === null ? null : Math.round(x * 1000) / 1000);
    const errorKinds = {};
    for (const r of errors) errorKinds[r.error] = (errorKinds[r.error] || 0) + 1;
    const finish = {};
    for (const r of served) finish[r.finish_reason ?? "none"] = (finish[r.finish_reason ?? "none"] || 0) + 1;
    const tokCounts = sortedMs(served.map(tokensOf));
    return {
        url: o.url, api: o.api, model: o.model, concurrency: o.concurrency, duration_s: o.duration,
        max_tokens: o.maxTokens, temperature: o.temperature, ignore_eos: o.ignoreEos,
        banned_tokens: o.banTokens ? o.banTokens.length : 0, prompts: promptFile,
        max_prompt_chars: o.maxPromptChars,
        requests_served: served.length, requests_429: tooMany, errors: errors.length, error_kinds: errorKinds,
        connection_retries: records.reduce((n, r) => n + r.connection_retries, 0), cut_at_drain_limit: cut,
        finish_reasons: finish, tokens_from: usageSeen ? "usage" : "content chunks",
        completion_tokens_total: totalTokens,
        completion_tokens_per_request: { min: tokCounts[0] ?? null, p50: percentile(tokCounts, 50), max: tokCounts.at(-1) ?? null },
        prompt_tokens_p50: percentile(sortedMs(served.map((r) => r.prompt_tokens)), 50),
        ttft_ms: { p50: r3(percentile(ttft, 50)), p99: r3(percentile(ttft, 99)) },
        latency_ms: { p50: r3(percentile(lat, 50)), p99: r3(percentile(lat, 99)) },
        window_s: r3(windowS), total_s: r3(allS),
        aggregate_tok_s: { window: r3(windowTokens / windowS), total: r3(allS > 0 ? totalTokens / allS : 0) },
        per_stream_tok_s: { p50: r3(percentile(perStream, 50)), p10: r3(percentile(perStream, 10)) },
    };
}

function printText(s) {
    const f = (x, d = 1) => (x === null || x === undefined ? "-" : x.toFixed(d));
    const lines = [
        `serve-load: ${s.url} /v1/${s.api === "chat" ? "chat/completions" : "completions"} model=${s.model}, ` +
            `${s.concurrency} clients for ${s.duration_s} s, max_tokens ${s.max_tokens}, temperature ${s.temperature}` +
            `${s.ignore_eos ? ", ignore_eos" : ""}${s.banned_tokens ? `, ${s.banned_tokens} tokens banned` : ""}`,
        `  prompts             ${s.prompts}${s.max_prompt_chars ? ` (cut to ${s.max_prompt_chars} chars)` : ""}` +
            `${s.prompt_tokens_p50 !== null ? `, p50 ${s.prompt_tokens_p50} prompt tokens` : ""}`,
        `  requests served     ${s.requests_served}   429s ${s.requests_429}   errors ${s.errors}` +
            `${s.connection_retries ? `   (${s.connection_retries} sent again after a closed idle connection)` : ""}` +
            `${s.cut_at_drain_limit ? `   ${s.cut_at_drain_limit} cut at the --drain limit` : ""}`,
        `  TTFT ms             p50 ${f(s.ttft_ms.p50)}   p99 ${f(s.ttft_ms.p99)}`,
        `  latency ms          p50 ${f(s.latency_ms.p50)}   p99 ${f(s.latency_ms.p99)}`,
        `  aggregate tok/s     ${f(s.aggregate_tok_s.window)} in the ${f(s.window_s)} s window, ` +
            `${f(s.aggregate_tok_s.total)} over all ${f(s.total_s)} s (drain included)`,
        `  per-stream tok/s    p50 ${f(s.per_stream_tok_s.p50)}   p10 ${f(s.per_stream_tok_s.p10)}`,
        `  tokens/request      min ${s.completion_tokens_per_request.min ?? "-"}   p50 ${s.completion_tokens_per_request.p50 ?? "-"}` +
            `   max ${s.completion_tokens_per_request.max ?? "-"} (from ${s.tokens_from}); finish ${JSON.stringify(s.finish_reasons)}`,
    ];
    for (const [k, n] of Object.entries(s.error_kinds)) lines.push(`  error x${n}: ${k}`);
    console.log(lines.join("\n"));
}

// ---- main ------------------------------------------------------------------------------------------

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const { file, prompts } = loadPrompts(o.prompts, o.maxPromptChars);
    if (o.waitReady > 0) await waitReady(o);
    o.model = await pickModel(o);

    const records = [];
    let nextPrompt = 0;
    const drain = new AbortController();
    const t0 = performance.now();
    const tWindowEnd = t0 + o.duration * 1000;
    const client = async (i) => {
        for (let k = 0; performance.now() < tWindowEnd; k++) {
            const prompt = prompts[nextPrompt++ % prompts.length];
            const rec = await oneRequest(o, o.model, prompt, o.seed + 1000 * i + k, i, drain.signal);
            records.push(rec);
            if (rec.status === 429) await sleep(Math.max(100, (rec.retry_after_s ?? 0) * 1000));
            else if (rec.error && rec.status === 0) await sleep(100); // refused: don't spin
        }
    };
    const all = Promise.all(Array.from({ length: o.concurrency }, (_, i) => client(i)));
    // The drain limit starts when the window closes.
    const drainTimer = setTimeout(() => drain.abort(), o.duration * 1000 + o.drain * 1000);
    await all;
    clearTimeout(drainTimer);
    const tAllEnd = Math.max(tWindowEnd, ...records.map((r) => r.t_end));

    const s = summarize(o, records, t0, tWindowEnd, tAllEnd, file);
    if (o.requestsOut) {
        const lines = records.map((r) => JSON.stringify({
            client: r.client, seed: r.seed, status: r.status, error: r.error, cut: r.cut, connection_retries: r.connection_retries,
            prompt_chars: r.prompt_chars,
            prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, content_chunks: r.content_chunks,
            finish_reason: r.finish_reason, send_ms: +(r.t_send - t0).toFixed(3),
            ttft_ms: r.t_first === null ? null : +(r.t_first - r.t_send).toFixed(3),
            latency_ms: +(r.t_end - r.t_send).toFixed(3),
        }));
        fs.writeFileSync(o.requestsOut, lines.join("\n") + (lines.length ? "\n" : ""));
    }
    if (o.json) console.log(JSON.stringify(s));
    else printText(s);
}

await main();
