// tests/server/hostile.test.mjs — a raw-socket table of hostile and malformed requests. Each row
// is sent on its own connection and must get its documented status (or, where noted, a closed
// connection without a response); afterwards the server must still answer /health and shut down
// cleanly. This table is the documentation of those statuses (README, "Errors and limits").
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { after, before, test } from 'node:test';

import {
  BIN, CHAT, EMBED, FIX, getJSON, modelWithTemplate, postJSON, removeModelDir, requirePrereqs, rssBytes, sleep, startServer,
} from './harness.mjs';

requirePrereqs({ openai: true });

const MAX_BODY = 65536;
const HEAD_S = 3; // --header-timeout: the request head's deadline and the body's grace
let srv;
before(async () => {
  srv = await startServer(['--timeout', '2', '--header-timeout', String(HEAD_S), '--max-body', String(MAX_BODY), '--max-conns', '200']);
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
    const t0 = Date.now();
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const text = Buffer.concat(bufs).toString('latin1');
      const statuses = [...text.matchAll(/HTTP\/1\.[01] (\d{3}) [A-Z]/g)].map((m) => Number(m[1]));
      resolve({ statuses, closed, text, seconds: (Date.now() - t0) / 1000 });
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

// The statuses of the responses that make up text exactly: each a status line, header lines
// ("Name: value"), a blank line and a Content-Length body. Throws on anything else (a doubled or
// garbled head, bytes left over).
function parseResponses(text) {
  const out = [];
  let rest = text;
  while (rest.length) {
    const m = /^HTTP\/1\.1 (\d{3}) [^\r\n]*\r\n((?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+: [^\r\n]*\r\n)*)\r\n/.exec(rest);
    if (!m) throw new Error(`not a well-formed response head at: ${JSON.stringify(rest.slice(0, 120))}`);
    const cl = /^Content-Length: (\d+)\r$/im.exec(m[2]);
    if (!cl) throw new Error(`a response without Content-Length: ${JSON.stringify(m[0])}`);
    const end = m[0].length + Number(cl[1]);
    if (rest.length < end) throw new Error(`a truncated body: ${JSON.stringify(rest.slice(0, 200))}`);
    out.push(Number(m[1]));
    rest = rest.slice(end);
  }
  return out;
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
const TOK = JSON.stringify({ model: CHAT, prompt: 'hi' });
const chunked = (b) => `${Buffer.byteLength(b).toString(16)}\r\n${b}\r\n0\r\n\r\n`;
const tools = (n) => Array.from({ length: n }, (_, i) => ({ type: 'function', function: { name: `f${i}`, parameters: { type: 'object', properties: {} } } }));

// [name, pieces (or a function returning them), expected status | 'close', options]
const TABLE = [
  ['bad JSON', () => post(C, '{"model":'), 400],
  ['JSON array body', () => post(C, '[]'), 400],
  ['JSON string body', () => post(C, '"hello"'), 400],
  ['empty body', () => post(C, ''), 400],
  ['NaN literal', () => post(C, '{"model":"tiny-chat","max_tokens":NaN}'), 400],
  ['a \\u0000 in a string (valid JSON; refused by name, not with the parser flag)', () => post(C, '{"model":"tiny-chat","messages":[{"role":"user","content":"a\\u0000b"}]}'), 400, { msg: /U\+0000 NUL/ }],
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
  ['top_p 1e-300 (0 as a 32-bit float)', () => post(C, chat({ top_p: 1e-300 })), 400, { param: 'top_p' }],
  ['top_p 1e-300, streamed', () => post(C, chat({ top_p: 1e-300, stream: true })), 400, { param: 'top_p' }],
  ['completion top_p 1e-300', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: 'x', top_p: 1e-300 })), 400, { param: 'top_p' }],
  ['min_p 1e-300 (0 as a float, and 0 is valid)', () => post(C, chat({ min_p: 1e-300 })), 200],
  ['tool_choice required with 65 tools', () => post(C, chat({ tools: tools(65), tool_choice: 'required' })), 400, { param: 'tool_choice' }],
  // 64 tools (or a named one of 65) pass the tool_choice check; 64 tool definitions then overflow
  // this server's 512-token context, the next check
  ['tool_choice required with 64 tools', () => post(C, chat({ tools: tools(64), tool_choice: 'required', max_tokens: 1 })), 400, { param: 'messages' }],
  ['tool_choice naming one of 65 tools', () => post(C, chat({ tools: tools(65), tool_choice: { type: 'function', function: { name: 'f64' } }, max_tokens: 1 })), 400, { param: 'messages' }],
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
  ['completion 1,025 prompts', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: Array(1025).fill('x') })), 400, { param: 'prompt' }],
  ['completion 65 prompts x n 16 (1,040 choices)', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: Array(65).fill('x'), n: 16 })), 400, { param: 'n' }],
  ['completion prompts: one empty array', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: [[1, 2], []] })), 400, { param: 'prompt' }],
  ['completion prompts: a number among strings', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: ['a', 5] })), 400, { param: 'prompt' }],
  ['completion prompts: second one too long', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: [[1, 2], Array(600).fill(9707)] })), 400, { param: 'prompt' }],
  ['completion two prompts', () => post('/v1/completions', JSON.stringify({ model: CHAT, prompt: ['a', [1, 2]], max_tokens: 1 })), 200],
  ['embeddings dimensions 0', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: 'x', dimensions: 0 })), 400],
  ['embeddings encoding hex', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: 'x', encoding_format: 'hex' })), 400],
  ['embeddings input object', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: {} })), 400],
  ['embeddings with the chat model', () => post('/v1/embeddings', JSON.stringify({ model: CHAT, input: 'x' })), 400],
  ['detokenize out of range', () => post('/detokenize', JSON.stringify({ model: CHAT, tokens: [-1] })), 400],
  ['detokenize past the model rows', () => post('/detokenize', JSON.stringify({ model: CHAT, tokens: [151936] })), 400],
  ['detokenize a padding id (last model row)', () => post('/detokenize', JSON.stringify({ model: CHAT, tokens: [151935] })), 200],
  ['missing Content-Type', () => post(C, chat(), { ct: null }), 415],
  ['text/plain Content-Type', () => post(C, chat(), { ct: 'text/plain' }), 415],
  ['form Content-Type', () => post(C, chat(), { ct: 'application/x-www-form-urlencoded' }), 415],
  ['gzip Content-Encoding', () => post('/tokenize', TOK, { headers: { 'Content-Encoding': 'gzip' } }), 415],
  ['identity Content-Encoding accepted', () => post('/tokenize', TOK, { headers: { 'Content-Encoding': 'identity' } }), 200],
  ['embeddings token id past the vocabulary', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: [9707, 999999] })), 400, { param: 'input' }],
  ['embeddings input past the context', () => post('/v1/embeddings', JSON.stringify({ model: EMBED, input: 'x'.repeat(6000) })), 400, { param: 'input' }],
  ['chat stream_options without stream', () => post(C, chat({ stream_options: { include_usage: true } })), 400, { param: 'stream_options' }],
  ['charset parameter accepted', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: 'hi' }), { ct: 'application/json; charset=utf-8' }), 200],
  // 413s: with "Expect: 100-continue" or above the drain bound (64 MiB) at once, else after the
  // body has been read and dropped (clients that write the whole body first then see the 413)
  ['Content-Length above the cap, Expect: 100-continue', () => req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': '10000000', Expect: '100-continue' } }), 413],
  ['Content-Length above the drain bound', () => req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': String(100 << 20) } }), 413],
  ['Content-Length above the cap, body sent', () => post('/tokenize', 'z'.repeat(3 * MAX_BODY)), 413],
  ['Content-Length above the cap, only the head sent', () => req('POST', C, { headers: { 'Content-Type': 'application/json', 'Content-Length': '10000000' } }), 'close', { waitMs: (HEAD_S + 3) * 1000 }],
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
  ['DELETE a model without --api-key or --allow-model-admin', () => req('DELETE', `/v1/models/${CHAT}`), 403],
  ['PUT /health', () => req('PUT', '/health', { body: '{}' }), 405],
  ['OPTIONS preflight', () => req('OPTIONS', C), 405],
  ['invalid UTF-8 in the path', () => Buffer.concat([Buffer.from('GET /v1/\xff\xfe HTTP/1.1\r\n', 'latin1'), Buffer.from(`Host: ${H()}\r\nConnection: close\r\n\r\n`)]), 404],
  ['garbage request line', () => 'GARBAGE\r\n\r\n', 400, { closes: true, exact: [400] }],
  ['HTTP/2.0 in the request line', () => req('GET', '/health', { version: '2.0' }), 505],
  ['bad Content-Length', () => `POST ${C} HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}`, 400],
  // framing: MHD 0.9.75 lets these through or garbles them; the relay's framer (http_frame.h)
  // refuses them before MHD parses anything, with exactly one well-formed reply, and closes
  ['two Content-Length headers, conflicting', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: ${TOK.length}\r\nContent-Length: 5\r\n\r\n${TOK}`, 400, { closes: true }],
  ['two Content-Length headers, equal', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: ${TOK.length}\r\nContent-Length: ${TOK.length}\r\n\r\n${TOK}`, 400, { closes: true }],
  ['Content-Length: -1 (one well-formed 400, not two)', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n${TOK}`, 400, { closes: true, exact: [400] }],
  ['Content-Length: +5', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: +5\r\n\r\n{}`, 400, { closes: true, exact: [400] }],
  ['Content-Length of 19 digits', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: 1000000000000000000\r\n\r\n{}`, 400, { closes: true, exact: [400] }],
  ['Content-Length: 2 2 (a list)', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: 2, 2\r\n\r\n{}`, 400, { closes: true, exact: [400] }],
  ['two Host headers', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\nHost: ${H()}\r\n\r\n`, 400, { closes: true }],
  ['Transfer-Encoding: gzip', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n${TOK}`, 501, { closes: true }],
  ['Transfer-Encoding: gzip, chunked', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${chunked(TOK)}`, 501, { closes: true }],
  ['Transfer-Encoding: chunked and Content-Length', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n${chunked(TOK)}`, 400, { closes: true }],
  ['chunked: a chunk size that is not hex', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['chunked: data longer than its size', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['Transfer-Encoding: chunked', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked(TOK)}`, 200],
  ['%00 in a model id', () => req('GET', `/v1/models/${CHAT}%00xyz`), 400],
  ['%00 in the path', () => req('GET', '/health%00'), 400],
  ['%00 in a query argument', () => req('GET', '/health?a=%00'), 400],
  ['%41 in the path is decoded', () => req('GET', '/he%61lth'), 200],
  // MHD 0.9.75 ends the head at a line with an empty name and parses the rest as a second request;
  // the framer refuses the head: one 400, and no second response
  ['a header line with an empty name', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\n: x\r\nGET /v1/models HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['a header line with a whitespace-only name', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\n  : x\r\nGET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['a space before the colon', () => `GET /health HTTP/1.1\r\nHost : ${H()}\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['obs-fold (a header continued on the next line)', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\nX-A: 1\r\n  2\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['bare LF line ends', () => `GET /health HTTP/1.1\nHost: ${H()}\nConnection: close\n\n`, 400, { closes: true, exact: [400] }],
  ['a NUL byte in a header value', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\nX-A: a\0b\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['two spaces in the request line', () => `GET  /health HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\n\r\n`, 400, { closes: true, exact: [400] }],
  ['header flood (3000 headers)', () => {
    let s = `GET /health HTTP/1.1\r\nHost: ${H()}\r\n`;
    for (let i = 0; i < 3000; i++) s += `X-Flood-${i}: ${'a'.repeat(20)}\r\n`;
    return s + '\r\n';
  }, 431],
  ['one 100 KB header', () => `GET /health HTTP/1.1\r\nHost: ${H()}\r\nX-Big: ${'b'.repeat(100000)}\r\n\r\n`, 431],
  ['100 KB URL', () => `GET /${'u'.repeat(100000)} HTTP/1.1\r\nHost: ${H()}\r\n\r\n`, 414],
  ['pipelined GETs', () => req('GET', '/health', { headers: { Connection: 'keep-alive' } }).toString() + req('GET', '/v1/models').toString(), [200, 200], { exact: [200, 200] }],
  // a keep-alive connection's later requests are framed like its first
  ['pipelined: a valid GET, then Content-Length: -1', () => req('GET', '/health', { headers: { Connection: 'keep-alive' } }).toString() + `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n${TOK}`, [200, 400], { closes: true, exact: [200, 400] }],
  ['pipelined: a valid POST, then an empty header name', () => post('/tokenize', TOK, { headers: { Connection: 'keep-alive' } }).toString('latin1') + `GET /health HTTP/1.1\r\nHost: ${H()}\r\n: x\r\nGET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n`, [200, 400], { closes: true, exact: [200, 400] }],
  ['keep-alive: a valid GET, a pause, then two Host headers', () => [req('GET', '/health', { headers: { Connection: 'keep-alive' } }), 300, `GET /health HTTP/1.1\r\nHost: ${H()}\r\nHost: ${H()}\r\n\r\n`], [200, 400], { closes: true, exact: [200, 400] }],
  ['pipelined: a chunked POST, then a GET', () => `POST /tokenize HTTP/1.1\r\nHost: ${H()}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(TOK)}` + req('GET', '/health').toString(), [200, 200], { exact: [200, 200] }],
  ['pipelined POST then GET', () => post('/tokenize', JSON.stringify({ model: CHAT, prompt: 'a b c' }), { headers: { Connection: 'keep-alive' } }).toString('latin1') + req('GET', '/health').toString(), [200, 200]],
  ['slowloris: partial headers, then silence', () => [`GET /health HTTP/1.1\r\nHost: ${H()}\r\n`, 'X-Slow: 1\r\n'], 'close'],
  ['slowloris: a byte every 150 ms (completes within the head deadline)', () => [...`GET /health HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\n\r\n`.slice(0, 12)].flatMap((c) => [c, 150]).concat([`${`GET /health HTTP/1.1\r\nHost: ${H()}\r\nConnection: close\r\n\r\n`.slice(12)}`]), 200, { waitMs: 9000 }],
  // --timeout is an idle timeout (2 s here): a byte every 300 ms never trips it; the head deadline does
  ['slowloris: a byte every 300 ms, head never done (head deadline)', () => [...`GET /health HTTP/1.1\r\nHost: ${H()}\r\n`].flatMap((c) => [c, 300]), 'close', { waitMs: (HEAD_S + 3) * 1000, within: HEAD_S + 1 }],
  ['slow body: 100 bytes a second (body rate floor)', () => [req('POST', '/tokenize', { headers: { 'Content-Type': 'application/json', 'Content-Length': '4000' } })].concat(Array(60).fill(['x'.repeat(10), 100]).flat()), 'close', { waitMs: (HEAD_S + 3) * 1000, within: HEAD_S + 1 }],
];

test(`hostile table has >= 40 rows (${TABLE.length})`, () => assert.ok(TABLE.length >= 40));

const replies = []; // every reply's text, checked for file paths at the end
for (const [name, make, want, opt = {}] of TABLE) {
  test(`${name} -> ${Array.isArray(want) ? want.join(',') : want}`, async () => {
    const r = await raw(make(), opt);
    replies.push(r.text);
    // exact: the whole reply text is these responses, each a well-formed head and its body
    if (opt.exact) assert.deepEqual(parseResponses(r.text), opt.exact, r.text.slice(0, 600));
    if (want === 'close') {
      assert.equal(r.statuses.length, 0, `unexpected response: ${r.text.slice(0, 200)}`);
      assert.ok(r.closed, 'the server should have closed the connection');
      if (opt.within) assert.ok(r.seconds <= opt.within, `closed after ${r.seconds} s, want <= ${opt.within}`);
    } else if (Array.isArray(want)) {
      assert.deepEqual(r.statuses, want, r.text.slice(0, 300));
      if (opt.closes) assert.ok(r.closed && /Connection: close/i.test(r.text), 'the last reply closes the connection');
    } else {
      assert.equal(r.statuses[0], want, r.text.slice(0, 300));
      if (want >= 400 && want !== 431 && want !== 414 && want !== 505 && !(want === 400 && /GARBAGE|Content-Length: abc|Host/.test(name))) {
        const body = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
        if (body.trim().startsWith('{')) assert.ok(JSON.parse(body).error.message, 'OpenAI error object');
      }
      if (opt.closes) assert.ok(r.closed && /Connection: close/i.test(r.text), 'the reply closes the connection');
      if (opt.param) {
        const body = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
        assert.equal(JSON.parse(body).error.param, opt.param, body);
      }
      if (opt.msg) {
        const body = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
        assert.match(JSON.parse(body).error.message, opt.msg, body);
      }
    }
    // the server is still up after every row. A row that waits out --timeout (2 s) races the server's idle
    // close of fetch's pooled keep-alive connection: a request sent on it as it closes fails with no reply
    // (HTTP's known keep-alive race, which clients answer by retrying on a new connection), so once more.
    let health;
    try { health = await getJSON(srv, '/health'); } catch { health = await getJSON(srv, '/health'); }
    assert.equal(health.status, 200, `/health after ${name}`);
  });
}

// Bind: the listening socket (hearth's own since the framing relay, http_relay.c) is loopback only.
test('bind: the server listens on 127.0.0.1 only, and refuses a non-loopback --host at start', () => {
  const hex = srv.port.toString(16).toUpperCase().padStart(4, '0');
  const listening = (file) => fs.readFileSync(file, 'utf8').split('\n').slice(1)
    .map((l) => l.trim().split(/\s+/)).filter((f) => f.length > 3 && f[1].endsWith(`:${hex}`) && f[3] === '0A').map((f) => f[1]);
  assert.deepEqual(listening('/proc/net/tcp'), [`0100007F:${hex}`], 'one listening socket, on 127.0.0.1');
  if (fs.existsSync('/proc/net/tcp6')) assert.deepEqual(listening('/proc/net/tcp6'), [], 'none on IPv6');
  for (const host of ['0.0.0.0', '::', '192.168.1.10', 'example.com']) {
    const r = spawnSync(BIN, ['serve', '--model', `${FIX}/${CHAT}`, '--host', host, '--port', '0'], { encoding: 'utf8', timeout: 60000 });
    assert.notEqual(r.status, 0, `--host ${host} was accepted`);
    assert.match(r.stderr, /loopback only/, r.stderr);
  }
});

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

test('slowloris: 8 clients trickling a byte a second on --max-conns 8; /health still answers', async () => {
  const small = await startServer(['--max-conns', '8', '--timeout', '3', '--header-timeout', '2']);
  try {
    const t0 = Date.now();
    const closed = [];
    const head = `GET /health HTTP/1.1\r\nHost: 127.0.0.1:${small.port}\r\n\r\n`;
    const socks = [];
    for (let i = 0; i < 8; i++) {
      const s = net.connect(small.port, '127.0.0.1');
      s.on('error', () => {});
      let k = 0;
      const iv = setInterval(() => { if (k < head.length && !s.destroyed) s.write(head[k++]); }, 1000);
      s.on('close', () => { clearInterval(iv); closed.push((Date.now() - t0) / 1000); });
      socks.push(s);
    }
    await sleep(300);
    // all 8 connections are held: /health gets a reserve connection, and the slow heads are closed
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${small.url}/health`, { signal: AbortSignal.timeout(1500) });
      assert.equal(r.status, 200);
      await sleep(300);
    }
    while (closed.length < 8 && Date.now() - t0 < 6000) await sleep(100);
    for (const s of socks) s.destroy();
    console.log(`slowloris: slow heads closed at ${closed.map((x) => x.toFixed(1)).join(', ')} s`);
    assert.equal(closed.length, 8, 'every slow client was disconnected');
    assert.ok(Math.max(...closed) < 3.5, `slow heads closed by ${Math.max(...closed)} s (head deadline 2 s)`);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

test('memory: four 8 MB bodies of [{},{},...] at once are refused within a memory bound', async () => {
  const big = await startServer([]); // the default --max-body, 8 MiB
  try {
    const hwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${big.pid}/status`, 'utf8'))[1]) * 1024;
    const before = hwm();
    const n = Math.floor(((8 << 20) - 64) / 3);
    const body = `{"model":"${CHAT}","prompt":"hi","x":[${'{},'.repeat(n - 1)}{}]}`;
    assert.ok(body.length <= 8 << 20);
    const rs = await Promise.all([0, 1, 2, 3].map(() => fetch(`${big.url}/tokenize`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body,
    }).then(async (r) => ({ status: r.status, body: await r.json() }))));
    for (const r of rs) {
      assert.ok(r.status === 413 || r.status === 503, JSON.stringify(r));
      assert.ok(r.body.error.message);
    }
    assert.ok(rs.some((r) => r.status === 413), 'the per-request budget refuses it');
    const grew = hwm() - before;
    console.log(`memory: four 8 MB [{},...] bodies -> ${rs.map((r) => r.status)}; peak RSS +${(grew / 1048576).toFixed(0)} MB`);
    // unbounded, this was ~630 MB per body (2.6 GB for four); now the bodies themselves dominate
    assert.ok(grew < 256 << 20, `peak RSS grew by ${(grew / 1048576).toFixed(0)} MB`);
    assert.equal((await getJSON(big, '/health')).status, 200);
    // an ordinary body of the same size still parses
    const ok = await fetch(`${big.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: CHAT, prompt: 'hi', pad: 'p'.repeat(7 << 20) }) });
    assert.equal(ok.status, 200);
  } finally {
    assert.equal((await big.stop()).code, 0);
  }
});

test('memory: four 8 MB /tokenize bodies at once stay within 320 MB of peak RSS', async () => {
  const big = await startServer([]); // the default --max-body, 8 MiB
  try {
    const hwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${big.pid}/status`, 'utf8'))[1]) * 1024;
    const before = hwm();
    const body = JSON.stringify({ model: CHAT, prompt: 'Hello world, how are you? '.repeat(((8 << 20) - 100) / 26 | 0) });
    assert.ok(body.length <= 8 << 20);
    const rs = await Promise.all([0, 1, 2, 3].map(() => fetch(`${big.url}/tokenize`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body,
    }).then(async (r) => ({ status: r.status, body: await r.json() }))));
    for (const r of rs) {
      assert.equal(r.status, 200);
      assert.ok(r.body.count > 1000000 && r.body.tokens.length === r.body.count, `count ${r.body.count}`);
    }
    const grew = hwm() - before;
    console.log(`memory: four 8 MB /tokenize bodies (${rs[0].body.count} tokens each); peak RSS +${(grew / 1048576).toFixed(0)} MB`);
    // was ~1 GB: a jansson tree of the ids and every pre-token's range held at once (~120 MB each);
    // now about 6x each body (the body, its parsed string, the ids, the reply text)
    assert.ok(grew < 320 << 20, `peak RSS grew by ${(grew / 1048576).toFixed(0)} MB`);
    assert.equal((await getJSON(big, '/health')).status, 200);
  } finally {
    assert.equal((await big.stop()).code, 0);
  }
});

test('413 reaches the official client: a 30 MB body is an APIError with status 413', async () => {
  const { default: OpenAI } = await import('openai');
  const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await assert.rejects(
    client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content: 'x'.repeat(30 << 20) }] }),
    (e) => e instanceof OpenAI.APIError && e.status === 413 && /exceeds/.test(e.message));
  assert.equal((await getJSON(srv, '/health')).status, 200);
});

test('echo keeps the prompt text when an id is a padding row (no token for it)', async () => {
  const post = async (p, b) => {
    const r = await fetch(srv.url + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    return { status: r.status, body: await r.json() };
  };
  const t = await post('/tokenize', { model: CHAT, prompt: 'Hello world' });
  assert.equal(t.status, 200);
  const ids = t.body.tokens;
  assert.ok(ids.length >= 2);
  const plain = await post('/detokenize', { model: CHAT, tokens: ids });
  assert.equal(plain.body.prompt, 'Hello world');
  const padded = [151700, ...ids.slice(0, 1), 151935, ...ids.slice(1)];
  const d = await post('/detokenize', { model: CHAT, tokens: padded });
  assert.equal(d.status, 200);
  assert.equal(d.body.prompt, 'Hello world', 'padding ids decode as empty text');
  const e = await post('/v1/completions', { model: CHAT, prompt: padded, echo: true, max_tokens: 0 });
  assert.equal(e.status, 200, JSON.stringify(e.body));
  assert.equal(e.body.choices[0].text, 'Hello world');
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
  // and within a memory bound: no row left its body, tree or buffers behind
  assert.ok(rssBytes(srv.pid) < 1 << 30, `RSS ${rssBytes(srv.pid)} bytes after the table`);
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
