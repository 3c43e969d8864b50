// tests/server/limits.test.mjs — admission limits and stream liveness on a deliberately small server:
// one slot (--parallel 1), one queue place (--queue 1), prompts evaluated one token per engine step
// (--prefill-chunk 1, so a long prompt takes a visible while even on the tiny model), a 100 ms SSE
// keep-alive interval and a bearer token (--api-key). Checks: the token is required (401 with
// WWW-Authenticate; /health stays open); a full queue answers 503 with Retry-After and an OpenAI
// error; a request needing more queue places than exist is a 400 naming n; a stream whose prompt is
// still being evaluated receives ": keep-alive" comments before its first token, and its text is
// unaffected by them. API keys: empty or over-long keys are refused at start, long keys are used whole.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { BIN, CHAT, FIX, postJSON as postRaw, requirePrereqs, sleep, startServer } from './harness.mjs';

requirePrereqs({ openai: false });

const KEY = 'test-key-0123456789';
const AUTH = { authorization: `Bearer ${KEY}` };
const postJSON = (srv, p, body) => postRaw(srv, p, body, AUTH);
const getJSON = async (srv, p) => {
  const r = await fetch(srv.url + p, { headers: AUTH });
  return { status: r.status, body: await r.json() };
};
let srv;
before(async () => {
  srv = await startServer(['--parallel', '1', '--queue', '1', '--prefill-chunk', '1', '--keepalive-ms', '100',
    '--api-key', KEY]);
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
});

const chatStatus = async () => (await getJSON(srv, '/status')).body.models.find((m) => m.id === CHAT);
async function until(cond, what) {
  for (let i = 0; i < 400; i++) {
    if (await cond()) return;
    await sleep(25);
  }
  assert.fail(`timed out waiting for ${what}`);
}
const cmpl = (extra = {}) => ({ model: CHAT, prompt: 'Hello', temperature: 0, max_tokens: 4, ignore_eos: true, ...extra });

test('the bearer token is required; /health is open', async () => {
  for (const h of [{}, { authorization: 'Bearer wrong' }, { authorization: `Bearer ${KEY.replace('0', '1')}` },
    { authorization: `Basic ${KEY}` }, { authorization: `Bearer ${KEY}x` }]) {
    const r = await postRaw(srv, '/v1/completions', cmpl(), h);
    assert.equal(r.status, 401, JSON.stringify(h));
    assert.equal(r.body.error.type, 'authentication_error');
    assert.ok(!r.text.includes(KEY), 'the key is never echoed');
    const m = await fetch(`${srv.url}/v1/models`, { headers: h });
    assert.equal(m.status, 401);
    assert.equal(m.headers.get('www-authenticate'), 'Bearer');
  }
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  assert.equal((await postJSON(srv, '/v1/completions', cmpl())).status, 200);
  assert.equal((await getJSON(srv, '/v1/models')).status, 200);
});

test('a full queue answers 503 with Retry-After; the queued request still completes', async () => {
  // A holds the only slot with a long stream
  const ac = new AbortController();
  const a = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json', ...AUTH },
    body: JSON.stringify(cmpl({ max_tokens: 400, stream: true })),
  });
  const reader = a.body.getReader();
  await reader.read();
  await until(async () => (await chatStatus()).slots_busy === 1, 'the slot to be busy');
  // B waits in the only queue place
  const b = postJSON(srv, '/v1/completions', cmpl());
  await until(async () => (await chatStatus()).queued === 1, 'B to be queued');
  // C finds the queue full
  const c = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...AUTH }, body: JSON.stringify(cmpl()),
  });
  assert.equal(c.status, 503);
  assert.equal(c.headers.get('retry-after'), '1');
  const err = (await c.json()).error;
  assert.equal(err.code, 'server_busy');
  assert.equal(err.type, 'server_overloaded');
  ac.abort();
  const rb = await b;
  assert.equal(rb.status, 200, rb.text);
  assert.equal(rb.body.usage.completion_tokens, 4);
});

test('more choices than queue places is a 400 naming n', async () => {
  const r = await postJSON(srv, '/v1/completions', cmpl({ n: 2 }));
  assert.equal(r.status, 400);
  assert.equal(r.body.error.param, 'n');
});

test('keep-alive comments flow while a long prompt is evaluated, then the tokens', async () => {
  // calibrate: time a 40-token prompt at one token per step, then size the streamed prompt for
  // about 600 ms of prefill (40..500 tokens: about 500 in Release, 40 under ASan)
  let t0 = Date.now();
  const cal = await postJSON(srv, '/v1/completions', cmpl({ prompt: Array.from({ length: 40 }, (_, i) => 5000 + i), max_tokens: 1 }));
  assert.equal(cal.status, 200, cal.text);
  const perToken = (Date.now() - t0) / 40;
  const len = Math.max(40, Math.min(500, Math.ceil(600 / perToken)));
  // the stream goes first: the slot's session must not already hold this prompt (prefix reuse)
  const prompt = Array.from({ length: len }, (_, i) => 1000 + i);
  t0 = Date.now();
  const res = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...AUTH },
    body: JSON.stringify(cmpl({ prompt, stream: true })),
  });
  assert.equal(res.status, 200);
  const raw = await res.text();
  const ms = Date.now() - t0;
  const first = raw.indexOf('data: ');
  const before = raw.slice(0, first).match(/^: keep-alive\n\n/gm) ?? [];
  console.log(`keep-alive: ${before.length} comments before the first token; ${len}-token prompt, stream ${ms} ms`);
  assert.ok(first > 0 && before.length >= 1,
    `expected keep-alive comments before the first token (stream took ${ms} ms): ${raw.slice(0, 200)}`);
  assert.equal(raw.slice(0, first), ': keep-alive\n\n'.repeat(before.length), 'only whole comments before data');
  let text = '';
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    text += JSON.parse(line.slice(6)).choices[0]?.text ?? '';
  }
  const plain = await postJSON(srv, '/v1/completions', cmpl({ prompt }));
  assert.equal(plain.status, 200, plain.text);
  assert.equal(text, plain.body.choices[0].text);
  assert.ok(raw.trimEnd().endsWith('data: [DONE]'));
});

test('API keys: an empty key and one over 4096 characters are refused at start; a long key is used whole', async () => {
  const base = ['serve', '--model', path.join(FIX, CHAT), '--port', '0'];
  const refuse = (args, re) => {
    const r = spawnSync(BIN, [...base, ...args], { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, re);
  };
  refuse(['--api-key', ''], /--api-key must be 1 to 4096 characters/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-key-'));
  try {
    fs.writeFileSync(path.join(dir, 'long'), `${'k'.repeat(5000)}\n`);
    refuse(['--api-key-file', path.join(dir, 'long')], /longer than 4096 characters/);
    fs.writeFileSync(path.join(dir, 'empty'), '\n');
    refuse(['--api-key-file', path.join(dir, 'empty')], /first line is empty/);
    // 600 characters: once cut to 511 without a word; now the whole key is the key
    const key = Array.from({ length: 600 }, (_, i) => 'abcdefghijklmnopqrstuvwxyz0123456789'[(i * 7) % 36]).join('');
    fs.writeFileSync(path.join(dir, 'ok'), `${key}\n`);
    const s = await startServer(['--api-key-file', path.join(dir, 'ok')]);
    try {
      const models = (k) => fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${k}` } }).then((r) => r.status);
      assert.equal(await models(key), 200);
      assert.equal(await models(key.slice(0, 511)), 401);
      assert.equal(await models(`${key}x`), 401);
      assert.equal(await models(''), 401);
    } finally {
      assert.equal((await s.stop()).code, 0);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
