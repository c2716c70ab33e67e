#!/usr/bin/env node
// How well the confidence gate picks what to send to the remote. A small local model and a larger
// remote (both `kite serve`, on loopback) answer every prompt of a set greedily; `kite route calibrate`
// scores each prompt on the local model and gives the thresholds for the chosen remote fractions. For
// each threshold the report gives the fraction routed remote and the agreement of the routed answers
// with the remote's (exact, and the mean share of the remote answer's leading words matched), next to
// the local model alone and to a random choice of the same size (the gate is worth its calibration
// when it beats random).
//
//   KITE_TEST_DATA=../shared node bench/route-agreement.mjs --kite build/kite \
//       [--local PATH] [--remote PATH] [--prompts FILE] [--limit N] [--fractions 0.25,0.5]
//       [--first-tokens K] [--quantile Q] [--max-tokens N]
// Defaults: local stories260K, remote TinyStories-656K, 40 MT-Bench first turns cut to 200 characters.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const DATA = process.env.KITE_TEST_DATA ?? path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../shared');
const opt = {
  kite: 'build/kite', local: path.join(DATA, 'models/tinystories-tok512/stories260K.gguf'),
  remote: path.join(DATA, 'models/tinystories-656k/tinystories-656k-q8_0.gguf'),
  prompts: path.join(DATA, 'data/mt_bench/question.jsonl'), limit: 40, fractions: [0.25, 0.5], firstTokens: 8, quantile: 0.1,
  maxTokens: 32,
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i], v = () => argv[++i];
  if (a === '--kite') opt.kite = v();
  else if (a === '--local') opt.local = v();
  else if (a === '--remote') opt.remote = v();
  else if (a === '--prompts') opt.prompts = v();
  else if (a === '--limit') opt.limit = Number(v());
  else if (a === '--fractions') opt.fractions = v().split(',').map(Number);
  else if (a === '--first-tokens') opt.firstTokens = Number(v());
  else if (a === '--quantile') opt.quantile = Number(v());
  else if (a === '--max-tokens') opt.maxTokens = Number(v());
  else { console.error(`unknown option ${a}`); process.exit(2); }
}

const record = (r) => typeof r === 'string' ? r : r.turns?.[0] ?? r.prompt ?? r.question ?? r.problem ?? r.text;
const prompts = fs.readFileSync(opt.prompts, 'utf8').split('\n').filter(Boolean).map((l) => record(JSON.parse(l)).slice(0, 200))
  .slice(0, opt.limit);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kite-route-agreement-'));

function serve(model) {
  const proc = spawn(opt.kite, ['serve', '--model', model, '--port', '0', '--threads', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => { err += d; const m = /listening on (http:\/\/\S+)/.exec(err); if (m) resolve({ proc, base: m[1] }); });
    proc.on('exit', (c) => reject(new Error(`kite serve ${model} exited ${c}: ${err}`)));
  });
}
async function answer(base, prompt) {
  const r = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: opt.maxTokens, temperature: 0 }) });
  return (await r.json()).choices[0].text;
}
const words = (t) => t.trim().split(/\s+/).filter(Boolean);
function prefixShare(a, reference) {
  const x = words(a), y = words(reference);
  let n = 0;
  while (n < x.length && n < y.length && x[n] === y[n]) n++;
  return y.length ? n / y.length : 1;
}

const local = await serve(opt.local), remote = await serve(opt.remote);
try {
  const localAnswers = [], remoteAnswers = [];
  for (const p of prompts) { localAnswers.push(await answer(local.base, p)); remoteAnswers.push(await answer(remote.base, p)); }
  const config = path.join(tmp, 'router.json');
  fs.writeFileSync(config, JSON.stringify({ backends: { local: { model: opt.local } }, rules: [{ use: 'local' }] }));
  const promptFile = path.join(tmp, 'prompts.json');
  fs.writeFileSync(promptFile, JSON.stringify(prompts));
  const cal = await new Promise((resolve, reject) => execFile(opt.kite, ['route', 'calibrate', config, '--prompts', promptFile,
    '--first-tokens', String(opt.firstTokens), '--quantile', String(opt.quantile), '--json',
    ...opt.fractions.flatMap((f) => ['--remote-fraction', String(f)])], (e, out, err) => e ? reject(new Error(err)) : resolve(JSON.parse(out))));
  const n = prompts.length;
  const score = (remoteSet) => {
    let exact = 0, share = 0;
    for (let i = 0; i < n; i++) {
      const a = remoteSet.has(i) ? remoteAnswers[i] : localAnswers[i];
      exact += a === remoteAnswers[i] ? 1 : 0;
      share += prefixShare(a, remoteAnswers[i]);
    }
    return { exact: exact / n, share: share / n };
  };
  // random choices of k prompts: the mean over many draws (a seeded LCG, so the figure is reproducible)
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const randomScore = (k) => {
    let exact = 0, share = 0;
    for (let d = 0; d < 2000; d++) {
      const idx = [...Array(n).keys()].sort(() => rand() - 0.5).slice(0, k);
      const s = score(new Set(idx));
      exact += s.exact; share += s.share;
    }
    return { exact: exact / 2000, share: share / 2000 };
  };
  const base = score(new Set());
  console.log(`prompts: ${n} from ${path.relative(DATA, opt.prompts)} (first ${200} characters), ${opt.maxTokens} greedy tokens each`);
  console.log(`local ${path.basename(opt.local)}, remote ${path.basename(opt.remote)}; gate: quantile ${opt.quantile} of the first ${opt.firstTokens} tokens' log-probabilities`);
  console.log(`local alone: agreement with the remote exact ${(100 * base.exact).toFixed(1)}%, leading words ${(100 * base.share).toFixed(1)}%`);
  for (const t of cal.thresholds) {
    const set = new Set(cal.scores.map((s, i) => [s, i]).filter(([s]) => s < t.min_logprob).map(([, i]) => i));
    const gated = score(set), random = randomScore(set.size);
    console.log(`fraction ${t.remote_fraction}: threshold ${t.min_logprob.toFixed(3)}, routed remote ${set.size}/${n} (${(100 * set.size / n).toFixed(1)}%); ` +
                `agreement exact ${(100 * gated.exact).toFixed(1)}% (random ${(100 * random.exact).toFixed(1)}%), ` +
                `leading words ${(100 * gated.share).toFixed(1)}% (random ${(100 * random.share).toFixed(1)}%)`);
  }
} finally {
  local.proc.kill('SIGTERM');
  remote.proc.kill('SIGTERM');
  fs.rmSync(tmp, { recursive: true, force: true });
}
