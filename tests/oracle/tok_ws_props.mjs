// tests/oracle/tok_ws_props.mjs — reference ids for tests/fixtures/tok/ws_props.jsonl: strings around
// U+180E MONGOLIAN VOWEL SEPARATOR (PCRE2 counts it as \s, HF's Oniguruma does not: tok_load.c's
// ws_rewrite) and the Unicode spaces beside it, encoded by HF tokenizers (the npm binding of the same
// Rust crate as tok_oracle.py's Python one; version written into each line).
//   npm install --prefix /tmp/tokref tokenizers@0.23.2
//   NODE_PATH=/tmp/tokref/node_modules node tests/oracle/tok_ws_props.mjs > tests/fixtures/tok/ws_props.jsonl
// Reads the tokenizers from ~/.cache/hearth/tokenizers (scripts/fetch-tokenizers.sh).
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const version = require('tokenizers/package.json').version;
const dir = path.join(process.env.HEARTH_CACHE || path.join(os.homedir(), '.cache', 'hearth'), 'tokenizers');

const texts = [];
for (const c of ['\u180e', '\u00a0', '\u0085', '\u1680', '\u2000', '\u200a', '\u200b', '\u2028', '\u2029',
  '\u202f', '\u205f', '\u3000', '\ufeff', '\u001c', '\u000b', '\u000c'])
  texts.push(`a${c}'s ${c} b`, `${c}${c}${c}x${c}\n${c}`, `x ${c}  y${c}'LL`);
texts.push('\u180e', '\u180e\u180e', '\u180e123', '\u3000\u180e\u2028', '\t\u180e\t', '中\u180e文',
  'a\u200b\u180e b', '\u180e'.repeat(40) + 'z', 'word\u180e\u180e\n\n  \u180eend');

for (const text of texts) {
  const row = { text, version };
  for (const name of ['qwen3', 'gemma3']) {
    const t = Tokenizer.fromFile(path.join(dir, name, 'tokenizer.json'));
    const e = await t.encode(text, null, { addSpecialTokens: false });
    row[name] = Array.from(e.getIds());
  }
  console.log(JSON.stringify(row));
}
