// tests/server/hostile.test.mjs — a raw-socket table of hostile and malformed requests. Each row
// is sent on its own connection and must get its documented status (or, where noted, a closed
// connection without a response); afterwards the server must still answer /health and shut down
// cleanly. This table is the documentation of those statuses (README, "Errors and limits").
import assert from 'node:assert/strict';
import net from 'node:net';
import os from 'node:os';
import { after, before, test } from 'node:test';

import {
  CHAT, EMBED, FIX, getJSON, modelWithTemplate, postJSON, removeModelDir, requirePrereqs, rssBytes, sleep, startServer,
} from './harness.mjs';

requirePrereqs({ openai: false });

const MAX_BODY = 65536;
let srv;
before(async () => {
  srv = await startServer(['--timeout', '2', '--max-body', String(MAX_BODY), '--max-conns', '200']);
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
});

// Sends pieces (strings/Buffers, or numbers = pauses in ms) and collects the reply until the server
// closes or waitMs passes. Returns the statuses seen and whether the server closed.
function raw(pieces, { waitMs = 6000, halfClose = false } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(srv.port, '127.0.0.1');
    const bufs = [];
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const text = Buffer.concat(bufs).toString('latin1');
      const statuses = [...text.matchAll(/HTTP\/1\.[01] (\d{3}) [A-Z]/g)].map((m) => Number(m[1]));
      resolve({ statuses, closed, text });
    };
    const timer = setTimeout(() => finish(false), waitMs);
    s.on('data', (d) => bufs.push(d));
    s.on('close', () => finish(true));
    s.on('error', () => finish(true));
    s.on('connect', async () => {
      for (const p of [].concat(pieces)) {
        if (typeof p === 'number') await sleep(p);
        else if (!s.destroyed) s.write(p);
      }
      if (halfClose && !s.destroyed) s.end();
    });
  });
}

const H = () => `127.0.0.1:${srv.port}`;
function req(method, path, { body, headers = {}, version = '1.1', host = true, ct = 'application/json' } = {}) {
  const h = { ...(host ? { Host: H() } : {}), Connection: 'close', ...headers };
  if (body !== undefined) {
    if (ct) h['Content-Type'] = ct;
    h['Content-Length'] = Buffer.byteLength(body);
  }
  let head = `${method} ${path} HTTP/${version}\r\n`;
  for (const [k, v] of Object.entries(h)) if (v !== null) head += `${k}: ${v}\r\n`;
  const b = Buffer.concat([Buffer.from(head + '\r\n', 'latin1'), Buffer.isBuffer(body) ? body : Buffer.from(body ?? '')]);
  return b;
}
const chat = (o) => JSON.stringify({ model: CHAT, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...o });
const post = (path, body, opt = {}) => req('POST', path, { body, ...opt });
const C = '/v1/chat/completions';

// [name, pieces (or a function returning them), expected status | 'close', options]
const TABLE = [
  ['bad JSON', () => post(C, '{"model":'), 400],
  ['JSON array body', () => post(C, '[]'), 400],
  ['JSON string body', () => post(C, '"hello"'), 400],
  ['empty body', () => post(C, ''), 400],
  ['NaN literal', () => post(C, '{"model":"tiny-chat","max_tokens":NaN}'), 400],
  ['duplicate keys', () => post(C, '{"model":"tiny-chat","model":"x","messages":[]}'), 400],
  ['deeply nested JSON', () => post(C, '['.repeat(5000) + ']'.repeat(5000)), 400],
  ['JSON nested 65 levels (cap 64)', () => post('/tokenize', `{"model":"${CHAT}","prompt":"hi","x":${'['.repeat(64)}${']'.repeat(64)}}`), 400],
  ['JSON nested 64 levels', () => post('/tokenize', `{"model":"${CHAT}","prompt":"hi","x":${'['.repeat(63)}${']'.repeat(63)}}`), 200],
  ['brackets inside strings do not count', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: '[{'.repeat(500) + '\\"' })), 200],
  ['invalid UTF-8 in a string', () => post(C, Buffer.concat([Buffer.from('{"model":"tiny-chat","messages":[{"role":"user","content":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')])), 400],
  ['model missing', () => post(C, JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })), 400],
  ['model is a number', () => post(C, chat({ model: 7 })), 400],
  ['unknown model', () => post(C, chat({ model: 'gpt-17' })), 404],
  ['embedding model for chat', () => post(C, chat({ model: EMBED })), 400],
  ['messages not an array', () => post(C, chat({ messages: 'hi' })), 400],
  ['messages empty', () => post(C, chat({ messages: [] })), 400],
  ['message without role', () => post(C, chat({ messages: [{ content: 'hi' }] })), 400],
  ['message with unknown role', () => post(C, chat({ messages: [{ role: 'wizard', content: 'hi' }] })), 400],
  ['content is a number', () => post(C, chat({ messages: [{ role: 'user', content: 5 }] })), 400],
  ['image content part', () => post(C, chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })), 400],
  ['max_tokens is a string', () => post(C, chat({ max_tokens: '5' })), 400],
  ['max_tokens negative', () => post(C, chat({ max_tokens: -1 })), 400],
  ['max_tokens 1e300', () => post(C, chat({ max_tokens: 1e300 })), 400],
  ['max_tokens beyond int64', () => post(C, chat().replace('"max_tokens":2', '"max_tokens":99999999999999999999999')), 400],
  ['temperature too high', () => post(C, chat({ temperature: 5 })), 400],
  ['temperature a string', () => post(C, chat({ temperature: 'hot' })), 400],
  ['top_p zero', () => post(C, chat({ top_p: 0 })), 400],
  ['n = 17 (above 16)', () => post(C, chat({ n: 17 })), 400, { param: 'n' }],
  ['n = 0', () => post(C, chat({ n: 0 })), 400, { param: 'n' }],
  ['n = 1.5', () => post(C, chat({ n: 1.5 })), 400, { param: 'n' }],
  ['n = 2', () => post(C, chat({ n: 2 })), 200],
  ['five stop strings', () => post(C, chat({ stop: ['a', 'b', 'c', 'd', 'e'] })), 400],
  ['stop is a number', () => post(C, chat({ stop: 3 })), 400],
  ['logit_bias key not a number', () => post(C, chat({ logit_bias: { abc: 1 } })), 400],
  ['logit_bias id outside the vocabulary', () => post(C, chat({ logit_bias: { 99999999: 1 } })), 400],
  ['top_logprobs without logprobs', () => post(C, chat({ top_logprobs: 3 })), 400],
  ['tools malformed', () => post(C, chat({ tools: [{ type: 'function' }] })), 400],
  ['response_format json_schema without a schema', () => post(C, chat({ response_format: { type: 'json_schema' } })), 400, { param: 'response_format.json_schema' }],
  ['response_format json_schema, an unsupported keyword', () => post(C, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { oneOf: [] } } } } } })), 400, { param: 'response_format.json_schema' }],
  ['response_format json_schema, an enum of 65 values', () => post(C, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { enum: [...Array(65).keys()] } } } } } })), 400, { param: 'response_format.json_schema' }],
  ['response_format type unknown', () => post(C, chat({ response_format: { type: 'xml' } })), 400, { param: 'response_format' }],
  ['response_format not an object', () => post(C, chat({ response_format: 'json_object' })), 400, { param: 'response_format' }],
  ['response_format json_object, no JSON in messages', () => post(C, chat({ response_format: { type: 'json_object' } })), 400, { param: 'messages' }],
  ['response_format json_object, JSON in a message', () => post(C, chat({ response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'answer in Json' }] })), 200],
  ['response_format text', () => post(C, chat({ response_format: { type: 'text' } })), 200],
  ['prompt longer than the context', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: Array(600).fill(9707) })), 400, { param: 'prompt' }],
  ['chat longer than the context', () => post(C, chat({ messages: [{ role: 'user', content: 'hello '.repeat(600) }] })), 400, { param: 'messages' }],
  ['completion prompt token out of range', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: [1, 2, 999999] })), 400],
  ['completion prompt missing', () => post('/v1/completions', JSON.stringify({ model: CHAT })), 400],
  ['completion echo', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', echo: true, max_tokens: 1 })), 200],
  ['completion max_tokens 0 without echo', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', max_tokens: 0 })), 400, { param: 'max_tokens' }],
  ['completion echo, max_tokens -1', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', echo: true, max_tokens: -1 })), 400, { param: 'max_tokens' }],
  ['completion echo not a boolean', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', echo: 'yes' })), 400, { param: 'echo' }],
  ['completion best_of 2', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', best_of: 2 })), 400, { param: 'best_of' }],
  ['completion 65 prompts', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: Array(65).fill('x') })), 400, { param: 'prompt' }],
  ['completion 5 prompts x n 16 (80 choices)', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: Array(5).fill('x'), n: 16 })), 400, { param: 'n' }],
  ['completion prompts: one empty array', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: [[1, 2], []] })), 400, { param: 'prompt' }],
  ['completion prompts: a number among strings', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: ['a', 5] })), 400, { param: 'prompt' }],
  ['completion prompts: second one too long', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: [[1, 2], Array(600).fill(9707)] })), 400, { param: 'prompt' }],
  ['completion two prompts', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: ['a', [1, 2]], max_tokens: 1 })), 200],
  ['embeddings dimensions 0', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: 'x', dimensions: 0 })), 400],
  ['embeddings encoding hex', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: 'x', encoding_format: 'hex' })), 400],
  ['embeddings input object', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: {} })), 400],
  ['embeddings with the chat model', () => post('/v1/embeddings', JSON.stringify({ model: CHAT, input: 'x' })), 400],
  ['detokenize out of range', () => post('/detokenize', JSON.stringify({ model: CHAT, tokens: [-1] })), 400],
  ['missing Content-Type', () => post(C, chat(), { ct: null }), 415],
  ['text/plain Content-Type', () => post(C, chat(), { ct: 'text/plain' }), 415],
  ['form Content-Type', () => post(C, chat(), { ct: 'application/x-www-form-urlencoded' }), 415],
  ['charset parameter accepted', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: 'hi' }), { ct: 'application/json; charset=utf-8' }), 200],
  ['Content-Length above the cap', () => req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': '10000000' } }), 413],
  ['chunked body above the cap', () => {
    const chunk = 'x'.repeat(16384);
    let s = `POST ${C} HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`;
    for (let i = 0; i < 6; i++) s += `${chunk.length.toString(16)}\r\n${chunk}\r\n`;
    return s + '0\r\n\r\n';
  }, 413],
  ['body just above the cap', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: 'y'.repeat(MAX_BODY) })), 413],
  ['truncated body, then close', () => [req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': '100' } }), '{"model":'], 'close', { halfClose: true }],
  ['truncated body, then silence (timeout)', () => [req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': '100' } }), '{"model":'], 'close'],
  ['wrong Host', () => req('GET', '/health', { headers: { Host: 'evil.example.com' } }), 403],
  ['wrong Host with loopback port', () => req('GET', '/health', { headers: { Host: `attacker.test:${srv.port}` } }), 403],
  ['Host localhost', () => req('GET', '/health', { headers: { Host: `localhost:${srv.port}` } }), 200],
  ['Host loopback, another port', () => req('GET', '/health', { headers: { Host: `127.0.0.1:${srv.port === 1 ? 2 : srv.port - 1}` } }), 403],
  ['Host localhost without a port (means 80)', () => req('GET', '/health', { headers: { Host: 'localhost' } }), 403],
  ['Host port with an extra digit', () => req('GET', '/health', { headers: { Host: `127.0.0.1:${srv.port}0` } }), 403],
  ['Host [::1]', () => req('GET', '/health', { headers: { Host: `[::1]:${srv.port}` } }), 200],
  ['HTTP/1.1 without Host', () => req('GET', '/health', { host: false }), 400],
  ['HTTP/1.0 without Host', () => req('GET', '/health', { host: false, version: '1.0' }), 200],
  ['HTTP/1.0 chat', () => post(C, chat(), { version: '1.0' }), 200],
  ['unknown route', () => req('GET', '/v2/everything'), 404],
  ['unknown route, POST', () => post('/v1/assistants', '{}'), 404],
  ['GET on a POST route', () => req('GET', C), 405],
  ['DELETE a model', () => req('DELETE', `/v1/models/${CHAT}`), 405],
  ['PUT /health', () => req('PUT', '/health', { body: '{}' }), 405],
  ['OPTIONS preflight', () => req('OPTIONS', C), 405],
  ['invalid UTF-8 in the path', () => Buffer.concat([Buffer.from('GET /v1/\xff\xfe HTTP/1.1\r\n', 'latin1'), Buffer.from(`Host: ${H()}\r\nConnection: close\r\n\r\n`)]), 404],
  ['garbage request line', () => 'GARBAGE\r\n\r\n', 'close'],
  ['HTTP/2.0 in the request line', () => req('GET', '/health', { version: '2.0' }), 505],
  ['bad Content-Length', () => `POST ${C} HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}`, 400],
  ['header flood (3000 headers)', () => {
    let s = `GET /health HTTP/1.1\r\nHost: ${H()}\r\n`;
    for (let i = 0; i < 3000; i++) s += `X-Flood-${i}: ${'a'.repeat(20)}\r\n`;
    return s + '\r\n';
  }, 431],
  ['one 100 KB header', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\nX-Big: ${'b'.repeat(100000)}\r\n\r\n`, 431],
  ['100 KB URL', () => `GET /${'u'.repeat(100000)} HTTP/1.1\r\nHost: ${H()}\r\n\r\n`, 414],
  ['pipelined GETs', () => req('GET', '/health', { headers: { Connection: 'keep-alive' } }).toString() + req('GET', '/v1/models').toString(), [200, 200]],
  ['pipelined POST then GET', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: 'a b c' }), { headers: { Connection: 'keep-alive' } }).toString('latin1') + req('GET', '/health').toString(), [200, 200]],
  ['slowloris: partial headers, then silence', () => [`GET /health HTTP/1.1\r\nHost: ${H()}\r\n`, 'X-Slow: 1\r\n'], 'close'],
  ['slowloris: a byte every 300 ms (completes)', () => [...`GET /health HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\n\r\n`.slice(0, 12)].flatMap((c) => [c, 300]).concat([`${`GET /health HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\n\r\n`.slice(12)}`]), 200, { waitMs: 9000 }],
];

test(`hostile table has >= 40 rows (${TABLE.length})`, () => assert.ok(TABLE.length >= 40));

const replies = []; // every reply's text, checked for file paths at the end
for (const [name, make, want, opt = {}] of TABLE) {
  test(`${name} -> ${Array.isArray(want) ? want.join(',') : want}`, async () => {
    const r = await raw(make(), opt);
    replies.push(r.text);
    if (want === 'close') {
      assert.equal(r.statuses.length, 0, `unexpected response: ${r.text.slice(0, 200)}`);
      assert.ok(r.closed, 'the server should have closed the connection');
    } else if (Array.isArray(want)) {
      assert.deepEqual(r.statuses, want, r.text.slice(0, 300));
    } else {
      assert.equal(r.statuses[0], want, r.text.slice(0, 300));
      if (want >= 400 && want !== 431 && want !== 414 && want !== 505 && !(want === 400 && /GARBAGE|Content-Length: abc|Host/.test(name))) {
        const body = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
        if (body.trim().startsWith('{')) assert.ok(JSON.parse(body).error.message, 'OpenAI error object');
      }
      if (opt.param) {
        const body = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
        assert.equal(JSON.parse(body).error.param, opt.param, body);
      }
    }
  });
}

test('100 idle half-open connections do not starve /health', async () => {
  const socks = [];
  for (let i = 0; i < 100; i++) {
    const s = net.connect(srv.port, '127.0.0.1');
    s.on('error', () => {});
    s.write(`GET /health HTTP/1.1\r\nHost: ${H()}\r\n`);
    socks.push(s);
  }
  await sleep(200);
  const h = await getJSON(srv, '/health');
  assert.equal(h.status, 200);
  for (const s of socks) s.destroy();
});

test('no reply reveals a file path', () => {
  assert.ok(replies.length > 40);
  for (const t of replies) {
    assert.ok(!t.includes(FIX), `a reply names the fixture directory: ${t.slice(0, 300)}`);
    assert.ok(!t.includes(os.homedir() + '/'), `a reply names the home directory: ${t.slice(0, 300)}`);
  }
});

test('still healthy after the table', async () => {
  const h = await getJSON(srv, '/health');
  assert.equal(h.status, 200);
  assert.deepEqual(h.body, { status: 'ok' });
  const st = await getJSON(srv, '/status');
  assert.equal(st.body.models.find((m) => m.id === CHAT).slots_busy, 0);
});

// ---- hostile chat templates -----------------------------------------------------------------------
// The template comes from the model directory and runs on a connection thread for every chat
// request: each of these once crashed the server (SIGSEGV) or would stall it. Each model here is
// tiny-chat with one hostile chat_template.jinja; every chat must get 400 template_error, /health
// must answer 200 after each, and the server must stay within a memory bound and exit cleanly.
const NS = '{% set ns = namespace(a=1) %}';
const HOSTILE_TEMPLATES = [ // six: with the two fixtures, the server's limit of 8 models
  ['tmpl-ns-self', 'a namespace holding itself, printed', `${NS}{% set ns.a = ns %}{{ ns }}`],
  ['tmpl-ns-list', 'a list holding its namespace, printed', `${NS}{% set ns.a = [ns] %}{{ ns.a }}`],
  ['tmpl-ns-json', 'a namespace cycle through tojson', `${NS}{% set ns.a = [ns] %}{{ ns.a | tojson }}`],
  ['tmpl-deep', 'a list nested 60,000 deep, printed',
    '{% set ns = namespace(l=[]) %}{% for i in range(60000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}'],
  ['tmpl-wide', '[a, a] doubled 60 times, compared',
    '{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}'],
  ['tmpl-scan', 'a million scans of the conversation',
    "{% for i in range(1000000) %}{% if '</think>' in messages[0].content %}{% endif %}{% endfor %}"],
];

test('hostile chat templates: 400 template_error, the server stays up and bounded', async () => {
  const dirs = HOSTILE_TEMPLATES.map(([id, , t]) => modelWithTemplate(id, t));
  const s2 = await startServer(dirs.flatMap((d) => ['--model', d]));
  try {
    const big = 'x'.repeat(4 << 20); // a 4 MB message: a million scans of it would take minutes
    for (const [id, what] of HOSTILE_TEMPLATES) {
      const content = id === 'tmpl-scan' ? big : 'hi';
      const r = await postJSON(s2, C, { model: id, messages: [{ role: 'user', content }], max_tokens: 1 });
      assert.equal(r.status, 400, `${what}: ${r.text.slice(0, 300)}`);
      assert.equal(r.body.error.code, 'template_error', `${what}: ${r.text.slice(0, 300)}`);
      assert.match(r.body.error.message, /nested deeper|exceeded|serializable/, what);
      assert.equal((await getJSON(s2, '/health')).status, 200, `/health after ${what}`);
    }
    // 256 MiB is one render's arena cap; well below it means no render kept its memory
    assert.ok(rssBytes(s2.pid) < 1.5 * 2 ** 30, `RSS ${rssBytes(s2.pid)} bytes`);
  } finally {
    const r = await s2.stop();
    for (const d of dirs) removeModelDir(d);
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  }
});

test('a chat template that fails to parse: a warning naming file and line at start, chat 400, completions 200', async () => {
  const dir = modelWithTemplate('tmpl-broken', '{{ messages[0].content }}\n{% for m in messages %}never closed');
  const s2 = await startServer(['--model', dir]);
  try {
    assert.match(s2.log(), /warning: model .*tmpl-broken: the chat template failed to load/);
    assert.match(s2.log(), /chat_template\.jinja: template line 2: .*endfor/);
    const r = await postJSON(s2, C, { model: 'tmpl-broken', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error.code, 'template_error');
    assert.match(r.body.error.message, /chat template failed to load at start: .*template line 2/);
    assert.ok(!r.text.includes(FIX) && !r.text.includes(os.tmpdir() + '/hearth-tmpl'), `a reply names a path: ${r.text}`);
    const c = await postJSON(s2, '/v1/completions', { model: 'tmpl-broken', prompt: 'hi', max_tokens: 1 });
    assert.equal(c.status, 200, c.text);
    assert.equal((await getJSON(s2, '/health')).status, 200);
  } finally {
    const r = await s2.stop();
    removeModelDir(dir);
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  }
});
