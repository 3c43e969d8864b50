// tests/cli/chat.test.mjs — `hearth chat` driven through piped stdin on a tiny random Qwen2 model with
// the real Qwen tokenizer and the real Qwen3 chat template (assembled here, as tests/server does).
// The oracle for every answer is `hearth run` on the same conversation rendered by `hearth template`
// from scratch: a chat turn that reused the previous turn's KV cache must still answer exactly what a
// fresh greedy run on the whole conversation answers.
// HEARTH_BIN: the hearth executable; HEARTH_CHAT_FIXTURE: a scratch directory for the model.
import { spawn, spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.HEARTH_BIN;
const FIX = process.env.HEARTH_CHAT_FIXTURE || path.join(os.tmpdir(), `hearth-chat-${process.pid}`);
const TOK = path.join(process.env.HEARTH_CACHE || path.join(os.homedir(), '.cache', 'hearth'), 'tokenizers', 'qwen3');
const MODEL = path.join(FIX, 'tiny-chat');
const N = '12'; // tokens per answer at most: several turns stay fast and the cap is reached (no EOS luck needed)

function sh(args, input) {
  const r = spawnSync(BIN, args, { input, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return r;
}

// A test that cannot run fails (never a silent pass).
for (const f of ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'])
  if (!fs.existsSync(path.join(TOK, f))) { console.error(`FAIL: missing ${TOK}/${f} (scripts/fetch-tokenizers.sh)`); process.exit(1); }
if (!BIN || !fs.existsSync(BIN)) { console.error('FAIL: HEARTH_BIN not set'); process.exit(1); }
fs.rmSync(MODEL, { recursive: true, force: true });
fs.mkdirSync(FIX, { recursive: true });
{
  const r = sh(['mkmodel', '--config', path.join(here, '..', 'server', 'tiny-chat-config.json'), '--out', MODEL, '--seed', '1']);
  assert.equal(r.status, 0, r.stderr);
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'])
    fs.copyFileSync(path.join(TOK, f), path.join(MODEL, f));
}

// Runs `hearth chat` on the input; returns its status, stdout and the per-turn counts of --verbose.
function chat(input, extra = []) {
  const r = sh(['chat', MODEL, '-n', N, '--verbose', ...extra], input);
  const turns = [...r.stderr.matchAll(/chat: turn (\d+): (\d+) prompt tokens, (\d+) reused, (\d+) computed/g)]
    .map((m) => ({ turn: +m[1], prompt: +m[2], reused: +m[3], computed: +m[4] }));
  return { status: r.status, out: r.stdout, err: r.stderr, turns };
}

// What a fresh greedy `hearth run` answers to the conversation (rendered from scratch).
let serial = 0;
function oracle(messages) {
  const f = path.join(FIX, `messages-${serial++}.json`);
  fs.writeFileSync(f, JSON.stringify(messages));
  const t = sh(['template', '--model', MODEL, '--messages', f]);
  assert.equal(t.status, 0, t.stderr);
  const r = sh(['run', '--model', MODEL, '--prompt', t.stdout, '-n', N]);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(r.stdout.endsWith('\n'));
  return r.stdout.slice(0, -1);
}

const U1 = 'Hello there', U2 = 'What is 2+2?', U3 = 'Tell me about the sea';

test('two turns: the second reuses the first from the KV cache and answers as a fresh run does', () => {
  const one = chat(`${U1}\n`);
  assert.equal(one.status, 0, one.err);
  assert.equal(one.turns.length, 1);
  assert.equal(one.turns[0].reused, 0);
  const a1 = one.out.slice(0, -1);
  assert.equal(a1, oracle([{ role: 'user', content: U1 }]));

  const two = chat(`${U1}\n${U2}\n/exit\n${U3}\n`);
  assert.equal(two.status, 0, two.err);
  assert.equal(two.turns.length, 2, 'the line after /exit is not read as a turn');
  const [t1, t2] = two.turns;
  assert.ok(t2.reused >= t1.prompt, `turn 2 reused ${t2.reused} < turn 1's ${t1.prompt} prompt tokens`);
  assert.equal(t2.computed, t2.prompt - t2.reused);
  assert.ok(t2.computed < t2.prompt - t1.prompt + 1, 'turn 2 computed more than what is new since turn 1');
  assert.ok(two.out.startsWith(`${a1}\n`));
  const a2 = two.out.slice(a1.length + 1, -1);
  assert.equal(a2, oracle([{ role: 'user', content: U1 }, { role: 'assistant', content: a1 }, { role: 'user', content: U2 }]));
});

test('/clear forgets the conversation: the next turn is a fresh first turn', () => {
  const fresh = chat(`${U3}\n`);
  assert.equal(fresh.status, 0, fresh.err);
  const r = chat(`${U1}\n${U2}\n/clear\n${U3}\n`); // ends at EOF (no /exit): also status 0
  assert.equal(r.status, 0, r.err);
  assert.equal(r.turns.length, 3);
  assert.equal(r.turns[2].prompt, fresh.turns[0].prompt, 'the turn after /clear renders without history');
  assert.ok(r.turns[2].reused < r.turns[1].prompt);
  assert.ok(r.out.endsWith(fresh.out), 'the answer after /clear equals a fresh chat\'s');
  assert.match(r.err, /conversation cleared/);
});

test('multi-line input: a """ block and \\ continuations are one message', () => {
  const msg = 'first line\nsecond line';
  const want = oracle([{ role: 'user', content: msg }]);
  const block = chat('"""\nfirst line\nsecond line\n"""\n');
  assert.equal(block.status, 0, block.err);
  assert.equal(block.turns.length, 1);
  assert.equal(block.out, `${want}\n`);
  const cont = chat('first line\\\nsecond line\n');
  assert.equal(cont.out, `${want}\n`);
  const inline = chat('"""first line\nsecond line"""\n');
  assert.equal(inline.out, `${want}\n`);
});

test('--system is the first message and survives /clear', () => {
  const sys = 'You are terse.';
  const want = oracle([{ role: 'system', content: sys }, { role: 'user', content: U1 }]);
  const r = chat(`${U1}\n/clear\n${U1}\n`, ['--system', sys]);
  assert.equal(r.status, 0, r.err);
  assert.equal(r.out, `${want}\n${want}\n`);
});

test('Ctrl-C stops the answer, not the program', async () => {
  const child = spawn(BIN, ['chat', MODEL, '-n', '100000', '--verbose'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '', err = '';
  child.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  const started = new Promise((resolve) => child.stdout.on('data', (d) => { out += d; if (out.length > 64) resolve(); }));
  child.stdin.write(`${U3}\n`);
  await Promise.race([started, exited.then((code) => { throw new Error(`hearth chat exited (${code}) before answering:\n${err}`); })]);
  child.kill('SIGINT');
  await new Promise((r) => setTimeout(r, 200));
  // commands, not a second turn: with -n 100000 a turn could run for minutes on a slow (sanitized) build
  child.stdin.end('/clear\n/exit\n');
  const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
  const code = await exited;
  clearTimeout(timer);
  assert.equal(code, 0, err);
  assert.match(err, /\[interrupted\][^]*chat: turn 1: .*stop: interrupted[^]*conversation cleared/,
    'the answer stopped at Ctrl-C and the chat went on reading commands');
  assert.ok(out.length > 64, 'the partial answer was printed');
});

test('Ctrl-C at the prompt ends the chat (status 130, the shell\'s SIGINT code)', async () => {
  const child = spawn(BIN, ['chat', MODEL, '--verbose'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  const loaded = new Promise((resolve) => child.stderr.on('data', (d) => { err += d; if (/KV pool/.test(err)) resolve(); }));
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  await loaded;
  await new Promise((r) => setTimeout(r, 300)); // at the prompt by now (or still loading: handled the same)
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30000);
  const code = await exited;
  clearTimeout(timer);
  child.stdin.destroy();
  assert.equal(code, 130, err);
});
