// The official `openai` npm client against the real banyand: completions and chat, streaming,
// n > 1, stop strings, seeds, logprobs, usage (with cached prompt tokens) and the model list.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { collectStream, openaiClient, post } = require('./lib/http');
const { STORY } = require('./lib/text');

describe('openai client', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon();
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  // Greedy continuation of a prompt, non-streaming.
  async function greedy(prompt, maxTokens, extra = {}) {
    return client.completions.create({
      model: MODEL_NAME,
      prompt,
      max_tokens: maxTokens,
      temperature: 0,
      ...extra,
    });
  }

  test('completions, non-streaming', async () => {
    const before = Math.floor(Date.now() / 1000);
    const r = await greedy('Once upon a time', 24);
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL_NAME);
    assert.ok(Math.abs(r.created - before) <= 5, `created ${r.created}`);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.finish_reason, 'length');
    // stories260K, greedy: the story every TinyStories model starts with.
    assert.match(c.text, /there was a little/);
    const tok = await post(d, '/tokenize', { prompt: 'Once upon a time' });
    assert.equal(r.usage.prompt_tokens, tok.json.count);
    assert.equal(r.usage.completion_tokens, 24);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
  });

  test('completions, streaming: the chunks add up to the non-streaming text', async () => {
    const whole = await greedy('Once upon a time', 40);
    const stream = await client.completions.create({
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      max_tokens: 40,
      temperature: 0,
      stream: true,
    });
    const got = await collectStream(stream);
    assert.ok(got.chunks > 1, `expected several chunks, got ${got.chunks}`);
    assert.equal(got.texts[0], whole.choices[0].text);
    assert.equal(got.finish[0], 'length');
    assert.equal(got.usage, null, 'usage without include_usage');
  });

  test('completions with echo return the prompt first', async () => {
    const r = await greedy('Once upon a time', 8, { echo: true });
    assert.ok(r.choices[0].text.startsWith('Once upon a time'), r.choices[0].text);
    assert.ok(r.choices[0].text.length > 'Once upon a time'.length);
  });

  const messages = [
    { role: 'system', content: 'You tell short stories for children.' },
    { role: 'user', content: 'Tell me a story about a cat.' },
  ];

  test('chat, non-streaming', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 30,
      temperature: 0,
    });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL_NAME);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(r.choices[0].message.content.length > 0);
    assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 10);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 30);
  });

  test('chat, streaming with include_usage', async () => {
    const whole = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 30,
      temperature: 0,
    });
    const stream = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 30,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let first = true;
    const texts = [];
    let finish = null;
    let usageChunks = 0;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.model, MODEL_NAME);
      if (first) {
        assert.equal(chunk.choices[0].delta.role, 'assistant', 'first delta carries the role');
        first = false;
      }
      if (chunk.usage) {
        ++usageChunks;
        usage = chunk.usage;
        assert.deepEqual(chunk.choices, [], 'the usage chunk has no choices');
      } else {
        assert.equal(chunk.usage, null, 'chunks before the last carry usage: null');
      }
      for (const c of chunk.choices) {
        texts.push(c.delta.content || '');
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(texts.join(''), whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.equal(usageChunks, 1);
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
    assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
    assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  });

  test('n > 1: n choices, each complete, non-streaming and streaming', async () => {
    const r = await client.completions.create({
      model: MODEL_NAME,
      prompt: 'The dog',
      max_tokens: 12,
      temperature: 1,
      seed: 5,
      n: 4,
    });
    assert.equal(r.choices.length, 4);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    for (const c of r.choices) assert.ok(['length', 'stop'].includes(c.finish_reason));
    // Each sample has its own random stream: four samples of 12 tokens are not all the same.
    assert.ok(new Set(r.choices.map((c) => c.text)).size > 1, JSON.stringify(r.choices));
    assert.ok(r.usage.prompt_tokens > 0);
    assert.ok(r.usage.completion_tokens <= 48 && r.usage.completion_tokens >= 4);

    const stream = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 10,
      temperature: 1,
      seed: 9,
      n: 3,
      stream: true,
    });
    const got = await collectStream(stream);
    assert.equal(got.finish.length, 3);
    for (let i = 0; i < 3; ++i) {
      assert.ok(['length', 'stop'].includes(got.finish[i]), `choice ${i}: ${got.finish[i]}`);
      assert.equal(typeof got.texts[i], 'string');
    }
  });

  test('stop strings end the text before the match and are never emitted', async () => {
    const whole = (await greedy('Once upon a time', 60)).choices[0].text;
    // Strings inside the greedy text, one spanning a token boundary ("ttle gi").
    for (const stop of ['little girl', 'ttle gi', 'Lily']) {
      const at = whole.indexOf(stop);
      assert.ok(at > 0, `"${stop}" is not in the greedy text ${JSON.stringify(whole)}`);
      const r = await greedy('Once upon a time', 60, { stop: [stop, 'zzzz'] });
      assert.equal(r.choices[0].text, whole.slice(0, at), `stop "${stop}"`);
      assert.equal(r.choices[0].finish_reason, 'stop');

      const stream = await client.completions.create({
        model: MODEL_NAME,
        prompt: 'Once upon a time',
        max_tokens: 60,
        temperature: 0,
        stop,
        stream: true,
      });
      let text = '';
      let finish = null;
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          text += c.text;
          assert.ok(!text.includes(stop), `streamed text contains the stop string: ${text}`);
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      assert.equal(text, whole.slice(0, at));
      assert.equal(finish, 'stop');
    }
  });

  test('seed: the same seed gives the same text, different seeds differ', async () => {
    const sample = async (seed) =>
      (
        await client.completions.create({
          model: MODEL_NAME,
          prompt: 'One day',
          max_tokens: 32,
          temperature: 1,
          seed,
          ignore_eos: true,
        })
      ).choices[0].text;
    const a = await sample(1234);
    const b = await sample(1234);
    assert.equal(a, b, 'same seed, different text');
    const others = await Promise.all([sample(1), sample(2), sample(3)]);
    for (const o of others) assert.notEqual(o, a, 'a different seed gave the same 32 tokens');
    // And concurrently with other requests, the seed still decides alone.
    const [c] = await Promise.all([sample(1234), sample(77), sample(78)]);
    assert.equal(c, a, 'same seed under concurrent load, different text');
  });

  test('logit_bias: +100 forces a token in completions and chat; logprobs stay the model\'s', async () => {
    // (-100 against the greedy token is checked by id in scheduler_test: text re-tokenized need
    // not give back the ids that were generated.)
    const big = (await post(d, '/tokenize', { prompt: ' big', add_special_tokens: false })).json.tokens;
    assert.equal(big.length, 1, JSON.stringify(big));
    const forced = await greedy('Once upon a time', 4, { logit_bias: { [String(big[0])]: 100 }, logprobs: 1 });
    assert.equal(forced.choices[0].text, ' big'.repeat(4));
    // The log-probabilities are the model's own, not the biased distribution's.
    assert.ok(forced.choices[0].logprobs.token_logprobs[0] < -1, JSON.stringify(forced.choices[0].logprobs));
    const chat = await client.chat.completions.create({
      model: MODEL_NAME,
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 3,
      temperature: 0.8,
      logit_bias: { [String(big[0])]: 100 },
    });
    assert.equal(chat.choices[0].message.content, ' big'.repeat(3));
  });

  test("vLLM's min_tokens: a stop string before min_tokens does not end the text", async () => {
    const plain = await greedy('Once upon a time', 6);
    const stop = [plain.choices[0].text[0]];
    const cut = await greedy('Once upon a time', 6, { stop });
    assert.equal(cut.choices[0].text, '');
    assert.equal(cut.choices[0].finish_reason, 'stop');
    const r = await post(d, '/v1/completions', {
      model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, stop, min_tokens: 3,
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.choices[0].text.startsWith(stop[0]), JSON.stringify(r.json.choices[0]));
    assert.ok(r.json.usage.completion_tokens >= 3, JSON.stringify(r.json.usage));
    const bad = await post(d, '/v1/completions', {
      model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 4, min_tokens: 5,
    });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.param, 'min_tokens');
  });

  test('logprobs: completions shape', async () => {
    const r = await greedy('Once upon a time', 8, { logprobs: 3 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 8);
    assert.equal(lp.token_logprobs.length, 8);
    assert.equal(lp.top_logprobs.length, 8);
    assert.equal(lp.text_offset.length, 8);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 8; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0, `logprob ${lp.token_logprobs[i]}`);
      const top = Object.entries(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 3, `top ${JSON.stringify(top)}`);
      const best = Math.max(...top.map(([, v]) => v));
      // Greedy: the chosen token is the most likely one.
      assert.ok(Math.abs(best - lp.token_logprobs[i]) < 1e-4, `step ${i}`);
      if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    }
  });

  test('logprobs: chat shape with top_logprobs', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 6,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const step of content) {
      assert.equal(typeof step.token, 'string');
      assert.ok(step.logprob <= 0);
      assert.ok(Array.isArray(step.bytes));
      assert.equal(step.top_logprobs.length, 2);
      for (const t of step.top_logprobs) {
        assert.equal(typeof t.token, 'string');
        assert.ok(t.logprob <= 0);
        assert.ok(Array.isArray(t.bytes));
      }
      assert.ok(step.top_logprobs[0].logprob >= step.top_logprobs[1].logprob, 'most likely first');
      assert.ok(Math.abs(step.top_logprobs[0].logprob - step.logprob) < 1e-4, 'greedy picks the top');
    }
    // Without logprobs there are none.
    const plain = await client.chat.completions.create({
      model: MODEL_NAME,
      messages,
      max_tokens: 2,
      temperature: 0,
    });
    assert.equal(plain.choices[0].logprobs, null);
  });

  test('usage: a repeated long prompt reports cached prompt tokens', async () => {
    // A prompt no other test sends, long enough to fill whole KV chunks.
    const prompt = `The blue kite story. ${STORY}`;
    const first = await greedy(prompt, 4);
    const total = first.usage.prompt_tokens;
    assert.ok(total > 128, `prompt_tokens ${total}`);
    // Only a few leading tokens (BOS, "The") can match what earlier tests sent.
    assert.ok(first.usage.prompt_tokens_details.cached_tokens < 8, JSON.stringify(first.usage));
    const second = await greedy(prompt, 4);
    assert.equal(second.usage.prompt_tokens, total);
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    // At least every whole KV chunk of the prompt (64 tokens each by default) is found.
    assert.ok(cached >= total - 64 && cached <= total, `cached ${cached} of ${total}`);
    assert.equal(second.choices[0].text, first.choices[0].text, 'the cache changed the output');
  });

  test('models.list and models.retrieve', async () => {
    const list = [];
    for await (const m of client.models.list()) list.push(m);
    assert.equal(list.length, 1);
    assert.equal(list[0].id, MODEL_NAME);
    assert.equal(list[0].object, 'model');
    assert.equal(list[0].owned_by, 'banyan');
    const one = await client.models.retrieve(MODEL_NAME);
    assert.equal(one.id, MODEL_NAME);
    await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
  });
});
