// tests/oracle/tok_unicode16.mjs — reference ids for tests/fixtures/tok/unicode16.jsonl: strings around the code
// points whose General Category changed between Unicode 14.0 (Debian 12's PCRE2) and 16.0 (HF tokenizers'
// Oniguruma), i.e. the rows of src/tok/unicode_delta.h (tok_unicode.c widens \p{..} by them), encoded by HF
// tokenizers (the npm binding of the same Rust crate as tok_oracle.py's Python one; version in each line).
//   npm install --prefix /tmp/tokref tokenizers@0.23.2
//   NODE_PATH=/tmp/tokref/node_modules node tests/oracle/tok_unicode16.mjs > tests/fixtures/tok/unicode16.jsonl
// Reads the tokenizers from ~/.cache/hearth/tokenizers (scripts/fetch-tokenizers.sh).
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

const texts = [];
for (const m of header.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+), "(\w\w)", "(\w\w)"\}/g)) {
  const lo = parseInt(m[1], 16), hi = parseInt(m[2], 16);
  for (const c of new Set([lo, Math.floor((lo + hi) / 2), hi])) {
    const x = String.fromCodePoint(c);
    texts.push(`${x}'re ${x}9a${x}`, `a${x}'S ${x}${x}.${x}\n`, ` ${x}1 !${x}x ${x}'ll`);
  }
}
const toks = ['qwen3', 'gemma3'].map((name) => [name, Tokenizer.fromFile(path.join(dir, name, 'tokenizer.json'))]);
for (const text of texts) {
  const row = { text, version };
  for (const [name, t] of toks) row[name] = Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds());
  console.log(JSON.stringify(row));
}
