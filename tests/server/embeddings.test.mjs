// Embeddings at scale (issue 31 item 4), through HTTP against `hearth serve` with the tiny embedding
// fixture: a 2,048-input request succeeds in input order; every input's vector is the same bits
// (base64) alone, inside the 2,048-input request, and inside concurrent requests that share forward
// passes (/status counts the rounds they shared); a small request is not held behind a large one;
// 2,049 inputs are a 400 naming the limit; a body over --max-body is a 413.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { EMBED, getJSON, postJSON, requirePrereqs, startServer } from './harness.mjs';

requirePrereqs({ openai: false });

const N = 2048;
const SLOW = Number(process.env.HEARTH_TEST_SLOWDOWN || 1); // 10 on a sanitized build (CMakeLists.txt)
let srv;
before(async () => { srv = await startServer(); }); // --max-body: the default 8 MiB
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `exit ${r.code} ${r.sig}`);
});

// Deterministic inputs of 1..~120 tokens: words from a small list, lengths scrambled.
const WORDS = ['record', 'field', 'search', 'embed', 'vector', 'apple', 'river', 'quiet', 'number', 'seven',
  'Zürich', 'naïve', '東京', 'data', 'x', 'the', 'of', 'question', 'answer', 'model'];
const inputs = Array.from({ length: N }, (_, i) => {
  const n = 1 + ((i * 2654435761) >>> 0) % 97;
  return Array.from({ length: n }, (_, k) => WORDS[(i * 7 + k * 13 + k * k) % WORDS.length]).join(' ');
});

const embed = async (input) => {
  const r = await postJSON(srv, '/v1/embeddings', { model: EMBED, input, encoding_format: 'base64' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.data.length, input.length);
  r.body.data.forEach((d, k) => assert.equal(d.index, k));
  return r.body.data.map((d) => d.embedding);
};
const status = async () => (await getJSON(srv, '/status')).body.models.find((m) => m.id === EMBED);

let all; // the 2,048-input request's vectors (base64)

test('2,048 inputs in one request: all answered, in input order, as unit vectors', async () => {
  const st0 = await status();
  all = await embed(inputs);
  const st = await status();
  assert.equal(new Set(all).size, new Set(inputs).size, 'distinct inputs give distinct vectors');
  for (const b of all.slice(0, 50)) {
    const buf = Buffer.from(b, 'base64');
    const v = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    assert.equal(v.length, 64);
    assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-4);
  }
  // packed: far fewer forward passes than inputs (each pass holds up to 512 tokens)
  const passes = st.embed_passes - st0.embed_passes;
  assert.ok(passes > 0 && passes < N / 4, `${passes} forward passes for ${N} inputs`);
});

test('each input alone gives the bits it got among 2,048', async () => {
  for (let i = 0; i < N; i += 41) {
    const [one] = await embed([inputs[i]]);
    assert.equal(one, all[i], `input ${i} differs alone`);
  }
});

test('concurrent requests share forward passes and still give the same bits', async () => {
  const st0 = await status();
  // 8 requests at once, each 256 inputs in its own order
  const parts = Array.from({ length: 8 }, (_, r) => Array.from({ length: 256 }, (_, k) => (k * 8 + r * 5 + 3) % N));
  const got = await Promise.all(parts.map((idx) => embed(idx.map((i) => inputs[i]))));
  const st = await status();
  parts.forEach((idx, r) => idx.forEach((i, k) => assert.equal(got[r][k], all[i], `request ${r} input ${i} differs`)));
  assert.ok(st.embed_shared_rounds > st0.embed_shared_rounds, 'no round was shared by concurrent requests');
});

test('a small request beside a 2,048-input one is answered within a few rounds (requests take turns)', async () => {
  const r0 = (await status()).embed_rounds;
  // 2,048 inputs of 100 token ids: ~25 rounds of 8,192 tokens (40 ids, ~10 rounds, on a sanitized build)
  const L = SLOW > 1 ? 40 : 100;
  const heavy = Array.from({ length: N }, (_, i) => Array.from({ length: L }, (_, k) => 100 + ((i * 31 + k * 7) % 50000)));
  let bigDone = null;
  const big = embed(heavy).then(async (v) => { bigDone = (await status()).embed_rounds; return v; });
  // the big request is computing before the small one is sent
  while ((await status()).embed_rounds === r0) await new Promise((r) => setTimeout(r, 2));
  const sent = (await status()).embed_rounds;
  // ~250 tokens: longer than any gap the big request's inputs leave in a round, so it gets in
  // only by its turn, not by filling a gap
  const long = `record ${'padding '.repeat(240)}`;
  const s = await embed([long]);
  const smallDone = (await status()).embed_rounds;
  const b = await big;
  assert.ok(smallDone - sent <= 3, `the small request took ${smallDone - sent} rounds (the big one ${bigDone - r0})`);
  assert.ok(bigDone - r0 >= (SLOW > 1 ? 8 : 20), `the big request took only ${bigDone - r0} rounds: the check above proves nothing`);
  assert.deepEqual(s, await embed([long]));
  assert.deepEqual(await embed([heavy[N - 1]]), [b[N - 1]]);
});

test('2,049 inputs: 400 naming the limit', async () => {
  const r = await postJSON(srv, '/v1/embeddings', { model: EMBED, input: [...inputs, 'one more'] });
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.error.message, /2049 items; at most 2048/);
  assert.equal(r.body.error.param, 'input');
});

test('a body over --max-body: 413', async () => {
  const big = Array.from({ length: N }, (_, i) => `${inputs[i]} ${'padding '.repeat(520)}`); // ~9 MB > 8 MiB
  const r = await postJSON(srv, '/v1/embeddings', { model: EMBED, input: big });
  assert.equal(r.status, 413, r.text);
});
