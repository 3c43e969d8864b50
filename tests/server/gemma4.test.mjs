// tests/server/gemma4.test.mjs — a Gemma 4 checkpoint served through the official client: a random E-style model
// (PLE, KV sharing) with the real Gemma 4 tokenizer and -it template (make-gemma4-fixture.sh). Random weights: the
// tests check the protocol (shapes, token counts, finish reasons, streaming = non-streaming, the template's
// tool-call and tool-response syntax on the prompt side), never the words.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { FIX, postJSON, requirePrereqs, startServer } from './harness.mjs';

requirePrereqs();
const GEMMA = 'tiny-gemma4';
if (!fs.existsSync(path.join(FIX, GEMMA, 'model.safetensors'))) {
  console.error('FAIL: missing the tiny-gemma4 fixture (tests/server/make-gemma4-fixture.sh)');
  process.exit(1);
}
const { default: OpenAI } = await import('openai');

let srv, client;
before(async () => {
  srv = await startServer(['--model', path.join(FIX, GEMMA)]);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit status ${JSON.stringify(r)}`);
});

const USER = [{ role: 'user', content: 'Write a haiku about the sea.' }];
const greedy = (extra = {}) => ({ model: GEMMA, messages: USER, temperature: 0, max_tokens: 10, ignore_eos: true,
  ...extra });

describe('gemma 4 chat completions', () => {
  test('non-streamed: one choice, usage counts the template-rendered prompt', async () => {
    const r = await client.chat.completions.create(greedy());
    assert.equal(r.model, GEMMA);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 10);
    const t = await postJSON(srv, '/tokenize', { model: GEMMA, messages: USER });
    assert.equal(t.status, 200, t.text);
    assert.equal(r.usage.prompt_tokens, t.body.count);
    /* the -it template: <bos>, a user turn, and the opened model turn (with an empty thought channel when
     * thinking is off) */
    assert.match(t.body.prompt,
      /^<bos><\|turn>user\nWrite a haiku about the sea\.<turn\|>\n<\|turn>model\n<\|channel>thought\n<channel\|>$/);
  });

  test('streamed equals non-streamed (greedy)', async () => {
    const full = await client.chat.completions.create(greedy());
    const s = await client.chat.completions.create({ ...greedy(), stream: true, stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null;
    for await (const c of s) {
      if (c.usage) usage = c.usage;
      if (!c.choices.length) continue;
      if (c.choices[0].delta.content) text += c.choices[0].delta.content;
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    assert.equal(finish, 'length');
    assert.equal(text, full.choices[0].message.content ?? '');
    assert.equal(usage.completion_tokens, 10);
  });

  test('a tool-call round trip renders in Gemma 4 syntax', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const messages = [{ role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' }];
    const r = await client.chat.completions.create(greedy({ tools, messages, max_tokens: 4 }));
    assert.ok(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
    const t = await postJSON(srv, '/tokenize', { model: GEMMA, messages, tools });
    assert.equal(t.status, 200, t.text);
    assert.match(t.body.prompt, /<\|tool>declaration:get_weather\{/);
    assert.match(t.body.prompt, /<\|tool_call>call:get_weather\{city:<\|"\|>Oslo<\|"\|>\}<tool_call\|>/);
    assert.match(t.body.prompt, /<\|tool_response>response:get_weather\{value:<\|"\|>sunny, 21 C<\|"\|>\}<tool_response\|>/);
    assert.equal(r.usage.prompt_tokens, t.body.count);
  });
});
