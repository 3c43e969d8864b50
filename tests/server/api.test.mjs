// tests/server/api.test.mjs — the OpenAI surface of `hearth serve`, through the official client.
// The fixture weights are random, so the text is gibberish: these tests check protocol behaviour
// (shapes, usage = token counts, finish reasons, stop strings, determinism, independence of
// concurrent streams, cancellation), never the words.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  CHAT, EMBED, FIX, getJSON, modelWithTemplate, postJSON, removeModelDir, requirePrereqs, sleep, startServer,
} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

requirePrereqs();
const { default: OpenAI } = await import('openai');

let srv, client;
before(async () => {
  srv = await startServer();
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
});

// The system message makes the prompt span a whole KV block (16 tokens), so a repeated request
// can reuse a cached prefix: Qwen3's template adds no default system prompt of its own.
const SYSTEM = { role: 'system', content: 'You are a helpful assistant.' };
const USER = [SYSTEM, { role: 'user', content: 'Write a haiku about the sea.' }];
const greedy = (extra = {}) => ({ model: CHAT, messages: USER, temperature: 0, max_tokens: 12,
  ignore_eos: true, ...extra });

async function streamText(params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = '', finish = null, usage = null, role = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    const ch = c.choices[0];
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  return { text, finish, usage, role, chunks };
}

async function chatTokens(messages, tools) {
  const r = await postJSON(srv, '/tokenize', { model: CHAT, messages, ...(tools ? { tools } : {}) });
  assert.equal(r.status, 200, r.text);
  return r.body;
}

describe('models', () => {
  test('list and retrieve', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids.sort(), [CHAT, EMBED].sort());
    const m = await client.models.retrieve(CHAT);
    assert.equal(m.id, CHAT);
    assert.equal(m.object, 'model');
  });
  test('unknown model is a 404', async () => {
    await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
    await assert.rejects(client.chat.completions.create({ ...greedy(), model: 'nope' }),
      (e) => e.status === 404 && e.code === 'model_not_found');
  });
  test('health and status', async () => {
    assert.deepEqual((await getJSON(srv, '/health')).body, { status: 'ok' });
    const st = (await getJSON(srv, '/status')).body;
    assert.equal(st.models.find((m) => m.id === CHAT).slots, 20);
  });
});

describe('chat completions', () => {
  test('plain: shape, usage, finish_reason, determinism', async () => {
    const r = await client.chat.completions.create(greedy());
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    assert.equal(r.usage.prompt_tokens, (await chatTokens(USER)).count);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
    const again = await client.chat.completions.create(greedy());
    assert.equal(again.choices[0].message.content, r.choices[0].message.content);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'prefix reuse across requests');
  });
  test('streamed equals plain; role first, usage last', async () => {
    const plain = await client.chat.completions.create(greedy());
    const s = await streamText({ ...greedy(), stream_options: { include_usage: true } });
    assert.equal(s.role, 'assistant');
    assert.equal(s.text, plain.choices[0].message.content);
    assert.equal(s.finish, 'length');
    assert.equal(s.usage.completion_tokens, 12);
    assert.equal(s.usage.prompt_tokens, plain.usage.prompt_tokens);
  });
  test('seeded sampling is reproducible', async () => {
    const p = greedy({ temperature: 1.0, top_p: 0.9, seed: 1234 });
    const a = await client.chat.completions.create(p);
    const b = await client.chat.completions.create(p);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  });
  test('array content parts', async () => {
    const r = await client.chat.completions.create(greedy({
      messages: [SYSTEM, { role: 'user', content: [{ type: 'text', text: 'Write a haiku ' }, { type: 'text', text: 'about the sea.' }] }],
    }));
    const plain = await client.chat.completions.create(greedy());
    assert.equal(r.choices[0].message.content, plain.choices[0].message.content);
  });
  test('logprobs: one entry per token, top alternatives sorted, greedy picks the top', async () => {
    const r = await client.chat.completions.create(greedy({ logprobs: true, top_logprobs: 3, max_tokens: 6 }));
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    for (const e of lp) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 3);
      assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
      assert.ok(e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob);
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
    }
    assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
  });
  test('stop strings split across tokens are honoured and never leaked', async () => {
    const full = await client.chat.completions.create(greedy({ logprobs: true, max_tokens: 16 }));
    const toks = full.choices[0].logprobs.content.map((e) => e.token);
    const text = full.choices[0].message.content;
    // a boundary between two tokens with at least two characters on each side
    let k = -1;
    for (let i = 2; i + 1 < toks.length; i++) {
      if ([...toks[i]].length >= 2 && [...toks[i + 1]].length >= 2) { k = i; break; }
    }
    assert.ok(k > 0, `no usable token boundary in ${JSON.stringify(toks)}`);
    const stop = [...toks[k]].slice(-2).join('') + [...toks[k + 1]].slice(0, 2).join('');
    const want = text.slice(0, text.indexOf(stop));
    const r = await client.chat.completions.create(greedy({ max_tokens: 16, stop: [stop, 'zzzzzzzz'] }));
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.content, want);
    const s = await streamText(greedy({ max_tokens: 16, stop }));
    assert.equal(s.finish, 'stop');
    assert.equal(s.text, want);
    assert.ok(!s.text.includes(stop));
  });
  test('a tool-call round trip renders through the real template', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const first = await client.chat.completions.create(greedy({ tools, max_tokens: 4 }));
    assert.ok(['length', 'stop', 'tool_calls'].includes(first.choices[0].finish_reason));
    const messages = [...USER,
      // content null, as the official client sends a tool call back: hearth renders it as ''
      // (Qwen3's template tests `'</think>' in message.content`, which would raise on null)
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' }];
    const second = await client.chat.completions.create(greedy({ tools, messages, max_tokens: 4 }));
    assert.equal(second.choices[0].finish_reason, 'length');
    const t = await chatTokens(messages, tools);
    assert.equal(second.usage.prompt_tokens, t.count);
    assert.match(t.prompt, /get_weather/);
    assert.match(t.prompt, /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Oslo"\}\}\n<\/tool_call>/);
    assert.match(t.prompt, /<tool_response>\nsunny, 21 C\n<\/tool_response>/);
  });
  test('validation errors name the parameter', async () => {
    await assert.rejects(client.chat.completions.create(greedy({ temperature: 9 })),
      (e) => e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.chat.completions.create(greedy({ messages: [] })),
      (e) => e.status === 400 && e.param === 'messages');
    await assert.rejects(client.chat.completions.create({ ...greedy(), model: EMBED }),
      (e) => e.status === 400 && e.param === 'model');
    // stream_options would do nothing without stream: a 400, as OpenAI and vLLM answer it
    await assert.rejects(client.chat.completions.create(greedy({ stream_options: { include_usage: true } })),
      (e) => e.status === 400 && e.param === 'stream_options');
  });
  test('a "developer" message is the system message for a template that knows only "system"', async () => {
    const dev = await chatTokens([{ role: 'developer', content: SYSTEM.content }, USER[1]]);
    const sys = await chatTokens(USER);
    assert.equal(dev.prompt, sys.prompt);
    assert.deepEqual(dev.tokens, sys.tokens);
    const r = await client.chat.completions.create(greedy({ messages: [{ role: 'developer', content: SYSTEM.content }, USER[1]] }));
    assert.equal(r.usage.prompt_tokens, sys.count);
  });
  test('/tokenize renders chat_template_kwargs as chat completions does', async () => {
    const kw = { chat_template_kwargs: { enable_thinking: false } };
    const plain = await chatTokens(USER);
    const r = await postJSON(srv, '/tokenize', { model: CHAT, messages: USER, ...kw });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.body.count > plain.count, 'Qwen3\'s template writes an empty think block for enable_thinking false');
    const c = await client.chat.completions.create(greedy(kw));
    assert.equal(c.usage.prompt_tokens, r.body.count);
  });
});

describe('n choices', () => {
  // collects a streamed chat per choice index
  async function streamChoices(params) {
    const s = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    const text = {}, finish = {};
    let usage = null;
    for await (const c of s) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        text[ch.index] = (text[ch.index] ?? '') + (ch.delta.content ?? '');
        if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
      }
    }
    return { text, finish, usage };
  }
  const sampled = (extra = {}) => greedy({ temperature: 1.0, seed: 77, max_tokens: 8, ...extra });

  test('chat n=3: three choices in order, choice 0 = the n=1 request, usage counts the prompt once', async () => {
    const r = await client.chat.completions.create(sampled({ n: 3 }));
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of r.choices) assert.equal(c.finish_reason, 'length');
    const one = await client.chat.completions.create(sampled());
    assert.equal(r.choices[0].message.content, one.choices[0].message.content);
    assert.ok(new Set(r.choices.map((c) => c.message.content)).size > 1, 'seeds differ per choice');
    assert.equal(r.usage.prompt_tokens, (await chatTokens(USER)).count);
    assert.equal(r.usage.completion_tokens, 3 * 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
    const again = await client.chat.completions.create(sampled({ n: 3 }));
    assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
  });
  test('chat n=3 streamed: every index streams its own text and finish; usage once at the end', async () => {
    const plain = await client.chat.completions.create(sampled({ n: 3 }));
    const s = await streamChoices(sampled({ n: 3 }));
    for (let k = 0; k < 3; k++) {
      assert.equal(s.text[k], plain.choices[k].message.content, `choice ${k}`);
      assert.equal(s.finish[k], 'length');
    }
    assert.deepEqual(s.usage.completion_tokens, 24);
    assert.deepEqual(s.usage.prompt_tokens, plain.usage.prompt_tokens);
  });
  test('greedy n=2 gives two identical choices; n=17 is refused naming n', async () => {
    const r = await client.chat.completions.create(greedy({ n: 2, max_tokens: 5 }));
    assert.equal(r.choices.length, 2);
    assert.equal(r.choices[0].message.content, r.choices[1].message.content);
    await assert.rejects(client.chat.completions.create(greedy({ n: 17 })),
      (e) => e.status === 400 && e.param === 'n');
  });
  test('chat n=2 with a stop string: each choice stops on its own', async () => {
    const full = await client.chat.completions.create(sampled({ n: 2, max_tokens: 12 }));
    const t0 = full.choices[0].message.content;
    const stop = [...t0].slice(3, 5).join('');
    const r = await client.chat.completions.create(sampled({ n: 2, max_tokens: 12, stop }));
    assert.equal(r.choices[0].message.content, t0.slice(0, t0.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
    const t1 = full.choices[1].message.content;
    assert.equal(r.choices[1].message.content, t1.includes(stop) ? t1.slice(0, t1.indexOf(stop)) : t1);
  });
});

describe('response_format', () => {
  test('json_object is accepted when a message mentions JSON; a json_schema outside the subset is a 400', async () => {
    const messages = [{ role: 'user', content: 'Reply with a JSON object.' }];
    const r = await client.chat.completions.create(greedy({ messages, response_format: { type: 'json_object' } }));
    const c0 = r.choices[0].message.content;
    assert.match(c0, /^\s*\{/, 'a json_object answer opens an object');
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(c0), 'object');
    else assert.equal(r.choices[0].finish_reason, 'length');
    await assert.rejects(client.chat.completions.create(greedy({ response_format: { type: 'json_object' } })),
      (e) => e.status === 400 && e.param === 'messages' && /json/i.test(e.message));
    await assert.rejects(client.chat.completions.create(greedy({ messages, response_format: { type: 'json_schema',
      json_schema: { name: 'x', schema: { type: 'object', properties: { a: { $ref: '#/defs/a' } } } } } })),
    (e) => e.status === 400 && e.param === 'response_format.json_schema' && /\$ref/.test(e.message));
    await assert.rejects(client.chat.completions.create(greedy({ messages,
      response_format: { type: 'json_schema', json_schema: { name: 'x' } } })),
    (e) => e.status === 400 && e.param === 'response_format.json_schema');
    const t = await client.chat.completions.create(greedy({ response_format: { type: 'text' } }));
    assert.equal(t.choices[0].message.content, (await client.chat.completions.create(greedy())).choices[0].message.content);
  });
});

describe('response_format json_object decoding', () => {
  // Qwen's byte-level vocabulary: '{' is id 90, '}' id 92. The bias makes '{' then '}' the greedy
  // choices wherever the JSON constraint allows them: the answer must be exactly "{}", ended by
  // the closed object (finish_reason stop, although ignore_eos is set and max_tokens is larger).
  const messages = [{ role: 'user', content: 'Reply in JSON.' }];
  const steer = { messages, response_format: { type: 'json_object' }, logit_bias: { 90: 100, 92: 90 }, max_tokens: 30 };
  test('the constraint ends the answer when its object closes, plain and streamed', async () => {
    const r = await client.chat.completions.create(greedy(steer));
    assert.equal(r.choices[0].message.content, '{}');
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.completion_tokens, 2);
    let text = '', finish = null;
    for await (const ch of await client.chat.completions.create(greedy({ ...steer, stream: true }))) {
      for (const c of ch.choices) { text += c.delta?.content ?? ''; finish = c.finish_reason ?? finish; }
    }
    assert.equal(text, '{}');
    assert.equal(finish, 'stop');
  });
  test('a bias toward tokens JSON forbids cannot break the object', async () => {
    // ']' (id 60) and the end-of-text token strongly favoured: neither may ever appear first
    const r = await client.chat.completions.create(greedy({ messages, response_format: { type: 'json_object' },
      logit_bias: { 60: 100, 151643: 100 }, max_tokens: 24 }));
    const c = r.choices[0].message.content;
    assert.match(c, /^\s*\{/);
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(c), 'object');
  });
  test('a "<think>" token inside a JSON string stays content (no reasoning split when constrained)', async () => {
    // the best allowed token: '{' (90) first, then '"' (1), then <think> (151667) inside the string
    const r = await client.chat.completions.create(greedy({ messages, response_format: { type: 'json_object' },
      logit_bias: { 90: 97, 151667: 99, 1: 98 }, max_tokens: 6 }));
    const m = r.choices[0].message;
    assert.match(m.content, /^\{"<think>/);
    assert.ok(!m.reasoning_content, 'nothing moved into reasoning_content');
  });
  test('sampled choices (n = 3) are each a JSON-object prefix', async () => {
    const r = await client.chat.completions.create({ model: CHAT, messages, response_format: { type: 'json_object' },
      n: 3, temperature: 1.0, seed: 7, max_tokens: 40 });
    for (const ch of r.choices) {
      assert.match(ch.message.content, /^\s*\{/);
      if (ch.finish_reason === 'stop') assert.equal(typeof JSON.parse(ch.message.content), 'object');
    }
  });
});

describe('response_format json_schema decoding', () => {
  // the product's classification shape: the answer is one of two labels plus a flag, in the schema's
  // order and layout; the tiny random model only chooses among what the schema allows
  const schema = { type: 'object', properties: { label: { enum: ['yes', 'no'] }, confident: { type: 'boolean' },
    n: { type: 'integer' }, tags: { type: 'array', items: { enum: ['x', 'y'] }, maxItems: 2 } },
  required: ['label', 'confident', 'n', 'tags'], additionalProperties: false };
  const rf = { type: 'json_schema', json_schema: { name: 'verdict', strict: true, schema } };
  const messages = [{ role: 'user', content: 'Is the sky blue?' }]; // json_schema needs no "json" in the text
  const follows = (text) => {
    const j = JSON.parse(text);
    assert.deepEqual(Object.keys(j), ['label', 'confident', 'n', 'tags']);
    assert.ok(j.label === 'yes' || j.label === 'no');
    assert.equal(typeof j.confident, 'boolean');
    assert.ok(Number.isInteger(j.n));
    assert.ok(Array.isArray(j.tags) && j.tags.length <= 2 && j.tags.every((t) => t === 'x' || t === 'y'));
  };
  test('greedy, plain and streamed: one document that follows the schema, finish "stop"', async () => {
    const r = await client.chat.completions.create(greedy({ messages, response_format: rf, max_tokens: 80 }));
    assert.equal(r.choices[0].finish_reason, 'stop');
    follows(r.choices[0].message.content);
    let text = '', finish = null;
    for await (const ch of await client.chat.completions.create(greedy({ messages, response_format: rf, max_tokens: 80,
      stream: true }))) {
      for (const c of ch.choices) { text += c.delta?.content ?? ''; finish = c.finish_reason ?? finish; }
    }
    assert.equal(text, r.choices[0].message.content);
    assert.equal(finish, 'stop');
  });
  test('sampled choices (n = 3) each follow the schema', async () => {
    const r = await client.chat.completions.create({ model: CHAT, messages, response_format: rf, n: 3,
      temperature: 1.0, seed: 11, max_tokens: 80 });
    for (const ch of r.choices) { assert.equal(ch.finish_reason, 'stop'); follows(ch.message.content); }
  });
});

describe('tool_choice forcing a call (Qwen <tool_call> syntax)', () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  ];
  // '{' (90) and '}' (92) favoured: the arguments object closes at once, so the call completes
  const bias = { 90: 100, 92: 90 };
  test('"required": the answer is one call of an offered tool', async () => {
    const r = await client.chat.completions.create(greedy({ tools, tool_choice: 'required', logit_bias: bias, max_tokens: 60 }));
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.tool_calls.length, 1);
    assert.ok(['get_weather', 'get_time'].includes(m.tool_calls[0].function.name));
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), {});
  });
  test('a named function is the one called, plain and streamed', async () => {
    const tool_choice = { type: 'function', function: { name: 'get_time' } };
    const r = await client.chat.completions.create(greedy({ tools, tool_choice, logit_bias: bias, max_tokens: 60 }));
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_time');
    let name = '', finish = null;
    for await (const ch of await client.chat.completions.create(greedy({ tools, tool_choice, logit_bias: bias, max_tokens: 60, stream: true }))) {
      for (const c of ch.choices) {
        for (const tc of c.delta?.tool_calls ?? []) name += tc.function?.name ?? '';
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(name, 'get_time');
    assert.equal(finish, 'tool_calls');
  });
  test('a forced call of one function follows its parameters schema, plain and streamed', async () => {
    const weather = [{ type: 'function', function: { name: 'get_weather', parameters: {
      type: 'object', required: ['city', 'days'],
      properties: { city: { type: 'string' }, days: { type: 'integer' }, unit: { enum: ['c', 'f'] } } } } }];
    const tool_choice = { type: 'function', function: { name: 'get_weather' } };
    // '"' (id 1) favoured: the random model's strings end soon, so the call completes within max_tokens
    const check = (args) => {
      const a = JSON.parse(args);
      assert.deepEqual(Object.keys(a), ['city', 'days', 'unit']);
      assert.equal(typeof a.city, 'string');
      assert.ok(Number.isInteger(a.days), args);
      assert.ok(['c', 'f'].includes(a.unit), args);
    };
    for (const extra of [{}, { tool_choice: 'required' }]) { // named, and "required" with one tool
      const r = await client.chat.completions.create(greedy({ tools: weather, tool_choice, logit_bias: { 1: 100 }, max_tokens: 200, ...extra }));
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      check(r.choices[0].message.tool_calls[0].function.arguments);
    }
    let args = '';
    for await (const ch of await client.chat.completions.create(greedy({ tools: weather, tool_choice, logit_bias: { 1: 100 }, max_tokens: 200, stream: true })))
      for (const c of ch.choices) for (const tc of c.delta?.tool_calls ?? []) args += tc.function?.arguments ?? '';
    check(args);
    // a schema json_schema.h does not compile (anyOf) leaves the arguments any JSON object, still a call
    const loose = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { anyOf: [{ type: 'string' }, { type: 'integer' }] } } } } }];
    const r = await client.chat.completions.create(greedy({ tools: loose, tool_choice: { type: 'function', function: { name: 'f' } }, logit_bias: bias, max_tokens: 60 }));
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), {});
  });
  test('bad tool_choice values are 400s naming tool_choice', async () => {
    const bad = [
      { tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
      { tool_choice: 'required' },
      { tools, tool_choice: 'sometimes' },
      { tools, tool_choice: { type: 'function' } },
    ];
    for (const b of bad)
      await assert.rejects(client.chat.completions.create(greedy(b)), (e) => e.status === 400 && e.param === 'tool_choice');
  });
});

describe('completions', () => {
  const base = { model: CHAT, prompt: 'The quick brown fox', temperature: 0, max_tokens: 10, ignore_eos: true };
  test('plain and streamed agree; usage counts tokens', async () => {
    const r = await client.completions.create(base);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 10);
    const tk = await postJSON(srv, '/tokenize', { model: CHAT, prompt: base.prompt });
    assert.equal(r.usage.prompt_tokens, tk.body.count);
    const s = await client.completions.create({ ...base, stream: true });
    let text = '', finish = null;
    for await (const c of s) { text += c.choices[0]?.text ?? ''; finish = c.choices[0]?.finish_reason ?? finish; }
    assert.equal(text, r.choices[0].text);
    assert.equal(finish, 'length');
  });
  test('token-id prompts and legacy logprobs', async () => {
    const tk = await postJSON(srv, '/tokenize', { model: CHAT, prompt: base.prompt });
    const a = await client.completions.create(base);
    const b = await client.completions.create({ ...base, prompt: tk.body.tokens, logprobs: 2 });
    assert.equal(b.choices[0].text, a.choices[0].text);
    const lp = b.choices[0].logprobs;
    assert.equal(lp.tokens.length, 10);
    assert.equal(lp.token_logprobs.length, 10);
    assert.equal(lp.tokens.join(''), b.choices[0].text);
    assert.equal(lp.text_offset[0], 0);
    for (const t of lp.top_logprobs) assert.ok(Object.keys(t).length >= 1 && Object.keys(t).length <= 2);
  });
  test('legacy logprobs always list the token taken, also when sampling picked an unlikely one', async () => {
    const r = await client.completions.create({ ...base, temperature: 1.5, seed: 5, max_tokens: 24, logprobs: 1 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 24);
    for (let i = 0; i < 24; i++) {
      const keys = Object.keys(lp.top_logprobs[i]);
      assert.ok(keys.length >= 1 && keys.length <= 2, JSON.stringify(lp.top_logprobs[i]));
      assert.ok(keys.includes(lp.tokens[i]), `position ${i}: ${JSON.stringify(lp.tokens[i])} not in ${JSON.stringify(keys)}`);
      assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);
    }
  });
  test('an array of prompts: one choice per prompt and n, in order; usage sums the prompts once', async () => {
    const prompts = ['The quick brown fox', 'Once upon a time'];
    const p = { model: CHAT, temperature: 1.0, seed: 5, max_tokens: 6, ignore_eos: true };
    const r = await client.completions.create({ ...p, prompt: prompts, n: 2 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    for (const [i, prompt] of prompts.entries()) {
      const one = await client.completions.create({ ...p, prompt });
      assert.equal(r.choices[i * 2].text, one.choices[0].text, `prompt ${i}, choice 0`);
    }
    let n = 0;
    for (const prompt of prompts) n += (await postJSON(srv, '/tokenize', { model: CHAT, prompt })).body.count;
    assert.equal(r.usage.prompt_tokens, n);
    assert.equal(r.usage.completion_tokens, 4 * 6);
    // token-id arrays give the same choices; streamed choices carry their index
    const ids = [];
    for (const prompt of prompts) ids.push((await postJSON(srv, '/tokenize', { model: CHAT, prompt })).body.tokens);
    const t = await client.completions.create({ ...p, prompt: ids, n: 2 });
    assert.deepEqual(t.choices.map((c) => c.text), r.choices.map((c) => c.text));
    const s = await client.completions.create({ ...p, prompt: prompts, n: 2, stream: true });
    const text = {}, finish = {};
    for await (const c of s) for (const ch of c.choices) {
      text[ch.index] = (text[ch.index] ?? '') + ch.text;
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
    for (let k = 0; k < 4; k++) {
      assert.equal(text[k], r.choices[k].text);
      assert.equal(finish[k], 'length');
    }
  });
  test('echo prepends the prompt, plain and streamed', async () => {
    const plain = await client.completions.create(base);
    const r = await client.completions.create({ ...base, echo: true });
    assert.equal(r.choices[0].text, base.prompt + plain.choices[0].text);
    assert.equal(r.usage.completion_tokens, 10);
    const s = await client.completions.create({ ...base, echo: true, stream: true });
    const parts = [];
    for await (const c of s) if (c.choices[0]?.text) parts.push(c.choices[0].text);
    assert.equal(parts[0], base.prompt, 'the echo is the first chunk');
    assert.equal(parts.join(''), r.choices[0].text);
  });
  test('echo + logprobs scores the prompt tokens (first null), then the completion', async () => {
    const tk = (await postJSON(srv, '/tokenize', { model: CHAT, prompt: base.prompt })).body;
    const plain = await client.completions.create({ ...base, logprobs: 2 });
    const r = await client.completions.create({ ...base, echo: true, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    const np = tk.count;
    assert.equal(lp.tokens.length, np + 10);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < lp.tokens.length; i++) {
      assert.ok(lp.token_logprobs[i] <= 0, `token ${i}`);
      // the 2 most likely, and the prompt's own token where it is not among them (OpenAI: up to logprobs + 1)
      const keys = Object.keys(lp.top_logprobs[i]);
      assert.ok(keys.includes(lp.tokens[i]), `token ${i}`);
      // completion tokens are greedy, so the top 2 already hold them; a prompt token may add a third entry
      assert.ok(i >= np ? keys.length === 2 : keys.length === 2 || keys.length === 3, `token ${i}: ${JSON.stringify(keys)}`);
    }
    assert.equal(lp.text_offset[0], 0);
    for (let i = 1; i < lp.tokens.length; i++)
      assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + [...lp.tokens[i - 1]].length);
    assert.deepEqual(lp.tokens.slice(np), plain.choices[0].logprobs.tokens);
    for (let i = 0; i < 10; i++)
      assert.ok(Math.abs(lp.token_logprobs[np + i] - plain.choices[0].logprobs.token_logprobs[i]) < 1e-3);
    // oracle for the prompt scores: score prompt + the greedy next token with max_tokens 0; its last
    // logprob must be the logprob the greedy completion reported for that token
    const next = await client.completions.create({ ...base, max_tokens: 1, logprobs: 1, prompt: tk.tokens });
    const g = (await postJSON(srv, '/tokenize', { model: CHAT, prompt: base.prompt + next.choices[0].text })).body.tokens;
    const scored = await client.completions.create({ ...base, prompt: [...tk.tokens, g[g.length - 1]], echo: true, logprobs: 1, max_tokens: 0 });
    const sl = scored.choices[0].logprobs;
    assert.equal(scored.choices[0].finish_reason, 'length');
    assert.equal(scored.usage.completion_tokens, 0);
    assert.equal(scored.choices[0].text, base.prompt + next.choices[0].text);
    assert.ok(Math.abs(sl.token_logprobs[np] - next.choices[0].logprobs.token_logprobs[0]) < 1e-3,
      `${sl.token_logprobs[np]} vs ${next.choices[0].logprobs.token_logprobs[0]}`);
    for (let i = 1; i < np; i++) assert.ok(Math.abs(sl.token_logprobs[i] - lp.token_logprobs[i]) < 1e-3);
  });
  test('max_tokens defaults to 16', async () => {
    const r = await client.completions.create({ model: CHAT, prompt: 'Hi', temperature: 0, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 16);
  });
});

describe('embeddings', () => {
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  test('float: one unit vector per input, usage counts tokens', async () => {
    const input = ['hello world', 'a second, longer input sentence'];
    const r = await client.embeddings.create({ model: EMBED, input, encoding_format: 'float' });
    assert.equal(r.data.length, 2);
    for (const [i, d] of r.data.entries()) {
      assert.equal(d.index, i);
      assert.equal(d.embedding.length, 64);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-4);
    }
    let n = 0;
    for (const s of input) n += (await postJSON(srv, '/tokenize', { model: EMBED, prompt: s })).body.count;
    assert.equal(r.usage.prompt_tokens, n);
  });
  test('base64 decodes to the float vector', async () => {
    const f = await client.embeddings.create({ model: EMBED, input: 'hello', encoding_format: 'float' });
    const raw = await postJSON(srv, '/v1/embeddings', { model: EMBED, input: 'hello', encoding_format: 'base64' });
    assert.equal(typeof raw.body.data[0].embedding, 'string');
    const buf = Buffer.from(raw.body.data[0].embedding, 'base64');
    const v = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    assert.equal(v.length, 64);
    for (let i = 0; i < 64; i++) assert.ok(Math.abs(v[i] - f.data[0].embedding[i]) < 1e-6);
    // the client's default (base64, decoded by the client) gives the same numbers
    const c = await client.embeddings.create({ model: EMBED, input: 'hello' });
    for (let i = 0; i < 64; i++) assert.ok(Math.abs(c.data[0].embedding[i] - f.data[0].embedding[i]) < 1e-6);
  });
  test('bad inputs are 400s and the server goes on (token ids out of range, past the context)', async () => {
    const bad = [
      [{ input: [9707, 999999] }, 'invalid_value'],
      [{ input: [[1, 2], [1, 999999]] }, 'invalid_value'],
      [{ input: [[1, 2], [1, 'a']] }, 'invalid_value'],
      [{ input: [[1, 2], []] }, 'invalid_value'],
      [{ input: 'x'.repeat(6000) }, 'context_length_exceeded'],
      [{ input: ['ok', 'word '.repeat(2000)] }, 'context_length_exceeded'],
    ];
    for (const [b, code] of bad) {
      const r = await postJSON(srv, '/v1/embeddings', { model: EMBED, ...b });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.body.error.param, 'input');
      assert.equal(r.body.error.code, code, r.text);
    }
    // each of these freed its token arrays once (a double free aborted the server): it still answers
    const ok = await client.embeddings.create({ model: EMBED, input: ['hello', 'world'], encoding_format: 'float' });
    assert.equal(ok.data.length, 2);
  });
  test('dimensions truncates and renormalises', async () => {
    const f = await client.embeddings.create({ model: EMBED, input: 'hello', encoding_format: 'float' });
    const d = await client.embeddings.create({ model: EMBED, input: 'hello', encoding_format: 'float', dimensions: 16 });
    const v = d.data[0].embedding, full = f.data[0].embedding.slice(0, 16);
    assert.equal(v.length, 16);
    assert.ok(Math.abs(norm(v) - 1) < 1e-4);
    const s = norm(full);
    for (let i = 0; i < 16; i++) assert.ok(Math.abs(v[i] - full[i] / s) < 1e-4);
    await assert.rejects(client.embeddings.create({ model: EMBED, input: 'x', dimensions: 65 }),
      (e) => e.status === 400 && e.param === 'dimensions');
  });
});

// tiny-embed-causal holds tiny-embed's weights under Qwen3ForCausalLM with "model."-prefixed names
// (make-fixtures.sh): --embedding-model serves it as an embedding model; --model, as a chat model.
describe('--embedding-model', () => {
  let srv2, client2;
  before(async () => {
    const dir = path.join(FIX, 'tiny-embed-causal');
    srv2 = await startServer(['--embedding-model', `causal-embed=${dir}`, '--model', `causal-chat=${dir}`]);
    client2 = new OpenAI({ baseURL: `${srv2.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  });
  after(async () => {
    const r = await srv2.stop();
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  });
  test('a Qwen3ForCausalLM checkpoint with model. names embeds as the plain embedding model does', async () => {
    const input = ['hello world', 'a second, longer input sentence'];
    const want = await client2.embeddings.create({ model: EMBED, input, encoding_format: 'float' });
    const got = await client2.embeddings.create({ model: 'causal-embed', input, encoding_format: 'float' });
    assert.equal(got.model, 'causal-embed');
    assert.equal(got.data.length, 2);
    assert.equal(got.usage.prompt_tokens, want.usage.prompt_tokens);
    for (let k = 0; k < 2; k++) {
      assert.equal(got.data[k].embedding.length, 64);
      assert.deepEqual(got.data[k].embedding, want.data[k].embedding);
    }
  });
  test('the same directory through --model is a chat model, not an embedder', async () => {
    await assert.rejects(client2.embeddings.create({ model: 'causal-chat', input: 'x' }),
      (e) => e.status === 400 && /is not an embedding model/.test(e.message));
    await assert.rejects(client2.chat.completions.create({ model: 'causal-embed', messages: USER, max_tokens: 2 }),
      (e) => e.status === 400 && /is an embedding model/.test(e.message));
  });
});

describe('limits', () => {
  // the 413 comes once the body has been read and dropped (hostile.test.mjs: the drain bound)
  test('the default body cap is 8 MiB: 5 MiB is read, Content-Length above 8 MiB is 413', async () => {
    const r = await postJSON(srv, '/tokenize', { model: CHAT, prompt: 'hi', pad: 'x'.repeat(5 << 20) });
    assert.equal(r.status, 200, r.text.slice(0, 200));
    const status = await new Promise((resolve) => {
      const s = net.connect(srv.port, '127.0.0.1');
      let text = '';
      s.on('data', (d) => { text += d; });
      s.on('close', () => resolve(Number(/HTTP\/1\.1 (\d+)/.exec(text)?.[1])));
      s.on('error', () => resolve(-1));
      s.write(`POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nConnection: close\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${(8 << 20) + 1}\r\n\r\n`);
      s.write(Buffer.alloc((8 << 20) + 1, 0x20));
    });
    assert.equal(status, 413);
  });
});

describe('concurrency and cancellation', () => {
  test('20 concurrent streams are correct and independent', async () => {
    const prompts = Array.from({ length: 20 }, (_, i) => `Request number ${i}: tell me about ${['cats', 'dogs', 'rivers', 'stars', 'bread'][i % 5]}.`);
    const params = (p) => ({ model: CHAT, messages: [{ role: 'user', content: p }], temperature: 0, max_tokens: 16, ignore_eos: true });
    const alone = [];
    for (const p of prompts) alone.push((await client.chat.completions.create(params(p))).choices[0].message.content);
    const together = await Promise.all(prompts.map((p) => streamText(params(p))));
    for (let i = 0; i < prompts.length; i++) {
      assert.equal(together[i].text, alone[i], `stream ${i} differs from the same request alone`);
      assert.equal(together[i].finish, 'length');
    }
    assert.ok(new Set(alone).size > 1, 'distinct prompts should give distinct outputs');
  });
  test('a disconnect frees its slot', async () => {
    const chatStatus = async () => (await getJSON(srv, '/status')).body.models.find((m) => m.id === CHAT);
    const before = await chatStatus();
    const ac = new AbortController();
    const res = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...greedy(), max_tokens: 400, stream: true }),
    });
    const reader = res.body.getReader();
    for (let got = 0; got < 3;) { const { value } = await reader.read(); got += value ? 1 : 0; }
    assert.equal((await chatStatus()).slots_busy, 1);
    ac.abort();
    let st;
    for (let i = 0; i < 100; i++) {
      st = await chatStatus();
      if (st.slots_busy === 0 && st.cancelled > before.cancelled) break;
      await sleep(50);
    }
    assert.equal(st.slots_busy, 0);
    assert.equal(st.cancelled, before.cancelled + 1);
    assert.ok(st.generated_tokens - before.generated_tokens < 400, 'generation stopped early');
    const r = await client.chat.completions.create(greedy({ max_tokens: 2 }));
    assert.equal(r.usage.completion_tokens, 2);
  });
});

describe('tool-call round trip through the Qwen3 template', () => {
  // Qwen3's template tests '</think>' in message.content: the assistant turn the official client sends
  // back after a tool call has content null, which must render as empty text, not fail the template.
  // the template: the tokenizer cache's (scripts/fetch-tokenizers.sh), else ../shared's copy
  const cache = process.env.HEARTH_CACHE || path.join(os.homedir(), '.cache/hearth');
  const tmplPath = [path.join(cache, 'tokenizers/qwen3/chat_template.jinja'),
    path.join(process.env.HEARTH_SHARED || path.join(here, '../../../shared'), 'data/chat-templates/qwen3.jinja')]
    .find((p) => fs.existsSync(p));
  let s3, dir, c3;
  before(async () => {
    assert.ok(tmplPath, 'no qwen3 chat template (run scripts/fetch-tokenizers.sh)');
    dir = modelWithTemplate('tiny-qwen3', fs.readFileSync(tmplPath, 'utf8'));
    s3 = await startServer(['--model', dir]);
    c3 = new OpenAI({ baseURL: `${s3.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  });
  after(async () => {
    const r = await s3.stop();
    removeModelDir(dir);
    assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
  });
  test('assistant content null + tool_calls, then the tool result: 200, rendered as an empty turn with the call', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const messages = [{ role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' }];
    const r = await c3.chat.completions.create({ model: 'tiny-qwen3', messages, tools, temperature: 0, max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    assert.equal(r.usage.completion_tokens, 2);
    const t = await postJSON(s3, '/tokenize', { model: 'tiny-qwen3', messages, tools });
    assert.equal(t.status, 200, t.text);
    assert.equal(t.body.count, r.usage.prompt_tokens);
    assert.match(t.body.prompt, /<\|im_start\|>assistant\n<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Oslo"\}\}\n<\/tool_call><\|im_end\|>/);
    assert.match(t.body.prompt, /<tool_response>\nsunny, 21 C\n<\/tool_response>/);
    // content left out (OpenAI: optional when tool_calls are given) renders the same
    const m2 = messages.map((m) => (m.role === 'assistant' ? { role: m.role, tool_calls: m.tool_calls } : m));
    const r2 = await c3.chat.completions.create({ model: 'tiny-qwen3', messages: m2, tools, temperature: 0, max_tokens: 2 });
    assert.equal(r2.usage.prompt_tokens, r.usage.prompt_tokens);
  });
});
