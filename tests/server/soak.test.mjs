// tests/server/soak.test.mjs — a bounded soak: 2,000 mixed requests (chat plain and streamed,
// completions, embeddings, tokenize, health), 32 in flight at a time, through the openai client.
// Passes with zero failures and resident-memory growth under RSS_BOUND_MIB between the end of a
// 200-request warm-up and the end of the run. HEARTH_SOAK_REQUESTS overrides the count.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { CHAT, EMBED, postJSON, requirePrereqs, rssBytes, startServer } from './harness.mjs';

requirePrereqs();
const { default: OpenAI } = await import('openai');

const TOTAL = Number(process.env.HEARTH_SOAK_REQUESTS || 2000);
const CONCURRENCY = 32;
const WARMUP = 200;
const RSS_BOUND_MIB = 32;

let srv, client;
before(async () => {
  srv = await startServer(['--parallel', '16', '--queue', '64']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
});

async function one(i) {
  const kind = i % 10;
  const content = `soak request ${i % 37}`;
  if (kind < 3) {
    const r = await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content }],
      max_tokens: 3, temperature: 0.7, seed: i, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 3);
  } else if (kind < 5) {
    const s = await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content }],
      max_tokens: 3, temperature: 0, ignore_eos: true, stream: true });
    let finish = null;
    for await (const c of s) finish = c.choices[0]?.finish_reason ?? finish;
    assert.equal(finish, 'length');
  } else if (kind < 6) {
    const r = await client.completions.create({ model: CHAT, prompt: content, max_tokens: 3, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 3);
  } else if (kind < 8) {
    const r = await client.embeddings.create({ model: EMBED, input: [content, 'x'] });
    assert.equal(r.data.length, 2);
  } else if (kind < 9) {
    const r = await postJSON(srv, '/tokenize', { model: CHAT, prompt: content });
    assert.equal(r.status, 200);
  } else {
    const r = await fetch(`${srv.url}/health`);
    assert.equal(r.status, 200);
    await r.text();
  }
}

async function run(from, to) {
  let next = from;
  const failures = [];
  const worker = async () => {
    while (next < to) {
      const i = next++;
      try { await one(i); } catch (e) { failures.push(`#${i}: ${e.message}`); }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return failures;
}

test(`soak: ${TOTAL} requests, ${CONCURRENCY} concurrent, zero failures, RSS growth < ${RSS_BOUND_MIB} MiB`, async () => {
  const t0 = Date.now();
  const warm = await run(0, WARMUP);
  assert.deepEqual(warm, []);
  const rss0 = rssBytes(srv.pid);
  const failures = await run(WARMUP, TOTAL);
  const rss1 = rssBytes(srv.pid);
  const growth = (rss1 - rss0) / (1 << 20);
  console.log(`soak: ${TOTAL} requests in ${((Date.now() - t0) / 1000).toFixed(1)} s; ` +
    `RSS ${(rss0 / (1 << 20)).toFixed(1)} -> ${(rss1 / (1 << 20)).toFixed(1)} MiB (${growth.toFixed(1)} MiB)`);
  assert.deepEqual(failures.slice(0, 10), []);
  assert.ok(growth < RSS_BOUND_MIB, `RSS grew ${growth.toFixed(1)} MiB`);
  // a request that ended on a stop string has replied before the engine frees its slot at the
  // next step: give the engine a moment to settle
  let m;
  for (let k = 0; k < 50; k++) {
    const st = await (await fetch(`${srv.url}/status`)).json();
    m = st.models.find((x) => x.id === CHAT);
    if (m.slots_busy === 0 && m.queued === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(m.slots_busy, 0);
  assert.equal(m.queued, 0);
  assert.equal(m.errors, 0);
});
