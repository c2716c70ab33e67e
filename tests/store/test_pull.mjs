// kite pull, list, show, rm and store names against a fake hub on loopback (fake_hub.mjs), built from
// the models in $KITE_TEST_DATA/models. Every check compares with something independent of kite: the
// source files' bytes and node's own sha256, the server's byte counters, and kite run on the plain file.
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {FakeHub, sha256, splitGguf} from './fake_hub.mjs';

const KITE = process.env.KITE_BIN;
const DATA = process.env.KITE_TEST_DATA;
assert.ok(KITE && DATA, 'KITE_BIN and KITE_TEST_DATA must be set');
const models = path.join(DATA, 'models');
const read = (p) => fs.readFileSync(path.join(models, p));
const stories260k = read('tinystories-tok512/stories260K.gguf');
const q8 = read('tinystories-656k/tinystories-656k-q8_0.gguf');
const folderFiles = {};
for (const f of ['config.json', 'generation_config.json', 'model.safetensors', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json'])
  folderFiles[f] = read(path.join('tinystories-656k', f));
const [split1, split2] = splitGguf(stories260k, 2);
const TOKEN = 'hf_secretTestToken42';

const hub = new FakeHub();
const mainCommit = hub.addRepo('kite-test/stories-gguf', {
  'README.md': Buffer.from('# test\n'),
  'stories260K-F32.gguf': stories260k, // 1.13 MiB
  'tinystories-656k-Q8_0.gguf': q8,    // 0.71 MiB
  'tinystories-656k-Q4_K_M.gguf': q8,  // the same size: the Q4_K_M preference decides
  'sub/dir/stories260K-nested.gguf': stories260k,
});
hub.addRepo('kite-test/split', {'README.md': Buffer.from('split\n'), 'stories260K-00001-of-00002.gguf': split1, 'stories260K-00002-of-00002.gguf': split2});
hub.addRepo('kite-test/folder', folderFiles);
hub.addRepo('kite-test/gated', {'stories260K-Q8_0.gguf': stories260k}, {token: TOKEN});
hub.addRepo('kite-test/badsum', {'stories260K-Q8_0.gguf': stories260k}, {wrongSha: ['stories260K-Q8_0.gguf']});
hub.addRepo('kite-test/slow', {'stories260K-Q8_0.gguf': stories260k});
hub.plain.set('stories260K.gguf', stories260k);
await hub.start();

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kite-store-'));
const store = path.join(tmp, 'models');
const baseEnv = {...process.env, KITE_MODELS: store, HF_ENDPOINT: hub.url, KITE_LOG: 'warn'};
delete baseEnv.HF_TOKEN;

function kite(args, env = {}) {
  return new Promise((resolve) => {
    const p = spawn(KITE, args, {env: {...baseEnv, ...env}});
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('close', (code) => resolve({code, stdout, stderr}));
  });
}
const ok = (r, what) => assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.stderr}`);
const list = async () => JSON.parse((await kite(['list', '--json'])).stdout);
const entry = async (name) => (await list()).find((e) => e.name === name);
const runIds = async (model, extra = []) => {
  const r = await kite(['run', '--model', model, '-p', 'Once upon a time', '-n', '12', '--temp', '0', '--json', ...extra]);
  ok(r, `kite run --model ${model}`);
  return JSON.parse(r.stdout).ids;
};
const dirOf = (name) => fs.readdirSync(store).map((d) => path.join(store, d)).find((d) => fs.existsSync(path.join(d, '.kite-model.json')) && JSON.parse(fs.readFileSync(path.join(d, '.kite-model.json'))).name === name);
let n = 0;
const test = async (name, fn) => {
  const t0 = Date.now();
  await fn();
  n++;
  console.log(`ok ${n} - ${name} (${Date.now() - t0} ms)`);
};

try {
  await test('malformed names are usage errors naming the fault', async () => {
    for (const [bad, says] of [['bad name', 'space'], ['user', 'expected user/repo'], ['us er/x', 'space'], ['a/../b', '..'],
                               ['a/b:Q4 K', 'space'], ['a/b:', 'empty'], ['a-/b', 'start or end'], ['https://', 'no host'], ['a/b/c/', "ends in '/'"]]) {
      const r = await kite(['pull', bad]);
      assert.equal(r.code, 2, `${bad}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(says.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')), bad);
    }
  });

  await test('a name not in the store says which kite pull to run', async () => {
    const r = await kite(['run', '--model', 'kite-test/stories-gguf:Q8_0', '-p', 'hi']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /model "kite-test\/stories-gguf:Q8_0" is not in the store: run `kite pull kite-test\/stories-gguf:Q8_0`/);
    assert.equal(r.stdout, '');
  });

  await test('user/repo picks the largest GGUF under 60% of memory, Q4_K_M when about as large', async () => {
    // 60% of 1.6 MiB = 0.96 MiB: the 656k files fit, stories260K (1.13 MiB) does not; Q4_K_M wins the tie
    let r = await kite(['pull', 'kite-test/stories-gguf', '--memory', '1.6M']);
    ok(r, 'pull user/repo');
    assert.match(r.stderr, /chose tinystories-656k-Q4_K_M\.gguf .*Q4_K_M/);
    let e = await entry('kite-test/stories-gguf');
    assert.deepEqual(e.files.map((f) => [f.path, f.size, f.sha256]), [['tinystories-656k-Q4_K_M.gguf', q8.length, sha256(q8)]]);
    assert.equal(e.architecture, 'llama');
    assert.equal(e.quantization, 'Q8_0'); // from general.file_type, not the (misleading) file name
    assert.equal(e.source, `hf:kite-test/stories-gguf@${mainCommit}`);
    ok(await kite(['rm', 'kite-test/stories-gguf']), 'rm');
    // 60% of 4 MiB: everything fits; the largest is stories260K, and Q4_K_M (63% of it) is not about as large
    r = await kite(['pull', 'kite-test/stories-gguf', '--memory', '4M']);
    ok(r, 'pull user/repo (4M)');
    assert.match(r.stderr, /chose stories260K-F32\.gguf .*the largest/);
    e = await entry('kite-test/stories-gguf');
    assert.equal(e.files[0].sha256, sha256(stories260k));
    // nothing fits: a clear error naming the smallest
    r = await kite(['pull', 'kite-test/stories-gguf@main:Q4_0', '--memory', '1M']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no GGUF file tagged Q4_0/);
    r = await kite(['pull', `kite-test/stories-gguf@${mainCommit}`, '--memory', '0.5M']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no GGUF file of kite-test\/stories-gguf fits in 60% .*smallest/);
  });

  await test('user/repo:TAG, user/repo/path/file.gguf, @revision and URLs', async () => {
    ok(await kite(['pull', 'kite-test/stories-gguf:q8_0']), 'pull :q8_0');
    assert.equal((await entry('kite-test/stories-gguf:Q8_0')).files[0].path, 'tinystories-656k-Q8_0.gguf');
    ok(await kite(['pull', 'hf.co/kite-test/stories-gguf/sub/dir/stories260K-nested.gguf']), 'pull a path');
    assert.equal((await entry('kite-test/stories-gguf/sub/dir/stories260K-nested.gguf')).size, stories260k.length);
    ok(await kite(['pull', `kite-test/stories-gguf@${mainCommit}:Q8_0`]), 'pull @commit:TAG');
    assert.ok(await entry(`kite-test/stories-gguf@${mainCommit}:Q8_0`));
    const url = `${hub.url}/files/stories260K.gguf`;
    const r = await kite(['pull', url]);
    ok(r, 'pull URL');
    const e = await entry(url);
    assert.equal(e.files[0].sha256, sha256(stories260k));
    assert.equal(e.source, url);
    // the store name runs exactly as the file it names
    assert.deepEqual(await runIds(url), await runIds(path.join(models, 'tinystories-tok512/stories260K.gguf')));
    // a second pull of a name in the store fetches nothing
    hub.resetCounters();
    ok(await kite(['pull', url]), 'pull again');
    assert.equal(hub.served.size, 0);
  });

  await test('a file tree in several pages (Link rel="next") is read whole', async () => {
    hub.treePageSize = 2;
    hub.treePages = 0;
    const name = 'kite-test/folder';
    const r = await kite(['pull', name]);
    hub.treePageSize = 0;
    ok(r, 'pull of a paged tree');
    assert.ok(hub.treePages >= 3, `the tree was read in ${hub.treePages} pages`);
    const e = await entry(name);
    const want = [...hub.repos.get(name).files.keys()].sort();
    assert.deepEqual(e.files.map((f) => f.path).sort(), want);
    ok(await kite(['rm', name]), 'rm');
  });

  await test('a safetensors repository is pulled whole and opens as a folder', async () => {
    const r = await kite(['pull', 'kite-test/folder']);
    ok(r, 'pull folder');
    const e = await entry('kite-test/folder');
    assert.deepEqual(e.files.map((f) => f.path).sort(), Object.keys(folderFiles).sort());
    assert.equal(e.architecture, 'llama');
    for (const f of e.files) assert.equal(f.sha256, sha256(folderFiles[f.path]), f.path);
    const show = await kite(['show', 'kite-test/folder']);
    ok(show, 'show');
    assert.match(show.stdout, /model\.safetensors +2626168 +sha256 [0-9a-f]{64}/);
    const ids = await runIds('kite-test/folder');
    assert.equal(ids.length, 12);
  });

  await test('split GGUF: fetched together, loaded as one model, same tokens as the whole file', async () => {
    const r = await kite(['pull', 'kite-test/split', '--memory', '4M']);
    ok(r, 'pull split');
    const e = await entry('kite-test/split');
    assert.deepEqual(e.files.map((f) => f.path), ['stories260K-00001-of-00002.gguf', 'stories260K-00002-of-00002.gguf']);
    assert.equal(e.size, split1.length + split2.length);
    assert.deepEqual(await runIds('kite-test/split'), await runIds(path.join(models, 'tinystories-tok512/stories260K.gguf')));
    // the second part alone is refused with a pointer to the first
    const dir = dirOf('kite-test/split');
    const r2 = await kite(['run', '--model', path.join(dir, 'stories260K-00002-of-00002.gguf'), '-p', 'x']);
    assert.equal(r2.code, 1);
    assert.match(r2.stderr, /part 2 of a split model: open the first part/);
  });

  await test('resume after a dropped connection fetches only the missing bytes', async () => {
    const key = 'kite-test/stories-gguf/stories260K-F32.gguf';
    const name = 'kite-test/stories-gguf/stories260K-F32.gguf';
    hub.resetCounters();
    hub.fault(key, {dropAfter: 400000, dropTimes: 1});
    let r = await kite(['pull', name, '--retries', '0']);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /400000 bytes kept in .*\.part; kite pull again resumes/);
    assert.equal(await entry(name), undefined); // nothing listed as complete
    assert.equal(hub.served.get(key), 400000);
    r = await kite(['pull', name]);
    ok(r, 'pull resumed');
    assert.match(r.stderr, /resuming at byte 400000/);
    assert.deepEqual(hub.ranges.get(key), ['bytes=400000-']);
    assert.equal(hub.served.get(key), stories260k.length); // 400000 + the rest: no byte twice
    assert.equal((await entry(name)).files[0].sha256, sha256(stories260k));
    // within one pull: a drop is resumed by the retry
    ok(await kite(['rm', name]), 'rm');
    hub.resetCounters();
    hub.fault(key, {dropAfter: 700000, dropTimes: 1});
    r = await kite(['pull', name]);
    ok(r, 'pull with a retry');
    assert.match(r.stderr, /broke at byte 700000.*resuming/);
    assert.equal(hub.served.get(key), stories260k.length);
    // a server error is waited out (Retry-After honoured) and retried; past the retries it is reported
    ok(await kite(['rm', name]), 'rm');
    hub.resetCounters();
    hub.fault(key, {status: 503, statusTimes: 2, retryAfter: 0});
    r = await kite(['pull', name]);
    ok(r, 'pull through two 503s');
    assert.match(r.stderr, /HTTP 503 from the server; retrying in 0\.0 s/);
    assert.equal(hub.served.get(key), stories260k.length);
    assert.equal((await entry(name)).files[0].sha256, sha256(stories260k));
    ok(await kite(['rm', name]), 'rm');
    hub.fault(key, {status: 502, statusTimes: 5});
    r = await kite(['pull', name, '--retries', '1']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /HTTP 502 from the server; retrying in 0\.5 s/);
    assert.match(r.stderr, /error: .*HTTP 502 from the server(?!;)/);
    assert.equal(await entry(name), undefined);
    hub.fault(key, null);
  });

  await test('on a terminal the progress is one redrawn bar per file', async () => {
    // util-linux's script(1) runs kite on a pseudo-terminal (stderr a TTY) and copies what it draws
    const key = 'kite-test/stories-gguf/stories260K-F32.gguf';
    hub.fault(key, {throttleMs: 40}); // 16 slices: several redraws
    const q = (a) => `'${a.replace(/'/g, `'\\''`)}'`;
    const r = await new Promise((resolve) => {
      const p = spawn('script', ['-qefc', [KITE, 'pull', key].map(q).join(' '), '/dev/null'], {env: {...baseEnv}});
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.stderr.on('data', (d) => (out += d));
      p.on('close', (code) => resolve({code, out}));
    });
    hub.fault(key, null);
    assert.equal(r.code, 0, r.out);
    const draws = r.out.split('\r\x1b[K').slice(1);
    assert.ok(draws.length >= 3, `expected several redraws of the bar, got ${draws.length}: ${JSON.stringify(r.out)}`);
    for (const d of draws) assert.match(d, /^\[1\/1\] stories260K-F32\.gguf \[[#.]{30}\] +\d+% /);
    assert.match(draws[draws.length - 1], /\[#{30}\] 100% /);
    assert.doesNotMatch(r.out, /kite pull: \[1\/1\]/); // no plain progress lines on a terminal
    assert.equal((await entry(key)).files[0].sha256, sha256(stories260k));
    ok(await kite(['rm', key]), 'rm');
  });

  await test('a checksum mismatch is rejected and nothing is kept', async () => {
    const r = await kite(['pull', 'kite-test/badsum:Q8_0']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /sha256 mismatch \(expected [0-9a-f]{64}, got [0-9a-f]{64}\): the download was deleted/);
    assert.equal(await entry('kite-test/badsum:Q8_0'), undefined);
    const dirs = fs.readdirSync(store).filter((d) => d.startsWith('kite-test-badsum'));
    assert.equal(dirs.length, 1);
    assert.deepEqual(fs.readdirSync(path.join(store, dirs[0])).filter((f) => f.endsWith('.gguf') || f.endsWith('.part')), []);
    // a URL of the hub's resolve endpoint: the 302's X-Linked-Etag is the sha256 checked (the CDN's ETag is none)
    const good = await kite(['pull', `${hub.url}/kite-test/stories-gguf/resolve/main/stories260K-F32.gguf`]);
    ok(good, 'pull a resolve URL');
    const bad = await kite(['pull', `${hub.url}/kite-test/badsum/resolve/main/stories260K-Q8_0.gguf`]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /sha256 mismatch/);
  });

  await test('404s name the repository or the file; a stall times out', async () => {
    let r = await kite(['pull', 'kite-test/nope']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /repository kite-test\/nope not found \(HTTP 404\)/);
    r = await kite(['pull', 'kite-test/stories-gguf/missing.gguf']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /kite-test\/stories-gguf\/missing\.gguf not found/);
    r = await kite(['pull', `${hub.url}/files/absent.gguf`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /absent\.gguf not found \(HTTP 404\)/);
    hub.fault('kite-test/slow/stories260K-Q8_0.gguf', {stallMs: 5000});
    const t0 = Date.now();
    r = await kite(['pull', 'kite-test/slow:Q8_0', '--stall-timeout', '1', '--retries', '0']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /timed out/);
    assert.ok(Date.now() - t0 < 4500, `the timeout took ${Date.now() - t0} ms`);
    hub.fault('kite-test/slow/stories260K-Q8_0.gguf', null);
  });

  await test('a gated repository: without a token, with a wrong one, with the right one; the token never shows', async () => {
    let r = await kite(['pull', 'kite-test/gated']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /access denied \(HTTP 401\).*set HF_TOKEN/);
    r = await kite(['pull', 'kite-test/gated'], {HF_TOKEN: 'hf_wrongToken'});
    assert.equal(r.code, 1);
    assert.match(r.stderr, /HTTP 403.*HF_TOKEN was rejected/);
    assert.ok(!(r.stderr + r.stdout).includes('hf_wrongToken'));
    hub.resetCounters();
    r = await kite(['pull', 'kite-test/gated', '--memory', '4M'], {HF_TOKEN: TOKEN, KITE_LOG: 'debug'});
    ok(r, 'gated with the token');
    assert.ok(!(r.stderr + r.stdout).includes(TOKEN), 'the token was printed');
    assert.ok(hub.authSeen.length >= 3 && hub.authSeen.every((a) => a.auth === `Bearer ${TOKEN}`));
    assert.ok(!JSON.stringify(await list()).includes(TOKEN));
  });

  await test('a write failure part-way leaves no model in kite list', async () => {
    const r = await kite(['pull', 'kite-test/folder@main:Q8_0'], {}); // (no such tag: a plain error first)
    assert.equal(r.code, 1);
    ok(await kite(['rm', 'kite-test/folder']), 'rm folder');
    const w = await kite(['pull', 'kite-test/folder'], {KITE_TEST_PULL_FAIL_WRITE_AT: '1000000'});
    assert.equal(w.code, 1);
    assert.match(w.stderr, /No space left on device/);
    assert.equal(await entry('kite-test/folder'), undefined);
    const again = await kite(['run', '--model', 'kite-test/folder', '-p', 'x']);
    assert.match(again.stderr, /is not in the store: run `kite pull kite-test\/folder`/);
  });

  await test('two concurrent pulls of one name: one waits, the file is fetched once and intact', async () => {
    hub.resetCounters();
    const key = 'kite-test/slow/stories260K-Q8_0.gguf';
    hub.fault(key, {throttleMs: 40});
    const [a, b] = await Promise.all([kite(['pull', 'kite-test/slow', '--memory', '4M']), kite(['pull', 'kite-test/slow', '--memory', '4M'])]);
    ok(a, 'first');
    ok(b, 'second');
    assert.match(a.stderr + b.stderr, /another kite pull of kite-test\/slow is running: waiting for it/);
    assert.equal(hub.served.get(key), stories260k.length);
    assert.equal((await entry('kite-test/slow')).files[0].sha256, sha256(stories260k));
    hub.fault(key, null);
  });

  await test('--pull pulls a model on first use', async () => {
    const r = await kite(['run', '--pull', '--model', 'kite-test/gated:Q8_0', '-p', 'Once upon a time', '-n', '12', '--temp', '0', '--json'], {HF_TOKEN: TOKEN});
    ok(r, 'run --pull');
    assert.deepEqual(JSON.parse(r.stdout).ids, await runIds(path.join(models, 'tinystories-tok512/stories260K.gguf')));
    assert.ok(await entry('kite-test/gated:Q8_0'));
  });

  await test('list, show and rm', async () => {
    const names = (await list()).map((e) => e.name);
    assert.deepEqual(names, [...names].sort());
    const table = await kite(['list']);
    ok(table, 'list');
    assert.match(table.stdout, /^NAME +SIZE +ARCH +QUANT +PULLED$/m);
    assert.match(table.stdout, /kite-test\/split +1\.\d MiB +llama/);
    const show = await kite(['show', 'kite-test/split', '--json']);
    ok(show, 'show');
    const s = JSON.parse(show.stdout);
    assert.ok(s.path.endsWith('stories260K-00001-of-00002.gguf'));
    const dir = dirOf('kite-test/split');
    ok(await kite(['rm', 'kite-test/split']), 'rm');
    assert.ok(!fs.existsSync(dir));
    assert.equal(await entry('kite-test/split'), undefined);
    const r = await kite(['rm', 'kite-test/split']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /not in the store/);
    const sh = await kite(['show', 'nobody/nothing']);
    assert.equal(sh.code, 1);
  });

  await test('an index edited by hand or truncated is rebuilt from the model folders', async () => {
    const before = (await list()).map((e) => e.name);
    const index = path.join(store, 'index.json');
    const text = fs.readFileSync(index, 'utf8');
    fs.writeFileSync(index, text.slice(0, text.length / 2)); // truncated
    let r = await kite(['list', '--json']);
    ok(r, 'list after truncation');
    assert.match(r.stderr, /index\.json is damaged .*line \d+, column \d+.*rebuilding/);
    assert.deepEqual(JSON.parse(r.stdout).map((e) => e.name), before);
    const j = JSON.parse(fs.readFileSync(index, 'utf8')); // written back whole
    j.models[0].path = '../../etc/passwd';
    j.models[1].size = 'big';
    fs.writeFileSync(index, JSON.stringify(j));
    r = await kite(['list', '--json']);
    ok(r, 'list after a hand edit');
    assert.match(r.stderr, /2 damaged entries; rebuilding/);
    assert.deepEqual(JSON.parse(r.stdout).map((e) => e.name), before);
    fs.writeFileSync(index, '\u0000\u00ff garbage');
    r = await kite(['run', '--model', 'kite-test/folder', '-p', 'x']); // still resolves what is on disk
    assert.match(r.stderr, /not in the store/); // (removed after its failed pull above)
    assert.deepEqual((await list()).map((e) => e.name), before);
  });

  await test('a store that cannot be written gives a clear error', async () => {
    // tests run as root, which chmod does not stop: a store under a regular file cannot be created by anyone
    const file = path.join(tmp, 'a-file');
    fs.writeFileSync(file, 'x');
    const r = await kite(['pull', 'kite-test/gated:Q8_0', '--models-dir', path.join(file, 'models')], {HF_TOKEN: TOKEN});
    assert.equal(r.code, 1);
    assert.match(r.stderr, /a-file\/models cannot be created: a part of its path is a file/);
    const l = await kite(['--models-dir', file, 'list']);
    assert.equal(l.code, 1);
    assert.match(l.stderr, /a-file is not a folder/);
  });
  console.log(`1..${n}`);
} finally {
  await hub.stop();
  fs.rmSync(tmp, {recursive: true, force: true});
}
