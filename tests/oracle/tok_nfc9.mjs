// tests/oracle/tok_nfc9.mjs — reference ids for tests/fixtures/tok/nfc9.jsonl: strings that put code points assigned
// after Unicode 9.0 (src/tok/unicode_delta.h's g_unicode_new9, the first and last of each range) between marks that
// NFC reorders and composes, plus the canonical pairs of later scripts (Dives Akuru U+11935 U+11930), encoded by HF
// tokenizers (npm binding; version in each line). HF's normalizer has Unicode 9.0 tables and leaves these code
// points alone, where utf8proc 2.8 reorders or composes them (tok_unicode.c, tok_norm_map).
//   npm install --prefix /tmp/tokref tokenizers@0.23.2
//   NODE_PATH=/tmp/tokref/node_modules node tests/oracle/tok_nfc9.mjs > tests/fixtures/tok/nfc9.jsonl
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const version = require('tokenizers/package.json').version;
const dir = path.join(process.env.HEARTH_CACHE || path.join(os.homedir(), '.cache', 'hearth'), 'tokenizers');
const here = path.dirname(fileURLToPath(import.meta.url));
const header = fs.readFileSync(path.join(here, '..', '..', 'src', 'tok', 'unicode_delta.h'), 'utf8');
const table = header.slice(header.indexOf('g_unicode_new9'));

const texts = [];
for (const m of table.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+)\}/g)) {
  for (const c of new Set([parseInt(m[1], 16), parseInt(m[2], 16)])) {
    const x = String.fromCodePoint(c);
    texts.push(`a${x}\u0301e\u0301${x}\u0300 o\u0308${x}\u0323`);
  }
}
texts.push('\u{11935}\u{11930}', 'x\u{11935}\u{11930}\u0301', '\u1dfa\u0301a\u1dfa\u0301\u0316', 'e\u{1e4ec}\u0301');
const toks = ['qwen3', 'gemma3'].map((name) => [name, Tokenizer.fromFile(path.join(dir, name, 'tokenizer.json'))]);
for (const text of texts) {
  const row = { text, version };
  for (const [name, t] of toks) row[name] = Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds());
  console.log(JSON.stringify(row));
}
