// tests/server/models.test.mjs — the server's model management (issue 32 item 3) against a Hub cache
// built by hand (HF_HUB_CACHE=tmp): two tiny chat models and one embedding model as repos.
// Covers: loading a cached model a request names, LRU unloading with --max-loaded 1, an in-flight
// stream finishing while the switch waits for it, concurrent requests across a switch, a failed
// load answered to every waiter, the admin endpoints' gate (403 / 401 / 409), the default models
// served from the cache, and --offline refusing to start without them.
// What needs the real hub_cache_list / hub_cache_rm / hub_pull is in models_hub.test.mjs.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { CHAT, EMBED, FIX, requirePrereqs } from './harness.mjs';
import { addRepo, loadedIds, modelsById, serve, tmpCache } from './hubcache.mjs';

requirePrereqs();
const { default: OpenAI } = await import('openai');

const A = 'test/chat-a';
const B = 'test/chat-b';
const E = 'test/embed';
const BROKEN = 'test/broken';

let cache;
before(() => {
  cache = tmpCache('models');
  addRepo(cache, A, path.join(FIX, CHAT));
  addRepo(cache, B, path.join(FIX, CHAT));
  addRepo(cache, E, path.join(FIX, EMBED));
  // a repo whose weights do not match its config: found in the cache, fails to load
  addRepo(cache, BROKEN, path.join(FIX, CHAT), (name, bytes) =>
    name === 'config.json' ? Buffer.from(JSON.stringify({ ...JSON.parse(bytes), hidden_size: 96 })) : bytes);
});
after(() => fs.rmSync(cache, { recursive: true, force: true }));

const env = () => ({ HF_HUB_CACHE: cache });
const msgs = [{ role: 'user', content: 'Say something.' }];
const clientOf = (srv, apiKey = 'unused') =>
  new OpenAI({ baseURL: `${srv.url}/v1`, apiKey, maxRetries: 0, timeout: 120000 });

async function stopped(srv) {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
}

describe('switching models with --max-loaded 1', () => {
  let srv, client;
  before(async () => {
    srv = await serve(['--model', A, '--max-loaded', '1', '--parallel', '4'], env());
    assert.ok(srv.url, srv.log);
    client = clientOf(srv);
  });
  after(async () => stopped(srv));

  test('/v1/models: the loaded model with its flags, in the OpenAI list shape', async () => {
    const page = await client.models.list();
    const a = page.data.find((m) => m.id === A);
    assert.ok(a, JSON.stringify(page.data));
    assert.equal(a.object, 'model');
    assert.equal(a.loaded, true);
    assert.equal(a.kind, 'chat');
    assert.equal(a.context_length, 512);
    assert.deepEqual(await loadedIds(srv), [A]);
    const one = await client.models.retrieve(A);
    assert.equal(one.loaded, true);
  });

  test('a request for a cached model loads it and unloads the least recently used one', async () => {
    const r = await client.chat.completions.create({ model: B, messages: msgs, max_tokens: 3 });
    assert.equal(r.model, B);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.deepEqual(await loadedIds(srv), [B]);
    const m = await modelsById(srv);
    assert.equal(m[B].loaded, true);
    assert.equal(m[A].loaded, false, 'the command line model stays listed, unloaded');
    // and back
    const r2 = await client.chat.completions.create({ model: A, messages: msgs, max_tokens: 3 });
    assert.equal(r2.model, A);
    assert.deepEqual(await loadedIds(srv), [A]);
  });

  test('embedding models have their own limit: loading one leaves the chat model loaded', async () => {
    const e = await client.embeddings.create({ model: E, input: ['a', 'b'] });
    assert.equal(e.data.length, 2);
    assert.deepEqual(await loadedIds(srv), [A, E].sort());
    assert.equal((await modelsById(srv))[E].kind, 'embedding');
    // the wrong kind is still a 400, not a load of something else
    await assert.rejects(client.chat.completions.create({ model: E, messages: msgs, max_tokens: 2 }),
      (x) => x.status === 400 && x.param === 'model');
  });

  test('an in-flight stream of the old model completes while the switch waits for it', async () => {
    const stream = await client.chat.completions.create({
      model: A, messages: msgs, max_tokens: 150, ignore_eos: true, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next(); // A is generating now
    assert.equal(first.done, false);
    let switched = null;
    const sw = client.chat.completions.create({ model: B, messages: msgs, max_tokens: 2 })
      .then((r) => { switched = Date.now(); return r; });
    let usage = null, finish = null, streamEnd;
    for (let c = await it.next(); !c.done; c = await it.next()) {
      if (c.value.usage) usage = c.value.usage;
      if (c.value.choices?.[0]?.finish_reason) finish = c.value.choices[0].finish_reason;
    }
    streamEnd = Date.now();
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 150, 'every token of the old model\'s stream arrived');
    const r = await sw;
    assert.equal(r.model, B);
    assert.ok(switched >= streamEnd - 5, 'the new model answered only after the old stream ended');
    assert.deepEqual((await loadedIds(srv)).filter((id) => id !== E), [B]);
  });

  test('concurrent requests across switches all succeed', async () => {
    const jobs = [];
    for (let i = 0; i < 12; i++) {
      const model = i % 3 === 0 ? A : B;
      jobs.push(client.chat.completions.create({ model, messages: msgs, max_tokens: 4, ignore_eos: true })
        .then((r) => { assert.equal(r.model, model); assert.equal(r.usage.completion_tokens, 4); return model; }));
    }
    const done = await Promise.all(jobs);
    assert.equal(done.length, 12);
    const loaded = (await loadedIds(srv)).filter((id) => id !== E);
    assert.equal(loaded.length, 1, `one chat model resident: ${loaded}`);
    /* a request gives its model back when the server has finished writing the reply, which can be just after the
     * client has read it: poll briefly; a reference that is never given back still fails */
    let st;
    for (let i = 0; i < 40; i++) {
      st = (await (await fetch(`${srv.url}/status`)).json()).models.find((m) => m.id === loaded[0]);
      if (st.requests === 0) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal(st.requests, 0, 'no reference left behind');
  });

  test('a failed load answers every waiter with its error; the server stays up', async () => {
    const tries = await Promise.all([0, 1, 2].map(() =>
      fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: BROKEN, messages: msgs, max_tokens: 2 }) })
        .then(async (r) => ({ status: r.status, body: await r.json() }))));
    for (const t of tries) {
      assert.equal(t.status, 500, JSON.stringify(t.body));
      assert.equal(t.body.error.code, 'model_load_failed');
      assert.match(t.body.error.message, /test\/broken/);
    }
    const ok = await client.chat.completions.create({ model: A, messages: msgs, max_tokens: 2 });
    assert.equal(ok.model, A);
  });

  test('unknown names and paths are 404, never a directory of the machine', async () => {
    for (const name of ['test/none', '../x', '/etc', 'tests/server', '..']) {
      await assert.rejects(client.chat.completions.create({ model: name, messages: msgs, max_tokens: 2 }),
        (x) => x.status === 404 && x.code === 'model_not_found', name);
    }
  });

  test('the admin endpoints are refused without --api-key or --allow-model-admin (403)', async () => {
    const pull = await fetch(`${srv.url}/v1/models/pull`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'test/new' }) });
    assert.equal(pull.status, 403);
    const pe = await pull.json();
    assert.equal(pe.error.type, 'permission_error');
    assert.equal(pe.error.code, 'model_admin_disabled');
    const del = await fetch(`${srv.url}/v1/models/${B}`, { method: 'DELETE' });
    assert.equal(del.status, 403);
    assert.ok(fs.existsSync(path.join(cache, 'models--test--chat-b', 'refs', 'main')), 'nothing deleted');
  });
});

describe('admin endpoints allowed', () => {
  test('--allow-model-admin: DELETE of a loaded model is 409, of a bad name 404', async () => {
    const srv = await serve(['--model', A, '--allow-model-admin'], env());
    try {
      const del = await fetch(`${srv.url}/v1/models/${A}`, { method: 'DELETE' });
      assert.equal(del.status, 409);
      assert.equal((await del.json()).error.code, 'model_in_use');
      assert.ok(fs.existsSync(path.join(cache, 'models--test--chat-a', 'refs', 'main')));
      const bad = await fetch(`${srv.url}/v1/models/not-a-repo`, { method: 'DELETE' });
      assert.equal(bad.status, 404);
      const badPull = await fetch(`${srv.url}/v1/models/pull`, { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: '../etc' }) });
      assert.equal(badPull.status, 400);
      assert.equal((await badPull.json()).error.param, 'model');
    } finally { await stopped(srv); }
  });

  test('--api-key: the key is required, and enough', async () => {
    const srv = await serve(['--model', A, '--api-key', 'sekrit'], env());
    try {
      const no = await fetch(`${srv.url}/v1/models/${A}`, { method: 'DELETE' });
      assert.equal(no.status, 401);
      const yes = await fetch(`${srv.url}/v1/models/${A}`, { method: 'DELETE', headers: { authorization: 'Bearer sekrit' } });
      assert.equal(yes.status, 409, 'past the gate: refused only because it is loaded');
    } finally { await stopped(srv); }
  });
});

describe('the default models', () => {
  test('--offline without them in the cache: a clear error at start, exit status non-zero', async () => {
    const empty = tmpCache('empty');
    try {
      const r = await serve(['--offline'], { HF_HUB_CACHE: empty });
      assert.ok(r.exited, 'the server must not start');
      assert.notEqual(r.exited.code, 0);
      assert.match(r.log, /Qwen\/Qwen2\.5-3B-Instruct/);
      assert.match(r.log, /hearth pull Qwen\/Qwen2\.5-3B-Instruct/);
      assert.match(r.log, /--offline/);
      assert.deepEqual(fs.readdirSync(empty), [], 'nothing downloaded');
    } finally { fs.rmSync(empty, { recursive: true, force: true }); }
  });

  test('no --model: the default chat and embedding models are served from the cache', async () => {
    // stand-ins under the default names (tiny fixtures): what matters is the names
    const dflt = tmpCache('defaults');
    addRepo(dflt, 'Qwen/Qwen2.5-3B-Instruct', path.join(FIX, CHAT));
    addRepo(dflt, 'Qwen/Qwen3-Embedding-0.6B', path.join(FIX, EMBED));
    const srv = await serve(['--offline'], { HF_HUB_CACHE: dflt });
    try {
      assert.ok(srv.url, srv.log);
      assert.deepEqual(await loadedIds(srv), ['Qwen/Qwen2.5-3B-Instruct', 'Qwen/Qwen3-Embedding-0.6B']);
      const client = clientOf(srv);
      const r = await client.chat.completions.create({ model: 'Qwen/Qwen2.5-3B-Instruct', messages: msgs, max_tokens: 2 });
      assert.equal(r.choices.length, 1);
      const e = await client.embeddings.create({ model: 'Qwen/Qwen3-Embedding-0.6B', input: 'x' });
      assert.equal(e.data.length, 1);
      const m = await modelsById(srv);
      assert.equal(m['Qwen/Qwen3-Embedding-0.6B'].kind, 'embedding');
    } finally {
      await stopped(srv);
      fs.rmSync(dflt, { recursive: true, force: true });
    }
  });
});
