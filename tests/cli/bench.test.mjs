// tests/cli/bench.test.mjs — `hearth bench` runs every row it is asked for on a tiny random Qwen2 model (no
// tokenizer: bench feeds synthetic ids). Its KV cache is sized for the widest --batch run; the tg run's sequence
// must not hold blocks that run needs (at --batch 1 with 80 new tokens it did: "KV cache is full", no row).
// HEARTH_BIN: the hearth executable; HEARTH_BENCH_FIXTURE: a scratch directory for the model.
import { spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.HEARTH_BIN;
const FIX = process.env.HEARTH_BENCH_FIXTURE || path.join(os.tmpdir(), `hearth-bench-${process.pid}`);
const MODEL = path.join(FIX, 'tiny-bench');

if (!BIN || !fs.existsSync(BIN)) { console.error('FAIL: HEARTH_BIN not set'); process.exit(1); }
fs.rmSync(MODEL, { recursive: true, force: true });
fs.mkdirSync(FIX, { recursive: true });
{
  const r = spawnSync(BIN, ['mkmodel', '--config', path.join(here, '..', 'server', 'tiny-chat-config.json'), '--out', MODEL, '--seed', '1'],
    { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
}

function bench(args) {
  const r = spawnSync(BIN, ['bench', '--model', MODEL, '--threads', '2', '-r', '1', ...args], { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (r.error) throw r.error;
  return r;
}

// the rows of the table: name -> median tok/s
function rows(out) {
  const m = new Map();
  for (const l of out.split('\n')) {
    const c = l.split('|').map((s) => s.trim());
    if (c.length >= 5 && c[1] && c[1] !== 'test' && !c[1].startsWith('-')) m.set(c[1], Number(c[2]));
  }
  return m;
}

for (const [batch, spec] of [['1', '0'], ['1', '4'], ['1,3', '4']]) {
  test(`tg, then --batch ${batch} --speculate ${spec}: every row, exit 0`, () => {
    const r = bench(['-p', '8', '-n', '80', '--batch', batch, '--speculate', spec]);
    assert.equal(r.status, 0, r.stderr);
    const t = rows(r.stdout);
    assert.ok(t.get('pp8') > 0 && t.get('tg80') > 0, r.stdout);
    for (const b of batch.split(',')) {
      const name = spec === '0' ? `tg80x${b}` : `tg80x${b} spec${spec}`;
      assert.ok(t.get(name) > 0, `row ${name} missing:\n${r.stdout}\n${r.stderr}`);
    }
    if (spec !== '0') assert.match(r.stdout, /speculation: \d+ verifies, \d+ drafted, \d+ accepted/);
  });
}
