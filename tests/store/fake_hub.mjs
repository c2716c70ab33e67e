// A fake Hugging Face hub on loopback, speaking the API shape kite pull uses (as huggingface_hub does):
//   GET /api/models/{repo}/revision/{rev}            {id, sha, siblings: [{rfilename}]}
//   GET /api/models/{repo}/tree/{rev}?recursive=true [{type, oid, size, path, lfs: {oid, size, pointerSize}}]
//   GET /{repo}/resolve/{rev}/{path}                 LFS files: 302 to /lfs/{sha256} with X-Linked-Etag and
//                                                    X-Repo-Commit; git files: the bytes with an ETag (not a sha256)
//   GET /files/{name}                                plain files for URL pulls
// with Range support (206, Content-Range) and fault injection per file: drop the connection after N bytes,
// stall before the body, a wrong sha256 in the tree, a gated repository wanting a token. Every byte of
// file content served is counted per file, with every Range header seen.
import crypto from 'node:crypto';
import http from 'node:http';

export const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

export class FakeHub {
  constructor() {
    this.repos = new Map(); // repo -> {commit, files: Map(path -> {data, lfs, sha}), token}
    this.plain = new Map(); // /files/name -> data
    this.faults = new Map(); // path key "repo/path" or "files/name" -> {dropAfter, dropTimes, stallMs, throttleMs}
    this.served = new Map(); // key -> bytes of content sent
    this.ranges = new Map(); // key -> [Range header values]
    this.authSeen = [];      // Authorization headers seen (to check where the token went)
  }

  addRepo(repo, files, opts = {}) {
    const commit = crypto.createHash('sha1').update(repo).digest('hex');
    const map = new Map();
    for (const [path, data] of Object.entries(files)) {
      const lfs = !path.endsWith('.md') && !path.endsWith('.json');
      map.set(path, {data, lfs, sha: opts.wrongSha?.includes(path) ? sha256(Buffer.from('not the file')) : sha256(data)});
    }
    this.repos.set(repo, {commit, files: map, token: opts.token});
    return commit;
  }

  fault(key, f) { if (f) this.faults.set(key, f); else this.faults.delete(key); }
  resetCounters() { this.served.clear(); this.ranges.clear(); this.authSeen = []; }

  async start() {
    this.server = http.createServer((req, res) => this.handle(req, res));
    await new Promise((ok) => this.server.listen(0, '127.0.0.1', ok));
    this.port = this.server.address().port;
    this.url = `http://127.0.0.1:${this.port}`;
  }

  stop() { this.server.closeAllConnections?.(); return new Promise((ok) => this.server.close(ok)); }

  json(res, status, body, headers = {}) {
    const text = JSON.stringify(body);
    res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers});
    res.end(text);
  }

  // huggingface_hub's error answers: 401 for a gated repo without a token, 403 with one that lacks access
  authorize(repo, req, res) {
    const want = repo.token;
    if (!want) return true;
    const got = req.headers.authorization;
    if (got === `Bearer ${want}`) return true;
    res.setHeader('X-Error-Code', 'GatedRepo');
    this.json(res, got ? 403 : 401, {error: got ? 'Access to this model is restricted' : 'Access to model is restricted. You must have access to it and be authenticated to access it. Please log in.'});
    return false;
  }

  findRepo(parts) {
    // repo names are user/name: two components
    const repo = parts.slice(0, 2).join('/');
    return [repo, this.repos.get(repo)];
  }

  handle(req, res) {
    if (req.headers.authorization) this.authSeen.push({url: req.url, auth: req.headers.authorization});
    const url = new URL(req.url, this.url);
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (parts[0] === 'api' && parts[1] === 'models') {
      const [repoName, repo] = this.findRepo(parts.slice(2));
      if (!repo) return this.json(res, 404, {error: 'Repository not found'}, {'X-Error-Code': 'RepoNotFound'});
      if (!this.authorize(repo, req, res)) return;
      const rev = parts[5];
      if (rev !== 'main' && rev !== repo.commit) return this.json(res, 404, {error: `Invalid rev id: ${rev}`}, {'X-Error-Code': 'RevisionNotFound'});
      if (parts[4] === 'revision') {
        return this.json(res, 200, {id: repoName, sha: repo.commit, siblings: [...repo.files.keys()].map((rfilename) => ({rfilename}))});
      }
      if (parts[4] === 'tree') {
        const entries = [];
        const dirs = new Set();
        for (const [path, f] of repo.files) {
          const segs = path.split('/');
          for (let i = 1; i < segs.length; i++) dirs.add(segs.slice(0, i).join('/'));
          const e = {type: 'file', oid: crypto.createHash('sha1').update(f.data).digest('hex'), size: f.data.length, path};
          if (f.lfs) e.lfs = {oid: f.sha, size: f.data.length, pointerSize: 134};
          entries.push(e);
        }
        for (const d of dirs) entries.push({type: 'directory', oid: '0'.repeat(40), size: 0, path: d});
        // pages of treePageSize entries, as the hub pages long listings: Link rel="next" with a cursor
        const size = this.treePageSize || entries.length || 1;
        const at = Number(url.searchParams.get('cursor') || 0);
        this.treePages = (this.treePages || 0) + 1;
        const headers = {};
        if (at + size < entries.length) {
          const next = new URL(url);
          next.searchParams.set('cursor', String(at + size));
          headers.Link = `<${next.href}>; rel="next"`;
        }
        return this.json(res, 200, entries.slice(at, at + size), headers);
      }
      return this.json(res, 404, {error: 'unknown API'});
    }
    if (parts[2] === 'resolve') {
      const [, repo] = this.findRepo(parts);
      if (!repo) return this.json(res, 404, {error: 'Repository not found'}, {'X-Error-Code': 'RepoNotFound'});
      if (!this.authorize(repo, req, res)) return;
      const rev = parts[3];
      if (rev !== 'main' && rev !== repo.commit) return this.json(res, 404, {error: 'Revision not found'}, {'X-Error-Code': 'RevisionNotFound'});
      const path = parts.slice(4).join('/');
      const f = repo.files.get(path);
      if (!f) return this.json(res, 404, {error: 'Entry not found'}, {'X-Error-Code': 'EntryNotFound'});
      const key = `${parts[0]}/${parts[1]}/${path}`;
      if (f.lfs) {
        res.writeHead(302, {Location: `/lfs/${f.sha}/${encodeURIComponent(key)}`, 'X-Linked-Etag': `"${f.sha}"`,
                            'X-Linked-Size': f.data.length, 'X-Repo-Commit': repo.commit, 'Content-Length': 0});
        return res.end();
      }
      return this.send(req, res, key, f.data, {'X-Repo-Commit': repo.commit, ETag: `"${crypto.createHash('sha1').update(f.data).digest('hex')}"`});
    }
    if (parts[0] === 'lfs') {
      const key = parts[2];
      const [user, name, ...rest] = key.split('/');
      const repo = this.repos.get(`${user}/${name}`);
      const f = repo?.files.get(rest.join('/'));
      if (!f) return this.json(res, 404, {error: 'no such object'});
      // a CDN's ETag is an md5, not the sha256: only the hub's X-Linked-Etag vouches for the content
      return this.send(req, res, key, f.data, {ETag: `"${crypto.createHash('md5').update(f.data).digest('hex')}"`});
    }
    if (parts[0] === 'files') {
      const data = this.plain.get(parts[1]);
      if (!data) return this.json(res, 404, {error: 'no such file'});
      return this.send(req, res, `files/${parts[1]}`, data, {});
    }
    this.json(res, 404, {error: 'not found'});
  }

  send(req, res, key, data, headers) {
    const fault = this.faults.get(key) || {};
    if (fault.status && (fault.statusTimes ?? 1) > 0) { // a server error (503 with Retry-After, 502 ...) this many times
      fault.statusTimes = (fault.statusTimes ?? 1) - 1;
      this.errors = (this.errors || 0) + 1;
      return this.json(res, fault.status, {error: 'injected'}, fault.retryAfter !== undefined ? {'Retry-After': String(fault.retryAfter)} : {});
    }
    let start = 0;
    let status = 200;
    const range = req.headers.range;
    if (range) {
      (this.ranges.get(key) || this.ranges.set(key, []).get(key)).push(range);
      const m = /^bytes=(\d+)-$/.exec(range);
      if (m) {
        start = Number(m[1]);
        if (start >= data.length) {
          res.writeHead(416, {'Content-Range': `bytes */${data.length}`, 'Content-Length': 0});
          return res.end();
        }
        status = 206;
        headers['Content-Range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
      }
    }
    const body = data.subarray(start);
    res.writeHead(status, {'Content-Type': 'application/octet-stream', 'Content-Length': body.length, 'Accept-Ranges': 'bytes', ...headers});
    const count = (n) => this.served.set(key, (this.served.get(key) || 0) + n);
    const go = () => {
      let limit = body.length;
      if (fault.dropAfter !== undefined && (fault.dropTimes ?? 1) > 0) {
        fault.dropTimes = (fault.dropTimes ?? 1) - 1;
        limit = Math.max(0, fault.dropAfter - start);
      }
      if (limit < body.length) {
        count(limit);
        res.write(body.subarray(0, limit), () => setTimeout(() => res.destroy(), 20));
        return;
      }
      if (fault.throttleMs) {
        // 16 slices, one every throttleMs: a slow transfer (for the concurrent pulls)
        const step = Math.ceil(body.length / 16);
        let at = 0;
        const tick = () => {
          if (res.destroyed) return;
          const piece = body.subarray(at, at + step);
          at += piece.length;
          count(piece.length);
          if (at >= body.length) res.end(piece);
          else { res.write(piece); setTimeout(tick, fault.throttleMs); }
        };
        return tick();
      }
      count(body.length);
      res.end(body);
    };
    if (fault.stallMs) setTimeout(go, fault.stallMs); else go();
  }
}

// Splits a GGUF file into parts as llama.cpp's gguf-split does: part 1 keeps all metadata and adds
// split.no (u16), split.count (u16) and split.tensors.count (i32); later parts carry only those keys
// (and general.alignment, when set); tensors are dealt out in order. Written here, in JavaScript, so the
// split files do not come from kite's own writer.
export function splitGguf(buf, nParts) {
  let off = 0;
  const u32 = () => { const v = buf.readUInt32LE(off); off += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(off)); off += 8; return v; };
  const str = () => { const n = u64(); const s = buf.subarray(off, off + n); off += n; return s; };
  const sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
  const skipValue = (t) => {
    if (t === 8) return void str();
    if (t === 9) { const et = u32(); const n = u64(); for (let i = 0; i < n; i++) skipValue(et); return; }
    if (!(t in sizes)) throw new Error(`gguf: value type ${t}`);
    off += sizes[t];
  };
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('not GGUF');
  off = 4;
  const version = u32();
  const nTensors = u64();
  const nKv = u64();
  const kvs = [];
  let alignment = 32;
  let alignmentKv = null;
  for (let i = 0; i < nKv; i++) {
    const start = off;
    const key = str().toString();
    const t = u32();
    const vstart = off;
    skipValue(t);
    if (key === 'general.alignment') { alignment = buf.readUInt32LE(vstart); alignmentKv = buf.subarray(start, off); }
    kvs.push(buf.subarray(start, off));
  }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const nd = u32();
    const dims = [];
    for (let k = 0; k < nd; k++) dims.push(u64());
    const type = u32();
    const offset = u64();
    tensors.push({name, dims, type, offset});
  }
  const dataStart = Math.ceil(off / alignment) * alignment;
  const dataLen = buf.length - dataStart;
  const order = [...tensors].sort((a, b) => a.offset - b.offset);
  order.forEach((t, i) => { t.bytes = buf.subarray(dataStart + t.offset, dataStart + (i + 1 < order.length ? order[i + 1].offset : dataLen)); });
  const w = {
    str(s) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(s.length)); return Buffer.concat([b, Buffer.from(s)]); },
    u16kv(k, v) { const b = Buffer.alloc(6); b.writeUInt32LE(2, 0); b.writeUInt16LE(v, 4); return Buffer.concat([w.str(k), b]); },
    i32kv(k, v) { const b = Buffer.alloc(8); b.writeUInt32LE(5, 0); b.writeInt32LE(v, 4); return Buffer.concat([w.str(k), b]); },
  };
  const per = Math.ceil(tensors.length / nParts);
  const parts = [];
  for (let p = 0; p < nParts; p++) {
    const mine = tensors.slice(p * per, (p + 1) * per);
    const splitKvs = [w.u16kv('split.no', p), w.u16kv('split.count', nParts), w.i32kv('split.tensors.count', tensors.length)];
    const partKvs = p === 0 ? [...kvs, ...splitKvs] : [...(alignmentKv ? [alignmentKv] : []), ...splitKvs];
    const infos = [];
    let dataOff = 0;
    for (const t of mine) {
      const head = Buffer.alloc(4);
      head.writeUInt32LE(t.dims.length);
      const dims = Buffer.alloc(8 * t.dims.length);
      t.dims.forEach((d, k) => dims.writeBigUInt64LE(BigInt(d), 8 * k));
      const tail = Buffer.alloc(12);
      tail.writeUInt32LE(t.type, 0);
      tail.writeBigUInt64LE(BigInt(dataOff), 4);
      infos.push(Buffer.concat([w.str(t.name), head, dims, tail]));
      dataOff += Math.ceil(t.bytes.length / alignment) * alignment;
    }
    const header = Buffer.alloc(24);
    header.write('GGUF', 0, 'latin1');
    header.writeUInt32LE(version, 4);
    header.writeBigUInt64LE(BigInt(mine.length), 8);
    header.writeBigUInt64LE(BigInt(partKvs.length), 16);
    let meta = Buffer.concat([header, ...partKvs, ...infos]);
    meta = Buffer.concat([meta, Buffer.alloc(Math.ceil(meta.length / alignment) * alignment - meta.length)]);
    const datas = mine.map((t) => Buffer.concat([t.bytes, Buffer.alloc(Math.ceil(t.bytes.length / alignment) * alignment - t.bytes.length)]));
    parts.push(Buffer.concat([meta, ...datas]));
  }
  return parts;
}
