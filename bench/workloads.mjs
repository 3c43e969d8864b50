// bench/workloads.mjs — the product workloads of ../shared/docs/benchmarks.md through the HTTP API.
//   node bench/workloads.mjs --url http://127.0.0.1:8080 --model NAME [--embed-model NAME]
//        [--data ../shared/data/workloads/classify.json] [--w w3,w4,w5,w5s,w6] [--concurrency 32] [--n 400]
//        [--labels ' yes,no'] [--w6-records 1000] [--w6-batch 64]
// Any OpenAI-compatible server works (--url): every workload uses the standard API except W5s, hearth's
// label-scoring extension, reported as "not supported" when the reply has no label_scores.
// W3 warm-prefix TTFT: the long record + question 1, then the same record + question 2 (streamed);
//    time from sending the second request to its first content chunk.
// W4 classify-40x4: instruction + 10 descriptions per chat request, 40 output tokens, 4 in flight.
// W5 classify-400: one /v1/completions per description (instruction + "Transaction: " + description
//    + question), 1 output token with logprobs, --concurrency in flight.
// W5s classify-400 as ONE /v1/completions request: the 400 prompts as a prompt array with
//    "labels": [" yes", " no"] (README "Label scoring"): each label's whole-sequence logprob, no generation.
// W6 embed: --w6-records records of ~32 tokens (default 1,000) in requests of --w6-batch inputs (64).
// Prints one table row per workload: wall seconds and items/s. Uses only node's fetch (Node >= 20).
import fs from 'node:fs';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => {
  if (v.startsWith('--')) a.push([v.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
  return a;
}, []));
const url = args.url ?? 'http://127.0.0.1:8080';
const model = args.model;
const data = JSON.parse(fs.readFileSync(args.data ?? new URL('../../shared/data/workloads/classify.json', import.meta.url)));
const which = (args.w ?? (args['embed-model'] ? 'w3,w4,w5,w5s,w6' : 'w3,w4,w5,w5s')).split(',');
const conc = Number(args.concurrency ?? 32);
if (!model) { console.error('--model NAME is required'); process.exit(2); }

async function post(path, body) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r;
}

async function pool(items, n, fn) {
  let next = 0;
  const workers = Array.from({ length: Math.min(n, items.length) }, async () => {
    while (next < items.length) { const i = next++; await fn(items[i], i); }
  });
  await Promise.all(workers);
}

async function ttft(messages) {
  const t0 = performance.now();
  const r = await post('/v1/chat/completions', { model, messages, stream: true, max_tokens: 8, temperature: 0 });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let first = null, buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) { // first SSE event that carries generated text
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (first !== null || !line.startsWith('data: {')) continue;
      const d = JSON.parse(line.slice(6)).choices?.[0]?.delta ?? {};
      if (d.content || d.reasoning_content || d.tool_calls) first = performance.now() - t0;
    }
  }
  return first;
}

const rows = [];
if (which.includes('w3')) {
  const q = data.long_questions;
  await ttft([{ role: 'user', content: data.long_record + q[0] }]);
  const warm = await ttft([{ role: 'user', content: data.long_record + q[1] }]);
  rows.push(['W3 warm-prefix TTFT', `${warm.toFixed(1)} ms`, '']);
}
if (which.includes('w4')) {
  const chunks = [0, 1, 2, 3].map((c) => data.items.slice(c * 10, c * 10 + 10));
  const t0 = performance.now();
  await pool(chunks, 4, async (ch) => {
    const list = ch.map((it, i) => `${i + 1}. ${it.description}`).join('\n');
    await post('/v1/chat/completions', { model, temperature: 0, max_tokens: 40, ignore_eos: true,
      messages: [{ role: 'system', content: data.instruction },
                 { role: 'user', content: `For each transaction answer yes or no, one per line.\n${list}` }] });
  });
  const s = (performance.now() - t0) / 1000;
  rows.push(['W4 classify-40x4', `${s.toFixed(2)} s`, `${(40 / s).toFixed(1)} descriptions/s`]);
}
if (which.includes('w5')) {
  const items = data.items.slice(0, Number(args.n ?? 400));
  const t0 = performance.now();
  await pool(items, conc, async (it) => {
    await post('/v1/completions', { model, max_tokens: 1, temperature: 0, logprobs: 2,
      prompt: `${data.instruction}\nTransaction: ${it.description}${data.question}` });
  });
  const s = (performance.now() - t0) / 1000;
  rows.push([`W5 classify-${items.length} (${conc} in flight)`, `${s.toFixed(2)} s`, `${(items.length / s).toFixed(1)} descriptions/s`]);
}
if (which.includes('w5s')) {
  const items = data.items.slice(0, Number(args.n ?? 400));
  const labels = (args.labels ?? ' yes, no').split(',');
  const t0 = performance.now();
  const r = await (await post('/v1/completions', { model, max_tokens: 0, temperature: 0, labels,
    prompt: items.map((it) => `${data.instruction}\nTransaction: ${it.description}${data.question}`) })).json();
  const s = (performance.now() - t0) / 1000;
  const ok = r.choices?.length === items.length && r.choices.every((c) => Array.isArray(c.label_scores));
  rows.push([`W5s classify-${items.length}, one label-scoring request`, ok ? `${s.toFixed(2)} s` : 'not supported',
    ok ? `${(items.length / s).toFixed(1)} descriptions/s` : '']);
}
if (which.includes('w6')) {
  const emb = args['embed-model'];
  const nrec = Number(args['w6-records'] ?? 1000), per = Number(args['w6-batch'] ?? 64);
  const recs = Array.from({ length: nrec }, (_, i) => `${data.items[i % data.items.length].description} on 2026-${String(1 + (i % 12)).padStart(2, '0')}-${String(1 + (i % 28)).padStart(2, '0')} amount ${(i * 7.31 % 500).toFixed(2)} USD record ${i}`);
  const batches = [];
  for (let i = 0; i < recs.length; i += per) batches.push(recs.slice(i, i + per));
  const t0 = performance.now();
  await pool(batches, 4, async (b) => { await post('/v1/embeddings', { model: emb, input: b }); });
  const s = (performance.now() - t0) / 1000;
  rows.push([`W6 embed-${nrec}`, `${s.toFixed(2)} s`, `${(nrec / s).toFixed(1)} records/s`]);
}
console.log(`server ${url}, model ${model}`);
console.log('| workload | time | rate |\n| --- | --- | --- |');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
