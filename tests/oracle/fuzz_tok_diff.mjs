// tests/oracle/fuzz_tok_diff.mjs — a differential fuzz of hearth's tokenizer against HF tokenizers (the npm binding of
// the Rust crate): random strings of whitespace, contractions, numbers, mixed scripts, emoji, specials, random code
// points and code, encoded by both; prints the first mismatches and a count. A tool, not a test: its finds become
// fixtures (tests/fixtures/tok/*.jsonl) with the fix (session 47: Unicode 15-16 letters, test_tok unicode16).
//   npm install --prefix /tmp/tokref tokenizers@0.23.2
//   NODE_PATH=/tmp/tokref/node_modules node tests/oracle/fuzz_tok_diff.mjs qwen3|gemma3|gemma4 [N [SEED]]
// HEARTH: the hearth binary (default build/hearth); tokenizers from ~/.cache/hearth/tokenizers.
import { createRequire } from 'node:module';
const tk = createRequire(import.meta.url)('tokenizers');
import { execFileSync } from 'child_process';
const { Tokenizer } = tk;
const [,, name, n = '300', seed0 = '1'] = process.argv;
const dir = `${process.env.HEARTH_CACHE || process.env.HOME + '/.cache/hearth'}/tokenizers/${name}`;
const bin = process.env.HEARTH || 'build/hearth';
const t = Tokenizer.fromFile(`${dir}/tokenizer.json`);
let s = Number(seed0) >>> 0;
const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
const pick = a => a[Math.floor(rnd() * a.length)];
const specials = name.startsWith('qwen') ? ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<tool_call>', '<|fim_prefix|>']
  : ['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<|turn>', '<turn|>', '<mask>', '<unused3>'];
const pieces = [
  () => pick([' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '\u2028', '\u200b', '\ufeff', '\u180e', '\u2009']),
  () => pick(["'s", "'S", "'ll", "'re", "'ve", "'m", "'d", "n't", "'", '"', '`']),
  () => String(Math.floor(rnd() * 10 ** Math.floor(rnd() * 12))),
  () => pick(['hello', 'World', 'THE', 'naïve', 'café', 'Straße', 'İstanbul', 'ǅemal', 'ﬁnance', 'Ⅻ', '½', '²', 'x²']),
  () => pick(['中文', '日本語の', '한국어', 'العربية', 'हिन्दी', 'ไทย', 'עברית', 'Ελληνικά', 'русский', 'ქართული']),
  () => pick(['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇩🇪', '❤️', '©', '™', '\u0301', 'e\u0301', '\u0915\u094d\u0937']),
  () => pick(['{', '}', '()', '[]', '::', '->', '=>', '!=', '===', '...', '…', '—', '–', '/*', '*/', '#', '@', '$', '%', '^&*', '\\', '~~']),
  () => pick(specials),
  () => String.fromCodePoint(Math.floor(rnd() * 0x2fff)),
  () => String.fromCodePoint(0x10000 + Math.floor(rnd() * 0x1ffff)),
  () => pick(['a', 'b', 'z', 'A', 'Z', '_', '-']).repeat(1 + Math.floor(rnd() * 40)),
  () => ' '.repeat(1 + Math.floor(rnd() * 20)) + pick(['x', '\n', '1', '']),
  () => pick(['def f(x):\n    return x', 'int main() {\n\treturn 0;\n}', '<div class="a">', 'SELECT * FROM t;', 'https://example.com/a?b=c']),
];
let bad = 0;
for (let i = 0; i < Number(n); i++) {
  let str = '';
  const k = 1 + Math.floor(rnd() * 12);
  for (let j = 0; j < k; j++) str += pick(pieces)();
  const want = (await t.encode(str, null, { addSpecialTokens: false })).getIds();
  let got;
  try {
    got = execFileSync(bin, ['tokenize', '--tokenizer', `${dir}/tokenizer.json`], { input: str }).toString().trim().split(/\s+/).filter(x => x).map(Number);
  } catch (e) { got = ['ERR', e.message.slice(0, 100)]; }
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    bad++;
    if (bad <= 8) console.log('MISMATCH', JSON.stringify(str), '\n  hf   ', JSON.stringify(want), '\n  ours ', JSON.stringify(got));
  }
}
console.log(`${name}: ${bad} of ${n} differ`);
