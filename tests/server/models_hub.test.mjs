// tests/server/models_hub.test.mjs — the server's model management where it needs the real Hub
// cache code (load/hub_cache.c, load/hub_pull.c): /v1/models listing every cached model, DELETE of
// an unloaded model, and POST /v1/models/pull streaming progress from a local fake Hub (started
// here: the subset of the Hub's protocol a pull uses), a pull cancelled by its client leaving the
// cache as it was. CMake registers this test only once src/load/hub_stub.c is gone.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { CHAT, EMBED, FIX, requirePrereqs } from './harness.mjs';
import { addRepo, loadedIds, modelsById, repoFolder, serve, tmpCache } from './hubcache.mjs';

requirePrereqs();
const { default: OpenAI } = await import('openai');

const A = 'test/chat-a';
const B = 'test/chat-b';
const E = 'test/embed';
const msgs = [{ role: 'user', content: 'Say something.' }];

// ---- a fake Hub: GET /api/models/{repo}/revision/{rev}, HEAD/GET /{repo}/resolve/{rev}/{file} ----
// repos: {repo: {commit, files: {name: Buffer}}}; a file named in slow is sent 64 KiB per 50 ms.
function fakeHub(repos, slow = new Set()) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url.split('?')[0]);
    let m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url);
    if (m && repos[m[1]]) {
      const r = repos[m[1]];
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: m[1], sha: r.commit,
        siblings: Object.keys(r.files).map((f) => ({ rfilename: f })) }));
      return;
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url);
    const file = m && repos[m[1]] && repos[m[1]].files[m[3]];
    if (!file) { res.writeHead(404, { 'x-error-code': 'EntryNotFound' }); res.end(); return; }
    const sha = crypto.createHash('sha256').update(file).digest('hex');
    let start = 0;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (range) start = Math.min(Number(range[1]), file.length);
    const headers = {
      'content-type': 'application/octet-stream', etag: `"${sha}"`, 'x-linked-etag': `"${sha}"`,
      'x-linked-size': String(file.length), 'x-repo-commit': repos[m[1]].commit,
      'content-length': String(file.length - start), 'accept-ranges': 'bytes',
    };
    if (range) headers['content-range'] = `bytes ${start}-${file.length - 1}/${file.length}`;
    res.writeHead(range ? 206 : 200, headers);
    if (req.method === 'HEAD') { res.end(); return; }
    if (!slow.has(m[3])) { res.end(file.subarray(start)); return; }
    let pos = start;
    const timer = setInterval(() => {
      if (res.destroyed) { clearInterval(timer); return; }
      const next = Math.min(pos + 65536, file.length);
      res.write(file.subarray(pos, next));
      pos = next;
      if (pos >= file.length) { clearInterval(timer); res.end(); }
    }, 50);
    res.on('close', () => clearInterval(timer));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const filesOf = (dir) => Object.fromEntries(fs.readdirSync(dir)
  .filter((f) => fs.statSync(path.join(dir, f)).isFile()).map((f) => [f, fs.readFileSync(path.join(dir, f))]));

// Reads a pull's server-sent events until the stream ends; returns the parsed data lines.
async function pullEvents(srv, body, headers = {}) {
  const r = await fetch(`${srv.url}/v1/models/pull`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const text = await r.text();
  return [...text.matchAll(/^data: (.*)$/gm)].map((x) => x[1]).filter((x) => x !== '[DONE]').map((x) => JSON.parse(x));
}

let cache, hub;
const remote = {};
before(async () => {
  cache = tmpCache('models-hub');
  addRepo(cache, A, path.join(FIX, CHAT));
  addRepo(cache, B, path.join(FIX, CHAT));
  addRepo(cache, E, path.join(FIX, EMBED));
  remote['remote/chat'] = { commit: 'c0ffee'.padEnd(40, '0'), files: filesOf(path.join(FIX, CHAT)) };
  remote['remote/slow'] = { commit: 'dec0de'.padEnd(40, '0'), files: filesOf(path.join(FIX, CHAT)) };
  hub = await fakeHub(remote, new Set(['model.safetensors']));
});
after(() => {
  hub.close();
  fs.rmSync(cache, { recursive: true, force: true });
});

describe('with --allow-model-admin and a fake Hub', () => {
  let srv, client;
  before(async () => {
    srv = await serve(['--model', A, '--max-loaded', '1', '--allow-model-admin'],
      { HF_HUB_CACHE: cache, HF_ENDPOINT: `http://127.0.0.1:${hub.address().port}`, HF_TOKEN: '' });
    assert.ok(srv.url, srv.log);
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  });

  test('/v1/models lists every cached model with its kind, loaded or not', async () => {
    const m = await modelsById(srv);
    assert.equal(m[A].loaded, true);
    assert.equal(m[B].loaded, false);
    assert.equal(m[B].kind, 'chat');
    assert.equal(m[E].loaded, false);
    assert.equal(m[E].kind, 'embedding');
    for (const x of Object.values(m)) assert.equal(x.object, 'model');
  });

  test('DELETE of an unloaded model removes it from the cache and the list', async () => {
    const r = await fetch(`${srv.url}/v1/models/${B}`, { method: 'DELETE' });
    assert.equal(r.status, 200, await r.clone().text());
    assert.deepEqual(await r.json(), { id: B, object: 'model', deleted: true });
    assert.ok(!fs.existsSync(path.join(repoFolder(cache, B), 'snapshots')) ||
      fs.readdirSync(path.join(repoFolder(cache, B), 'snapshots')).length === 0);
    assert.equal((await modelsById(srv))[B], undefined);
    const again = await fetch(`${srv.url}/v1/models/${B}`, { method: 'DELETE' });
    assert.equal(again.status, 404);
  });

  test('POST /v1/models/pull streams progress, ends with success, and the model serves', async () => {
    const ev = await pullEvents(srv, { model: 'remote/chat' });
    const last = ev.at(-1);
    assert.deepEqual(last, { status: 'success', model: 'remote/chat', revision: remote['remote/chat'].commit });
    const progress = ev.slice(0, -1);
    assert.ok(progress.length >= 2, JSON.stringify(ev));
    const total = Object.values(remote['remote/chat'].files).reduce((n, b) => n + b.length, 0);
    for (const p of progress) {
      assert.equal(typeof p.status, 'string');
      assert.ok(p.completed <= p.total || p.total === 0, JSON.stringify(p));
    }
    const st = progress.filter((p) => p.file === 'model.safetensors');
    assert.ok(st.length, 'progress names the weights file');
    assert.equal(Math.max(...progress.map((p) => p.all_completed)), total, 'every byte counted');
    assert.equal((await modelsById(srv))['remote/chat'].loaded, false);
    const r = await client.chat.completions.create({ model: 'remote/chat', messages: msgs, max_tokens: 2 });
    assert.equal(r.model, 'remote/chat');
    assert.deepEqual(await loadedIds(srv), ['remote/chat']);
  });

  test('a pull of an unknown repo ends with an error object', async () => {
    const ev = await pullEvents(srv, { model: 'remote/missing' });
    assert.ok(ev.at(-1).error, JSON.stringify(ev));
    assert.equal(ev.at(-1).error.code, 'pull_failed');
    assert.ok(!fs.existsSync(path.join(repoFolder(cache, 'remote/missing'), 'snapshots')));
  });

  test('a client that leaves cancels its pull; the cache has no snapshot of it', async () => {
    const ac = new AbortController();
    const r = await fetch(`${srv.url}/v1/models/pull`, { method: 'POST', signal: ac.signal,
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'remote/slow' }) });
    const reader = r.body.getReader();
    let seen = '';
    while (!/model\.safetensors/.test(seen)) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended before the weights: ${seen}`);
      seen += Buffer.from(value).toString();
    }
    ac.abort();
    const snaps = path.join(repoFolder(cache, 'remote/slow'), 'snapshots');
    // the slow file takes many seconds in full; well before that the pull must have stopped
    await new Promise((res) => setTimeout(res, 3000));
    const files = fs.existsSync(snaps) ? fs.readdirSync(snaps).flatMap((c) => fs.readdirSync(path.join(snaps, c))) : [];
    assert.ok(!files.includes('model.safetensors'), `weights in the snapshot: ${files}`);
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  });
});
