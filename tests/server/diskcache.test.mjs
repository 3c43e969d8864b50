// tests/server/diskcache.test.mjs — the disk prefix cache through the server (issue 31 item 5): with
// --kv-cache-dir a prompt's full KV blocks are saved off the request path (when the engine is idle, and at
// shutdown), and after a restart the same prompt takes them from disk (usage.prompt_tokens_details.cached_tokens)
// with the same answer as when it was computed; a damaged block file is never trusted: the run of blocks
// before it is reused, it and the rest are computed again, and the answer is still the same.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { CHAT, postJSON, requirePrereqs, sleep, startServer } from './harness.mjs';

requirePrereqs({ openai: false });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-kvdir-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const prompt = [];
for (let i = 0, x = 7; i < 200; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; prompt.push(1000 + (x % 90000)); }
const BS = 16;
const FULL = Math.floor((prompt.length - 1) / BS); // blocks before the one that holds the last position

async function ask(srv) {
  const r = await postJSON(srv, '/v1/completions', { model: CHAT, prompt, max_tokens: 4, temperature: 0, logprobs: 3 });
  assert.equal(r.status, 200, r.text);
  return { text: r.body.choices[0].text, lp: r.body.choices[0].logprobs, cached: r.body.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

// the block files of every model's fingerprint folder (the embedding model has one too, and never saves blocks)
function blockFiles() {
  const out = [];
  for (const fp of fs.readdirSync(dir)) {
    const d = path.join(dir, fp);
    for (const f of fs.readdirSync(d)) if (f.endsWith('.kv')) out.push(path.join(d, f));
  }
  return out;
}

let srv = null;
after(async () => { if (srv) await srv.stop(); }); // a failed assertion must not leave a server behind

test('blocks saved while idle are reused after a restart; a damaged one is recomputed', async () => {
  srv = await startServer(['--kv-cache-dir', dir]);
  const first = await ask(srv);
  assert.equal(first.cached, 0);
  // the engine saves the noted blocks once it is idle, before any shutdown
  let files = [];
  for (let t = 0; t < 200 && files.length < FULL; t++) { await sleep(50); files = blockFiles(); }
  assert.ok(files.length >= FULL, `saved while idle: ${files.length} of ${FULL} block files`);
  assert.equal((await srv.stop()).code, 0);

  srv = await startServer(['--kv-cache-dir', dir]);
  const again = await ask(srv);
  assert.equal(again.cached, FULL * BS, 'every full block came from disk');
  assert.deepEqual(again.text, first.text);
  assert.deepEqual(again.lp, first.lp);
  assert.equal((await srv.stop()).code, 0);

  // damage the 6th block's file (the files are named by key, so find it by its tokens: the header is 56 bytes)
  const sixth = blockFiles().find((f) => {
    const b = fs.readFileSync(f);
    return b.readInt32LE(56) === prompt[5 * BS] && b.readInt32LE(60) === prompt[5 * BS + 1];
  });
  assert.ok(sixth, 'the 6th block has a file');
  const b = fs.readFileSync(sixth);
  b[b.length - 7] ^= 0x40;
  fs.writeFileSync(sixth, b);
  srv = await startServer(['--kv-cache-dir', dir]);
  const damaged = await ask(srv);
  assert.equal(damaged.cached, 5 * BS, 'the run before the damaged block is reused, nothing after it');
  assert.deepEqual(damaged.text, first.text);
  assert.deepEqual(damaged.lp, first.lp);
  assert.equal((await srv.stop()).code, 0);
  // it was rewritten from the recomputed block, intact
  srv = await startServer(['--kv-cache-dir', dir]);
  assert.equal((await ask(srv)).cached, FULL * BS);
  assert.equal((await srv.stop()).code, 0);
  srv = null;
});
