// tests/server/limits.test.mjs — admission limits and stream liveness on a deliberately small server:
// one slot (--parallel 1), one queue place (--queue 1), prompts evaluated one token per engine step
// (--prefill-chunk 1, so a 500-token prompt takes a visible while even on the tiny model) and a
// 100 ms SSE keep-alive interval. Checks: a full queue answers 503 with Retry-After and an OpenAI
// error; a request needing more queue places than exist is a 400 naming n; a stream whose prompt is
// still being evaluated receives ": keep-alive" comments before its first token, and its text is
// unaffected by them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { CHAT, getJSON, postJSON, requirePrereqs, sleep, startServer } from './harness.mjs';

requirePrereqs({ openai: false });

let srv;
before(async () => {
  srv = await startServer(['--parallel', '1', '--queue', '1', '--prefill-chunk', '1', '--keepalive-ms', '100']);
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

test('a full queue answers 503 with Retry-After; the queued request still completes', async () => {
  // A holds the only slot with a long stream
  const ac = new AbortController();
  const a = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
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
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(cmpl()),
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
  // the stream goes first: the slot's session must not already hold this prompt (prefix reuse)
  const prompt = Array.from({ length: 500 }, (_, i) => 1000 + i);
  const t0 = Date.now();
  const res = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(cmpl({ prompt, stream: true })),
  });
  assert.equal(res.status, 200);
  const raw = await res.text();
  const ms = Date.now() - t0;
  const first = raw.indexOf('data: ');
  const before = raw.slice(0, first).match(/^: keep-alive\n\n/gm) ?? [];
  console.log(`keep-alive: ${before.length} comments before the first token; stream ${ms} ms`);
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
