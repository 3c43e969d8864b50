// tests/hub/fake_hub.mjs — a local stand-in for the Hugging Face Hub, speaking the protocol
// `hearth pull` (and huggingface_hub) use, for tests with no internet:
//   GET  /api/models/ORG/NAME/revision/REV   {"id", "sha": commit, "siblings": [{"rfilename"}]}
//   HEAD|GET /ORG/NAME/resolve/REV/PATH       a regular file: 200 + ETag (git blob sha1), X-Repo-Commit,
//                                            Content-Length; an LFS file (*.safetensors): 302 to the
//                                            "CDN" (a second port: another origin) + X-Linked-Etag
//                                            (sha256), X-Linked-Size, X-Repo-Commit
//   GET  CDN/blob/SHA256                      the bytes, with Range: bytes=N- answered 206
// A gated repo answers 401 to both unless "Authorization: Bearer TOKEN". Knobs (hub.knobs) cut a
// transfer midway once (cut[file] = bytes), serve corrupted bytes (corrupt[file] = times), fail a
// file's resolve (fail[file] = status), or slow the CDN (delayMs per 64 KiB). Every request's method,
// URL and headers are recorded (hub.requests, hub.cdnRequests). No dependency beyond node.
import crypto from 'node:crypto';
import http from 'node:http';

export const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');
export const gitSha1 = (b) => crypto.createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
export const isLfs = (name) => name.endsWith('.safetensors');

// repos: { 'Org/Name': { gated: 'TOKEN' | undefined, revisions: { REV: { commit, files: { name: Buffer } } } } }
export async function startFakeHub(repos) {
  const hub = { repos, requests: [], cdnRequests: [], knobs: { cut: {}, corrupt: {}, fail: {}, delayMs: 0 } };
  const blobs = new Map(); // sha256 -> {bytes, name}
  const commits = new Map(); // repo -> commit -> rev
  const index = () => {
    for (const [id, r] of Object.entries(repos)) {
      const m = new Map();
      for (const [rev, v] of Object.entries(r.revisions)) {
        m.set(v.commit, v);
        m.set(rev, v);
        for (const [name, bytes] of Object.entries(v.files)) if (isLfs(name)) blobs.set(sha256(bytes), { bytes, name });
      }
      commits.set(id, m);
    }
  };
  index();
  hub.reindex = index;
  const record = (list, req) => list.push({ method: req.method, url: req.url, headers: { ...req.headers } });

  const cdn = http.createServer((req, res) => {
    record(hub.cdnRequests, req);
    const m = /^\/blob\/([0-9a-f]{64})/.exec(req.url);
    const b = m && blobs.get(m[1]);
    if (!b) { res.writeHead(404); res.end('no such blob'); return; }
    let bytes = b.bytes;
    if (hub.knobs.corrupt[b.name] > 0) {
      hub.knobs.corrupt[b.name]--;
      bytes = Buffer.from(bytes);
      bytes[bytes.length >> 1] ^= 0xff;
    }
    let from = 0;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (range) from = Number(range[1]);
    if (from > bytes.length) { res.writeHead(416); res.end(); return; }
    const body = bytes.subarray(from);
    res.writeHead(range ? 206 : 200, {
      'Content-Length': body.length, 'Accept-Ranges': 'bytes',
      ...(range ? { 'Content-Range': `bytes ${from}-${bytes.length - 1}/${bytes.length}` } : {}),
    });
    const cut = hub.knobs.cut[b.name];
    if (cut !== undefined) { // send `cut` bytes of the body, then drop the connection (once)
      delete hub.knobs.cut[b.name];
      res.write(body.subarray(0, cut), () => setTimeout(() => res.socket.destroy(), 50));
      return;
    }
    let off = 0;
    const step = () => {
      if (off >= body.length) { res.end(); return; }
      const chunk = body.subarray(off, off + 65536);
      off += chunk.length;
      if (!res.write(chunk)) res.once('drain', () => setTimeout(step, hub.knobs.delayMs));
      else setTimeout(step, hub.knobs.delayMs);
    };
    step();
  });

  const authorized = (repo, req) => !repo.gated || req.headers.authorization === `Bearer ${repo.gated}`;
  const server = http.createServer((req, res) => {
    record(hub.requests, req);
    const url = new URL(req.url, 'http://x');
    let m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    if (m && req.method === 'GET') {
      const id = m[1], rev = decodeURIComponent(m[2]), repo = repos[id];
      if (!repo) { res.writeHead(404, { 'Content-Type': 'application/json' }); res.end('{"error":"Repository not found"}'); return; }
      if (!authorized(repo, req)) { res.writeHead(401, { 'Content-Type': 'application/json' }); res.end('{"error":"Access to model is restricted"}'); return; }
      const v = commits.get(id).get(rev);
      if (!v) { res.writeHead(404); res.end('{"error":"Revision not found"}'); return; }
      const body = JSON.stringify({ id, sha: v.commit, siblings: (v.siblings || Object.keys(v.files)).map((rfilename) => ({ rfilename })) });
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(body);
      return;
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    if (m && (req.method === 'GET' || req.method === 'HEAD')) {
      const id = m[1], repo = repos[id], name = decodeURIComponent(m[3]);
      if (!repo) { res.writeHead(404); res.end(); return; }
      if (!authorized(repo, req)) { res.writeHead(401, { 'X-Error-Code': 'GatedRepo' }); res.end(); return; }
      const v = commits.get(id).get(decodeURIComponent(m[2]));
      const bytes = v && v.files[name];
      if (!bytes) { res.writeHead(404, { 'X-Error-Code': 'EntryNotFound' }); res.end(); return; }
      if (hub.knobs.fail[name]) { res.writeHead(hub.knobs.fail[name]); res.end(); return; }
      if (isLfs(name)) {
        const h = sha256(bytes);
        res.writeHead(302, {
          Location: `http://127.0.0.1:${cdn.address().port}/blob/${h}?expires=1`,
          ETag: `"${h}"`, 'X-Linked-Etag': `"${h}"`, 'X-Linked-Size': String(bytes.length), 'X-Repo-Commit': v.commit,
          'Content-Length': 0,
        });
        res.end();
        return;
      }
      res.writeHead(200, { ETag: `W/"${gitSha1(bytes)}"`, 'X-Repo-Commit': v.commit, 'Content-Length': bytes.length });
      res.end(req.method === 'HEAD' ? undefined : bytes);
      return;
    }
    res.writeHead(404);
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  await new Promise((r) => cdn.listen(0, '127.0.0.1', r));
  hub.endpoint = `http://127.0.0.1:${server.address().port}`;
  hub.cdnOrigin = `http://127.0.0.1:${cdn.address().port}`;
  hub.close = () => {
    const done = Promise.all([new Promise((r) => server.close(r)), new Promise((r) => cdn.close(r))]);
    server.closeAllConnections();
    cdn.closeAllConnections();
    return done;
  };
  return hub;
}
