// tests/hub/pull.test.mjs — `hearth pull`, `hearth list`, `hearth rm` and a repo id used as a model
// directory, against the fake Hub (fake_hub.mjs) in a fresh HF_HUB_CACHE per test. The checkpoints
// are tiny random ones made by `hearth mkmodel` with the real Qwen tokenizers
// (scripts/fetch-tokenizers.sh). HEARTH_BIN: the hearth executable.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';

import { gitSha1, isLfs, sha256, startFakeHub } from './fake_hub.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.HEARTH_BIN;
const PULL_API = process.env.HEARTH_HUB_PULL_API; // tests/hub/pull_api.c
const TOK = path.join(process.env.HEARTH_CACHE || path.join(os.homedir(), '.cache/hearth'), 'tokenizers');
for (const f of [BIN, PULL_API, path.join(TOK, 'qwen3/tokenizer.json'), path.join(TOK, 'qwen3-embed/tokenizer.json')]) {
  if (!f || !fs.existsSync(f)) { console.error(`FAIL: missing ${f} (HEARTH_BIN, HEARTH_HUB_PULL_API, scripts/fetch-tokenizers.sh)`); process.exit(1); }
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-hub-test-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

// ---- the checkpoints -------------------------------------------------------------------------
function mkmodel(config, name, extra = []) {
  const out = path.join(tmp, 'src', name);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  const r = spawnSync(BIN, ['mkmodel', '--config', path.join(here, '..', 'server', config), '--out', out, '--seed', '3', ...extra]);
  assert.equal(r.status, 0, String(r.stderr));
  return out;
}
const read = (dir, f) => fs.readFileSync(path.join(dir, f));
const chatDir = mkmodel('tiny-chat-config.json', 'chat');
const embedDir = mkmodel('tiny-embed-config.json', 'embed', ['--embedding']);
const chatFiles = {
  'config.json': read(chatDir, 'config.json'),
  'model.safetensors': read(chatDir, 'model.safetensors'),
  'tokenizer.json': read(path.join(TOK, 'qwen3'), 'tokenizer.json'),
  'tokenizer_config.json': read(path.join(TOK, 'qwen3'), 'tokenizer_config.json'),
  'chat_template.jinja': read(path.join(TOK, 'qwen3'), 'chat_template.jinja'),
  'generation_config.json': Buffer.from('{"eos_token_id": [151645, 151643]}'),
  // not inference files: never fetched
  'README.md': Buffer.from('# tiny\n'), '.gitattributes': Buffer.from('*.safetensors filter=lfs\n'),
  'onnx/model.onnx': Buffer.from('not fetched'),
};
const embedFiles = {
  'config.json': read(embedDir, 'config.json'),
  'model.safetensors': read(embedDir, 'model.safetensors'),
  'tokenizer.json': read(path.join(TOK, 'qwen3-embed'), 'tokenizer.json'),
  'tokenizer_config.json': read(path.join(TOK, 'qwen3-embed'), 'tokenizer_config.json'),
  'modules.json': Buffer.from(JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }])),
  '1_Pooling/config.json': Buffer.from(JSON.stringify({ word_embedding_dimension: 64, pooling_mode_lasttoken: true })),
};
const commit = (s) => crypto.createHash('sha1').update(s).digest('hex');
const C1 = commit('chat-main'), C2 = commit('chat-v2'), E1 = commit('embed-main');
const v2Files = { ...chatFiles, 'generation_config.json': Buffer.from('{"eos_token_id": 151645}') };

// A fresh fake Hub for each test (knobs and request logs are per test).
async function freshHub(extra = {}) {
  return startFakeHub({
    'Org/Tiny': { revisions: { main: { commit: C1, files: chatFiles }, v2: { commit: C2, files: v2Files } } },
    'Org/TinyEmbed': { revisions: { main: { commit: E1, files: embedFiles } } },
    'Org/Gated': { gated: 'hf_secret_token', revisions: { main: { commit: commit('gated'), files: chatFiles } } },
    ...extra,
  });
}
let nCache = 0;
function env(hub, more = {}) {
  const cache = path.join(tmp, `cache-${nCache++}`);
  return { ...process.env, HF_HUB_CACHE: cache, HF_ENDPOINT: hub.endpoint, HF_TOKEN: '', HF_HOME: path.join(tmp, 'no-hf-home'), ...more };
}
// Asynchronous: the fake Hub answers from this same process.
function hearth(args, e, input = '', bin = BIN) {
  return new Promise((resolve) => {
    const c = spawn(bin, args, { env: e });
    c.stdin.end(input);
    let out = '', err = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => { err += d; });
    c.on('exit', (code) => resolve({ code, out, err }));
  });
}
const repoDir = (e, repo) => path.join(e.HF_HUB_CACHE, `models--${repo.replace('/', '--')}`);
// Every file below dir, as "relpath -> link target or size", for before/after comparisons.
function tree(dir) {
  const out = {};
  const walk = (d, rel) => {
    if (!fs.existsSync(d)) return;
    for (const n of fs.readdirSync(d).sort()) {
      const p = path.join(d, n), r = rel ? `${rel}/${n}` : n, st = fs.lstatSync(p);
      if (st.isDirectory()) walk(p, r);
      else out[r] = st.isSymbolicLink() ? `-> ${fs.readlinkSync(p)}` : `${st.size} bytes`;
    }
  };
  walk(dir, '');
  return out;
}
const wanted = (files) => Object.keys(files).filter((n) => !['README.md', '.gitattributes', 'onnx/model.onnx'].includes(n));

// The layout huggingface_hub writes, file by file.
function checkLayout(e, repo, rev, commitId, files) {
  const rd = repoDir(e, repo);
  if (rev !== commitId) assert.equal(fs.readFileSync(path.join(rd, 'refs', rev), 'utf8'), commitId, 'refs/<rev> holds the commit');
  const snap = path.join(rd, 'snapshots', commitId);
  const names = wanted(files);
  for (const name of names) {
    const link = path.join(snap, name), bytes = files[name];
    const etag = isLfs(name) ? sha256(bytes) : gitSha1(bytes);
    assert.ok(fs.lstatSync(link).isSymbolicLink(), `${name} is a symlink`);
    const depth = name.split('/').length - 1;
    assert.equal(fs.readlinkSync(link), `${'../'.repeat(2 + depth)}blobs/${etag}`, `${name}: relative link to blobs/<etag>`);
    assert.ok(fs.readFileSync(link).equals(bytes), `${name}: the bytes served`);
  }
  const got = Object.keys(tree(snap)).sort();
  assert.deepEqual(got, [...names].sort(), 'exactly the inference files, nothing else');
  assert.deepEqual(fs.readdirSync(path.join(rd, 'blobs')).filter((b) => b.endsWith('.incomplete')), [], 'no .incomplete left');
}

test('a full pull: the cache layout, then `hearth run` and `hearth serve` on the repo id', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    const r = await hearth(['pull', 'Org/Tiny'], e);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /downloading model\.safetensors/); // plain lines: stdout is not a terminal
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
    assert.ok(!hub.requests.some((q) => /README|gitattributes|onnx/.test(q.url)), 'non-inference files are not requested');
    const run = await hearth(['run', '--model', 'Org/Tiny', '--prompt', 'Hello', '-n', '4'], e);
    assert.equal(run.code, 0, run.err);
    // tokenize and template read the snapshot's tokenizer and chat template
    const tok = await hearth(['tokenize', '--model', 'Org/Tiny'], e, 'Hello world');
    assert.equal(tok.code, 0, tok.err);
    assert.equal(tok.out.trim(), '9707 1879'); // Qwen's BPE ids of "Hello" and " world"
    const msgs = path.join(tmp, 'messages.json');
    fs.writeFileSync(msgs, JSON.stringify([{ role: 'user', content: 'hi' }]));
    const tpl = await hearth(['template', '--model', 'Org/Tiny', '--messages', msgs], e);
    assert.equal(tpl.code, 0, tpl.err);
    assert.match(tpl.out, /<\|im_start\|>user\nhi<\|im_end\|>\n<\|im_start\|>assistant\n/);
    // the sentence-transformers files land in their subfolder (one more ../ in the link)
    assert.equal((await hearth(['pull', 'Org/TinyEmbed'], e)).code, 0);
    checkLayout(e, 'Org/TinyEmbed', 'main', E1, embedFiles);
    const emb = await hearth(['embed', '--model', 'Org/TinyEmbed', '--prompt', 'Hello', '--json'], e);
    assert.equal(emb.code, 0, emb.err);
    assert.equal(JSON.parse(emb.out).length, 64);
    // serve: the tokenizer and template come from the snapshot too; clients name it by its repo id
    const portFile = path.join(tmp, 'port');
    const srv = spawn(BIN, ['serve', '--model', 'Org/Tiny', '--port', '0', '--port-file', portFile, '--ctx', '256'], { env: e, stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    srv.stderr.on('data', (d) => { log += d; });
    try {
      const t0 = Date.now();
      while (!fs.existsSync(portFile) || !fs.readFileSync(portFile, 'utf8')) {
        assert.equal(srv.exitCode, null, `serve exited: ${log}`);
        assert.ok(Date.now() - t0 < 120000, 'serve did not start');
        await new Promise((res) => setTimeout(res, 50));
      }
      const port = Number(fs.readFileSync(portFile, 'utf8'));
      const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'Org/Tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal((await res.json()).object, 'chat.completion');
    } finally {
      srv.kill('SIGTERM');
      await new Promise((res) => srv.on('exit', res));
    }
  } finally { await hub.close(); }
});

test('hearth list and list --json; hearth rm keeps the blobs another snapshot uses', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    assert.equal((await hearth(['pull', 'Org/Tiny'], e)).code, 0);
    assert.equal((await hearth(['pull', 'Org/Tiny', '--revision', 'v2'], e)).code, 0);
    assert.equal((await hearth(['pull', 'Org/TinyEmbed'], e)).code, 0);
    checkLayout(e, 'Org/Tiny', 'v2', C2, v2Files);
    const list = JSON.parse((await hearth(['list', '--json'], e)).out);
    assert.deepEqual(list.map((m) => m.repo), ['Org/Tiny', 'Org/TinyEmbed']);
    const [chat, emb] = list;
    assert.equal(chat.revision, C1, 'refs/main names the snapshot listed');
    assert.equal(chat.kind, 'chat');
    assert.equal(emb.kind, 'embedding');
    assert.equal(chat.family, 'qwen2');
    assert.equal(emb.family, 'qwen3');
    const blobBytes = (files) => wanted(files).reduce((s, n) => s + files[n].length, 0);
    assert.equal(chat.bytes_on_disk, blobBytes(chatFiles));
    // parameters: the element count of the safetensors header, computed here independently
    const st = chatFiles['model.safetensors'], hlen = Number(st.readBigUInt64LE(0));
    const header = JSON.parse(st.subarray(8, 8 + hlen).toString());
    const nParams = Object.entries(header).filter(([k]) => k !== '__metadata__').reduce((s, [, t]) => s + t.shape.reduce((a, b) => a * b, 1), 0);
    assert.equal(chat.parameters, nParams);
    const text = (await hearth(['list'], e)).out;
    assert.match(text, /^Org\/Tiny\s+\S+\s+qwen2\s+\S+M\s+[\d.]+ MB\s+chat$/m);
    assert.match(text, /^Org\/TinyEmbed\s.*embedding$/m);

    // rm one revision: its snapshot and ref go, the shared blobs stay, its own blob goes
    const rd = repoDir(e, 'Org/Tiny');
    const v2Only = gitSha1(v2Files['generation_config.json']), shared = sha256(chatFiles['model.safetensors']);
    assert.ok(fs.existsSync(path.join(rd, 'blobs', v2Only)));
    const rm1 = await hearth(['rm', 'Org/Tiny', '--revision', 'v2'], e);
    assert.equal(rm1.code, 0, rm1.err);
    assert.ok(!fs.existsSync(path.join(rd, 'snapshots', C2)) && !fs.existsSync(path.join(rd, 'refs', 'v2')));
    assert.ok(!fs.existsSync(path.join(rd, 'blobs', v2Only)), 'the blob only v2 used is deleted');
    assert.ok(fs.existsSync(path.join(rd, 'blobs', shared)), 'a blob main still uses is kept');
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
    assert.equal((await hearth(['run', '--model', 'Org/Tiny', '--prompt', 'Hi', '-n', '2'], e)).code, 0);
    // rm the model: gone from the disk and the list; the other model untouched
    assert.equal((await hearth(['rm', 'Org/Tiny'], e)).code, 0);
    assert.ok(!fs.existsSync(rd));
    assert.deepEqual(JSON.parse((await hearth(['list', '--json'], e)).out).map((m) => m.repo), ['Org/TinyEmbed']);
    const again = await hearth(['rm', 'Org/Tiny'], e);
    assert.equal(again.code, 1);
    assert.match(again.err, /not in the cache/);
  } finally { await hub.close(); }
});

test('an interrupted pull leaves no snapshot, and the next one resumes with Range', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    const cut = 1 << 20;
    hub.knobs.cut['model.safetensors'] = cut;
    const r1 = await hearth(['pull', 'Org/Tiny'], e);
    assert.equal(r1.code, 1, r1.err);
    assert.match(r1.err, /model\.safetensors/);
    const rd = repoDir(e, 'Org/Tiny'), etag = sha256(chatFiles['model.safetensors']);
    assert.ok(!fs.existsSync(path.join(rd, 'snapshots')) || fs.readdirSync(path.join(rd, 'snapshots')).length === 0, 'no snapshot');
    assert.ok(!fs.existsSync(path.join(rd, 'refs', 'main')), 'no ref');
    assert.equal(fs.statSync(path.join(rd, 'blobs', `${etag}.incomplete`)).size, cut);
    assert.equal((await hearth(['list', '--json'], e)).out.trim(), '[]');
    const r2 = await hearth(['pull', 'Org/Tiny'], e);
    assert.equal(r2.code, 0, r2.err);
    const ranged = hub.cdnRequests.filter((q) => q.headers.range);
    assert.deepEqual(ranged.map((q) => q.headers.range), [`bytes=${cut}-`], 'the second pull asked only for the rest');
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
  } finally { await hub.close(); }
});

test('a pull killed midway leaves no snapshot; the next one resumes from the partial blob', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    hub.knobs.delayMs = 20; // ~3 MB/s: the kill lands inside model.safetensors
    const part = path.join(repoDir(e, 'Org/Tiny'), 'blobs', `${sha256(chatFiles['model.safetensors'])}.incomplete`);
    const c = spawn(BIN, ['pull', 'Org/Tiny'], { env: e, stdio: 'ignore' });
    const exited = new Promise((r) => c.on('exit', r));
    const t0 = Date.now();
    while (!(fs.existsSync(part) && fs.statSync(part).size > 256 * 1024)) {
      assert.ok(Date.now() - t0 < 60000, 'the download did not start');
      await new Promise((r) => setTimeout(r, 20));
    }
    c.kill('SIGKILL');
    await exited;
    const have = fs.statSync(part).size;
    assert.ok(have > 0 && have < chatFiles['model.safetensors'].length);
    assert.deepEqual(Object.keys(tree(path.join(repoDir(e, 'Org/Tiny'), 'snapshots'))), []);
    assert.ok(!fs.existsSync(path.join(repoDir(e, 'Org/Tiny'), 'refs', 'main')));
    hub.knobs.delayMs = 0;
    const r = await hearth(['pull', 'Org/Tiny'], e);
    assert.equal(r.code, 0, r.err);
    assert.deepEqual(hub.cdnRequests.filter((q) => q.headers.range).map((q) => q.headers.range), [`bytes=${have}-`]);
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
  } finally { await hub.close(); }
});

test('a corrupted blob is detected and fetched again; corrupted twice fails and leaves no snapshot', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    hub.knobs.corrupt['model.safetensors'] = 1;
    const r = await hearth(['pull', 'Org/Tiny'], e);
    assert.equal(r.code, 0, r.err);
    assert.equal(hub.cdnRequests.length, 2, 'the blob was fetched twice');
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
    const e2 = env(hub);
    hub.knobs.corrupt['model.safetensors'] = 2;
    const bad = await hearth(['pull', 'Org/Tiny'], e2);
    assert.equal(bad.code, 1, bad.err);
    assert.match(bad.err, /sha256 [0-9a-f]{64} differs/);
    const rd = repoDir(e2, 'Org/Tiny');
    assert.deepEqual(Object.keys(tree(path.join(rd, 'snapshots'))), []);
    assert.ok(!fs.existsSync(path.join(rd, 'blobs', sha256(chatFiles['model.safetensors']))), 'the bad bytes are not kept as the blob');
  } finally { await hub.close(); }
});

test('hostile names: `..` in a repo id, in the file list and in the index are refused', async () => {
  const hostileIndex = Buffer.from(JSON.stringify({ metadata: {}, weight_map: { 'model.embed_tokens.weight': '../../../../etc/passwd' } }));
  const hub = await freshHub({
    'Org/EvilList': { revisions: { main: { commit: commit('evil1'), files: { ...chatFiles, '../../evil.safetensors': Buffer.from('x') } } } },
    'Org/EvilAbs': { revisions: { main: { commit: commit('evil2'), files: { ...chatFiles, '/tmp/config.json': Buffer.from('{}') } } } },
    'Org/EvilIndex': { revisions: { main: { commit: commit('evil3'), files: { ...chatFiles, 'model.safetensors.index.json': hostileIndex } } } },
  });
  try {
    const e = env(hub);
    for (const bad of ['../Tiny', 'Org/..', 'Org/../../x', '/abs/x', 'Org\\Tiny']) {
      const r = await hearth(['pull', bad], e);
      assert.equal(r.code, 1, `${bad}: ${r.err}`);
      assert.match(r.err, /not a repository id/);
    }
    for (const [repo, what] of [['Org/EvilList', /\.\.\/\.\.\/evil\.safetensors/], ['Org/EvilAbs', /\/tmp\/config\.json/]]) {
      const r = await hearth(['pull', repo], e);
      assert.equal(r.code, 1);
      assert.match(r.err, what);
      assert.match(r.err, /refusing/);
      assert.ok(!fs.existsSync(repoDir(e, repo)), `${repo}: nothing written`);
    }
    const r = await hearth(['pull', 'Org/EvilIndex'], e);
    assert.equal(r.code, 1);
    assert.match(r.err, /refusing model\.safetensors\.index\.json.*etc\/passwd/);
    assert.equal(hub.cdnRequests.length, 0, 'no weight fetched after a hostile index');
    assert.deepEqual(Object.keys(tree(path.join(repoDir(e, 'Org/EvilIndex'), 'snapshots'))), []);
    assert.ok(!fs.existsSync(path.join(tmp, 'etc')) && !fs.existsSync(path.join(e.HF_HUB_CACHE, 'evil.safetensors')));
  } finally { await hub.close(); }
});

test('a gated repo: a clear error without the token; with it the pull works and the CDN never sees it', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    const r = await hearth(['pull', 'Org/Gated'], e);
    assert.equal(r.code, 1);
    assert.match(r.err, /401.*gated or private.*HF_TOKEN/);
    assert.ok(!fs.existsSync(repoDir(e, 'Org/Gated')));
    const ok = await hearth(['pull', 'Org/Gated'], { ...e, HF_TOKEN: 'hf_secret_token' });
    assert.equal(ok.code, 0, ok.err);
    const hubAuth = hub.requests.filter((q) => q.headers.authorization === 'Bearer hf_secret_token');
    assert.ok(hubAuth.length >= 2, 'the Hub got the token');
    assert.ok(hub.cdnRequests.length > 0);
    assert.ok(hub.cdnRequests.every((q) => !('authorization' in q.headers)), 'the CDN (another origin) never got it');
    // the token file in $HF_HOME works as well
    const home = path.join(tmp, 'hf-home');
    fs.mkdirSync(home, { recursive: true });
    fs.writeFileSync(path.join(home, 'token'), 'hf_secret_token\n');
    const e2 = env(hub, { HF_HOME: home });
    assert.equal((await hearth(['pull', 'Org/Gated'], e2)).code, 0);
    assert.ok(hub.cdnRequests.every((q) => !('authorization' in q.headers)));
  } finally { await hub.close(); }
});

test('a failed pull leaves the cache as it was', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    assert.equal((await hearth(['pull', 'Org/Tiny'], e)).code, 0);
    const rd = repoDir(e, 'Org/Tiny');
    const before = { snaps: tree(path.join(rd, 'snapshots')), refs: tree(path.join(rd, 'refs')), list: (await hearth(['list', '--json'], e)).out };
    // v2 differs by one file; the Hub fails one of its files: neither snapshot v2 nor refs/v2 appear
    hub.knobs.fail['tokenizer_config.json'] = 500;
    const r = await hearth(['pull', 'Org/Tiny', '--revision', 'v2'], e);
    assert.equal(r.code, 1);
    assert.match(r.err, /tokenizer_config\.json.*HTTP 500/);
    assert.deepEqual(tree(path.join(rd, 'snapshots')), before.snaps);
    assert.deepEqual(tree(path.join(rd, 'refs')), before.refs);
    assert.equal((await hearth(['list', '--json'], e)).out, before.list);
    // a revision that does not exist, and a repo that does not exist: nothing at all is written
    const missing = await hearth(['pull', 'Org/Tiny', '--revision', 'nope'], e);
    assert.match(missing.err, /not found/);
    assert.deepEqual(tree(path.join(rd, 'snapshots')), before.snaps);
    assert.equal((await hearth(['pull', 'Org/Nothing'], e)).code, 1);
    assert.ok(!fs.existsSync(repoDir(e, 'Org/Nothing')));
  } finally { await hub.close(); }
});

test('two pulls of one model at once both succeed and the cache is consistent', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    hub.knobs.delayMs = 2; // the first pull is still downloading when the second starts
    const [a, b] = await Promise.all([hearth(['pull', 'Org/Tiny'], e), hearth(['pull', 'Org/Tiny'], e)]);
    assert.equal(a.code, 0, a.err);
    assert.equal(b.code, 0, b.err);
    checkLayout(e, 'Org/Tiny', 'main', C1, chatFiles);
    assert.equal(hub.cdnRequests.length, 1, 'the second pull found the blob the first one verified');
  } finally { await hub.close(); }
});

test('the C API: progress events add up; a cancelled pull fails with HEARTH_ERR_CANCELLED and leaves no snapshot', async () => {
  const hub = await freshHub();
  try {
    const e = env(hub);
    const r = await hearth(['Org/Tiny', 'progress'], e, '', PULL_API);
    assert.equal(r.code, 0, r.err);
    const lines = r.out.trim().split('\n').map((l) => JSON.parse(l));
    const result = lines.pop();
    assert.equal(result.rc, 0, result.error);
    assert.equal(result.dir, path.join(repoDir(e, 'Org/Tiny'), 'snapshots', C1));
    assert.equal(lines[0].status, 'resolving');
    assert.equal(lines.at(-1).status, 'done');
    const total = wanted(chatFiles).reduce((s, n) => s + chatFiles[n].length, 0);
    assert.equal(lines.at(-1).all_completed, total);
    assert.ok(lines.filter((l) => l.file).every((l) => l.all_total === total && l.completed <= l.total && l.all_completed <= total));
    for (const name of wanted(chatFiles)) {
      const ev = lines.filter((l) => l.file === name);
      assert.ok(ev.length > 0, `${name}: progress events`);
      assert.ok(ev.every((l, i) => l.total === chatFiles[name].length && (i === 0 || l.completed >= ev[i - 1].completed)));
      assert.equal(ev.at(-1).completed, chatFiles[name].length);
    }
    const all = lines.map((l) => l.all_completed);
    assert.ok(all.every((v, i) => i === 0 || v >= all[i - 1]), 'all_completed never goes back');

    const e2 = env(hub);
    const c = await hearth(['Org/Tiny', 'cancel'], e2, '', PULL_API);
    const res = JSON.parse(c.out.trim().split('\n').pop());
    assert.equal(res.rc, -8, 'HEARTH_ERR_CANCELLED');
    assert.match(res.error, /cancelled/);
    assert.deepEqual(Object.keys(tree(path.join(repoDir(e2, 'Org/Tiny'), 'snapshots'))), []);
    assert.ok(!fs.existsSync(path.join(repoDir(e2, 'Org/Tiny'), 'refs', 'main')));
    assert.equal((await hearth(['pull', 'Org/Tiny'], e2)).code, 0);
    checkLayout(e2, 'Org/Tiny', 'main', C1, chatFiles);
  } finally { await hub.close(); }
});
