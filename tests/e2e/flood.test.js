// A flood of concurrent requests against a small queue: the excess is refused at once with
// HTTP 429 and an OpenAI error body, and every accepted request completes correctly.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const OpenAI = require('openai');
const { startDaemon, MODEL_NAME, scaled } = require('./lib/daemon');
const { collectStream, openaiClient } = require('./lib/http');
const { scrape, total, value, waitIdle } = require('./lib/metrics');

const FLOOD = 40;
const PROMPTS = ['Once upon a time', 'The little dog', 'One day', 'Lily and Ben', 'The sun was'];
const MAX_TOKENS = 150;

describe('queue flood', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon({ args: ['--queue-limit', '4', '--max-batch', '2'] });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  const body = (i) => ({
    model: MODEL_NAME,
    prompt: PROMPTS[i % PROMPTS.length],
    max_tokens: MAX_TOKENS,
    temperature: 0,
    ignore_eos: true,
  });

  test(`${FLOOD} concurrent requests: 429s with an OpenAI error, the accepted ones complete`, async (t) => {
    // Each prompt's greedy text, one at a time.
    const expected = [];
    for (let i = 0; i < PROMPTS.length; ++i) {
      expected.push((await client.completions.create(body(i))).choices[0].text);
    }
    const before = await waitIdle(d);

    const results = await Promise.all(
      Array.from({ length: FLOOD }, async (_, i) => {
        const started = Date.now();
        try {
          // Every other request streams: refusal happens before the stream starts.
          let text;
          let finish;
          if (i % 2 === 0) {
            const r = await client.completions.create(body(i));
            text = r.choices[0].text;
            finish = r.choices[0].finish_reason;
          } else {
            const got = await collectStream(await client.completions.create({ ...body(i), stream: true }));
            text = got.texts[0];
            finish = got.finish[0];
          }
          return { i, ok: true, text, finish };
        } catch (e) {
          return { i, ok: false, error: e, ms: Date.now() - started };
        }
      }),
    );

    const accepted = results.filter((r) => r.ok);
    const refused = results.filter((r) => !r.ok);
    const summary = `${accepted.length} accepted, ${refused.length} refused`;
    t.diagnostic(summary);
    for (const r of refused) {
      const e = r.error;
      assert.ok(e instanceof OpenAI.RateLimitError, `request ${r.i}: ${e.constructor.name} ${e.status} ${e.message}`);
      assert.equal(e.status, 429);
      // The OpenAI error body, as the client parsed it.
      assert.equal(typeof e.error.message, 'string');
      assert.ok(e.error.message.length > 0);
      assert.equal(typeof e.error.type, 'string');
      assert.ok('param' in e.error && 'code' in e.error, JSON.stringify(e.error));
      assert.ok(e.headers.get('retry-after'), 'a 429 carries Retry-After');
      // Refused at once, not after waiting for a place.
      assert.ok(r.ms < scaled(2000), `request ${r.i} was refused after ${r.ms} ms`);
    }
    assert.ok(refused.length > 0, `no request was refused: ${summary}`);
    // 2 running + 4 waiting fit at any moment.
    assert.ok(accepted.length >= 6, `fewer than 6 accepted: ${summary}`);
    for (const r of accepted) {
      assert.equal(r.finish, 'length', `request ${r.i}`);
      assert.equal(r.text, expected[r.i % PROMPTS.length], `request ${r.i}: text differs from alone`);
    }

    const m = await waitIdle(d);
    const delta = (name) => value(m, name) - value(before, name);
    const rejected = (x) => total(x, 'banyan_requests_rejected_total', { reason: 'queue_full' });
    assert.equal(rejected(m) - rejected(before), refused.length);
    assert.equal(delta('banyan_requests_finished_total'), accepted.length);
    assert.equal(value(m, 'banyan_requests_running'), 0);
    assert.equal(value(m, 'banyan_requests_waiting'), 0);
    assert.equal(value(m, 'banyan_kv_chunks_live'), 0);
  });

  test('after the flood a request is accepted again', async () => {
    const r = await client.completions.create({ ...body(0), max_tokens: 8 });
    assert.equal(r.usage.completion_tokens, 8);
  });
});
