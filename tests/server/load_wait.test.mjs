// tests/server/load_wait.test.mjs — streams that name a model which is not loaded yet
// (server/stream_load.h): the response starts at once and sends ": keep-alive" comments until the
// model is loaded, then streams as usual; a failed load ends the stream with an error event; a
// client that leaves during the load does not stop it or keep a reference on the model.
//
// The slow model is real, not a test-only delay: a random Qwen2 of 0.27B parameters (hidden 1024,
// 8 layers, 0.5 GiB of bf16) made by `hearth mkmodel` straight into a Hub cache snapshot, which
// takes about 1 s to write and 1.5-2 s to load (quantized to int4) on a 2-core machine.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, CHAT, FIX, requirePrereqs } from './harness.mjs';
import { addRepo, modelsById, repoFolder, serve, tmpCache } from './hubcache.mjs';

requirePrereqs();
const { default: OpenAI, APIError } = await import('openai');

const SLOW = 'test/slow';
const SMALL = 'test/small';
const BROKEN = 'test/broken';
const KEEPALIVE_MS = 100;
const SLOWDOWN = Number(process.env.HEARTH_TEST_SLOWDOWN || 1);
const msgs = [{ role: 'user', content: 'Say something.' }];

// The slow model, written by mkmodel into ROOT/models--test--slow/snapshots/<commit>/ (plain
// files: the resolver reads refs/main and the snapshot folder, it does not need blobs), with the
// tiny chat model's tokenizer and template (the same 151,936-token vocabulary).
function addSlowRepo(root) {
  const cfg = JSON.parse(fs.readFileSync(path.join(FIX, CHAT, 'config.json'), 'utf8'));
  Object.assign(cfg, { hidden_size: 1024, intermediate_size: 4096, num_hidden_layers: 8,
    num_attention_heads: 8, num_key_value_heads: 4 });
  const folder = repoFolder(root, SLOW);
  const commit = '5' .repeat(40);
  const snap = path.join(folder, 'snapshots', commit);
  fs.mkdirSync(path.dirname(snap), { recursive: true });
  fs.mkdirSync(path.join(folder, 'refs'), { recursive: true });
  const cfgFile = path.join(root, 'slow-config.json');
  fs.writeFileSync(cfgFile, JSON.stringify(cfg));
  const r = spawnSync(BIN, ['mkmodel', '--config', cfgFile, '--out', snap, '--seed', '3'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  fs.rmSync(cfgFile);
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'])
    fs.copyFileSync(path.join(FIX, CHAT, f), path.join(snap, f));
  fs.writeFileSync(path.join(folder, 'refs', 'main'), commit);
}

// A raw streamed request (chat, or legacy completions with endpoint 'completions'): every chunk of
// the body with the time it arrived (ms after the request was sent), and the response's headers.
async function rawStream(srv, body, { signal, onChunk, endpoint = 'chat/completions' } = {}) {
  const t0 = Date.now();
  const r = await fetch(`${srv.url}/v1/${endpoint}`, { method: 'POST', signal,
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  const out = { status: r.status, type: r.headers.get('content-type'), headersAt: Date.now() - t0, chunks: [] };
  const dec = new TextDecoder();
  for await (const bytes of r.body) {
    out.chunks.push({ at: Date.now() - t0, text: dec.decode(bytes, { stream: true }) });
    if (onChunk && onChunk(out)) break;
  }
  out.text = out.chunks.map((c) => c.text).join('');
  return out;
}

// The SSE events of a body: comments (": ...") and data lines, in order.
const sseEvents = (text) => text.split('\n\n').filter((e) => e.length).map((e) =>
  (e.startsWith(':') ? { comment: e.slice(1).trim() } : { data: e.replace(/^data: /, '') }));

// Waits until GET /v1/models says id is loaded (or the time runs out).
async function waitLoaded(srv, id, ms) {
  for (const t0 = Date.now(); Date.now() - t0 < ms;) {
    if ((await modelsById(srv))[id]?.loaded) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

let cache, srv, loadMs;
before(async () => {
  cache = tmpCache('load-wait');
  addRepo(cache, SMALL, path.join(FIX, CHAT));
  // a checkpoint whose config names a layer the weights do not have: the load fails
  addRepo(cache, BROKEN, path.join(FIX, CHAT), (name, bytes) => (name !== 'config.json' ? bytes
    : Buffer.from(JSON.stringify({ ...JSON.parse(bytes), num_hidden_layers: 3 }))));
  addSlowRepo(cache);
  srv = await serve(['--model', SMALL, '--max-loaded', '1', '--keepalive-ms', String(KEEPALIVE_MS)],
    { HF_HUB_CACHE: cache });
  assert.ok(srv.url, srv.log);
});
after(async () => {
  if (srv?.url) {
    const r = await srv.stop();
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  }
  fs.rmSync(cache, { recursive: true, force: true });
});

// Makes SMALL the loaded model again (--max-loaded 1: SLOW is unloaded); a plain request waits.
async function loadSmall() {
  const r = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: SMALL, messages: msgs, max_tokens: 1 }),
    signal: AbortSignal.timeout(60000 * SLOWDOWN) });
  assert.equal(r.status, 200, await r.text());
  assert.equal((await modelsById(srv))[SLOW].loaded, false);
}

describe('a stream whose model is not loaded', () => {
  test('starts at once and sends keep-alive comments until the model is loaded, then streams', async () => {
    assert.equal((await modelsById(srv))[SLOW].loaded, false);
    // two streams at once, chat and legacy completions: one loads the model, the other waits for that load
    const [a, b] = await Promise.all([
      rawStream(srv, { model: SLOW, messages: msgs, max_tokens: 3 }),
      rawStream(srv, { model: SLOW, prompt: 'Once upon a time', max_tokens: 3 }, { endpoint: 'completions' })]);
    for (const s of [a, b]) {
      assert.equal(s.status, 200);
      assert.match(s.type, /text\/event-stream/);
      const ev = sseEvents(s.text);
      const firstData = ev.findIndex((e) => e.data !== undefined);
      const before = ev.slice(0, firstData);
      assert.ok(before.length >= 3, `keep-alives before the first data event: ${JSON.stringify(ev.slice(0, 5))}`);
      for (const e of before) assert.equal(e.comment, 'keep-alive');
      // the stream itself is what a loaded model streams: a role chunk, content, a finish, [DONE]
      const data = ev.filter((e) => e.data !== undefined).map((e) => e.data);
      assert.equal(data.at(-1), '[DONE]');
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      if (s === a) assert.equal(chunks[0].choices[0].delta.role, 'assistant');
      else assert.ok(chunks.some((c) => c.choices[0].text.length > 0), JSON.stringify(chunks));
      assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
      for (const c of chunks) assert.equal(c.model, SLOW);
      // comments came at a steady rhythm, long before the first token
      const firstDataAt = s.chunks.find((c) => c.text.includes('data: ')).at;
      assert.ok(s.chunks[0].at < firstDataAt - 2 * KEEPALIVE_MS, JSON.stringify(s.chunks.slice(0, 3)));
    }
    loadMs = a.chunks.find((c) => c.text.includes('data: ')).at;
    assert.equal((await modelsById(srv))[SLOW].loaded, true);
  });

  test('the official client streams from it with a timeout shorter than the load', async () => {
    await loadSmall();
    // the client's timeout covers the wait for the response's headers: half the load measured above
    const timeout = Math.max(200, Math.floor(loadMs / 2));
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout });
    const t0 = Date.now();
    const stream = await client.chat.completions.create({ model: SLOW, messages: msgs, max_tokens: 3, stream: true });
    let text = '', finish = null, n = 0;
    for await (const c of stream) {
      n++;
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    const took = Date.now() - t0;
    assert.ok(n >= 2 && text.length > 0, `chunks ${n}, text ${JSON.stringify(text)}`);
    assert.equal(finish, 'length');
    assert.ok(took > timeout, `the request took ${took} ms, its timeout was ${timeout} ms: nothing was shown`);
  });

  test('what the model refuses after its load ends the stream with an error event', async () => {
    assert.equal((await modelsById(srv))[SMALL].loaded, false);
    const long = [{ role: 'user', content: 'word '.repeat(700) }]; // over --ctx 512
    const raw = await rawStream(srv, { model: SMALL, messages: long, max_tokens: 3 });
    assert.equal(raw.status, 200);
    const data = sseEvents(raw.text).filter((e) => e.data !== undefined).map((e) => e.data);
    assert.deepEqual(data.slice(1), ['[DONE]'], raw.text);
    const err = JSON.parse(data[0]).error;
    assert.equal(err.code, 'context_length_exceeded');
    assert.equal(err.param, 'messages');
    assert.equal(err.type, 'invalid_request_error');
    // once loaded, the same request is refused with a status as before
    const again = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: SMALL, messages: long, max_tokens: 3, stream: true }) });
    assert.equal(again.status, 400);
    assert.equal((await again.json()).error.code, 'context_length_exceeded');
  });

  test('a failed load ends the stream with an error event (an APIError in the official client)', async () => {
    const raw = await rawStream(srv, { model: BROKEN, messages: msgs, max_tokens: 3 });
    assert.equal(raw.status, 200);
    const data = sseEvents(raw.text).filter((e) => e.data !== undefined).map((e) => e.data);
    assert.equal(data.at(-1), '[DONE]');
    assert.equal(data.length, 2, raw.text);
    const err = JSON.parse(data[0]).error;
    assert.equal(err.code, 'model_load_failed');
    assert.equal(err.type, 'server_error');
    assert.match(err.message, /test\/broken/);
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 * SLOWDOWN });
    const stream = await client.chat.completions.create({ model: BROKEN, messages: msgs, max_tokens: 3, stream: true });
    await assert.rejects(async () => { for await (const c of stream) void c; },
      (e) => e instanceof APIError && e.code === 'model_load_failed');
    // the server goes on serving
    const r = await client.chat.completions.create({ model: SMALL, messages: msgs, max_tokens: 1 });
    assert.equal(r.model, SMALL);
  });

  test('an unknown model is still a 404 before any stream starts', async () => {
    const r = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/missing', messages: msgs, stream: true }) });
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.code, 'model_not_found');
  });

  test('a client that leaves during the load: the load finishes and the model is not held', async () => {
    await loadSmall();
    const ac = new AbortController();
    // leave after the first keep-alive
    await assert.rejects(rawStream(srv, { model: SLOW, messages: msgs, max_tokens: 3 },
      { signal: ac.signal, onChunk: (o) => { if (o.chunks.length === 1) ac.abort(); return false; } }),
    (e) => e.name === 'AbortError');
    assert.equal((await modelsById(srv))[SLOW].loaded, false, 'the load was still running');
    assert.ok(await waitLoaded(srv, SLOW, 60000 * SLOWDOWN), 'the load went on to its end');
    // the reference the stream would have held is dropped by the thread that waited for the load
    let held;
    for (const t0 = Date.now(); Date.now() - t0 < 5000 * SLOWDOWN;) {
      const st = await (await fetch(`${srv.url}/status`)).json();
      held = st.models.find((m) => m.id === SLOW)?.requests;
      if (held === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(held, 0, 'requests holding the model');
    // SMALL can only come back (--max-loaded 1) once nothing holds SLOW any more
    await loadSmall();
  });
});
