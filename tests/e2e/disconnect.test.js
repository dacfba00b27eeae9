// A client that goes away mid-request: its request is cancelled and its KV chunks are freed
// within a second.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { startDaemon, MODEL_NAME, scaled, sleep } = require('./lib/daemon');
const { openaiClient } = require('./lib/http');
const { scrape, value, waitIdle } = require('./lib/metrics');

// Long enough to be running for seconds on the CPU: 8 samples of 500 tokens.
const LONG = {
  model: MODEL_NAME,
  prompt: 'Once upon a time',
  max_tokens: 500,
  n: 8,
  temperature: 1,
  seed: 11,
  ignore_eos: true,
};

describe('client disconnect', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon({ args: ['--chunk-size', '16'] });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  // Waits until the request is admitted and holds chunks; returns the metrics then.
  async function waitRunning() {
    const deadline = Date.now() + scaled(5000);
    for (;;) {
      const m = await scrape(d);
      if (value(m, 'banyan_requests_running') === 1 && value(m, 'banyan_kv_chunks_live') > 0) return m;
      assert.ok(Date.now() < deadline, 'the request never showed as running');
      await sleep(5);
    }
  }

  // After the client left: within a second live chunks are back to 0 and the request is
  // counted as cancelled, not finished normally.
  async function assertFreedWithinASecond(before, abortedAt) {
    const limit = scaled(1000);
    let m;
    for (;;) {
      m = await scrape(d);
      const cancelled =
        value(m, 'banyan_requests_cancelled_total') - value(before, 'banyan_requests_cancelled_total');
      if (value(m, 'banyan_kv_chunks_live') === 0 && value(m, 'banyan_requests_running') === 0 && cancelled === 1) {
        break;
      }
      if (Date.now() - abortedAt > limit) {
        assert.fail(
          `${Date.now() - abortedAt} ms after the disconnect: live ${value(m, 'banyan_kv_chunks_live')}, ` +
            `running ${value(m, 'banyan_requests_running')}, cancelled +${cancelled}`,
        );
      }
      await sleep(10);
    }
    const total = value(m, 'banyan_kv_chunks_total');
    assert.equal(value(m, 'banyan_kv_chunks_free') + value(m, 'banyan_kv_chunks_cached'), total);
    // It was cut short: far fewer tokens than the 4000 asked for.
    const generated =
      value(m, 'banyan_generation_tokens_total') - value(before, 'banyan_generation_tokens_total');
    assert.ok(generated < 8 * 500, `generated ${generated} tokens: the request was not cut`);
  }

  test('openai client aborts a streaming completion mid-stream (AbortController)', async () => {
    const before = await waitIdle(d);
    const controller = new AbortController();
    const stream = await client.completions.create({ ...LONG, stream: true }, { signal: controller.signal });
    let chunks = 0;
    let abortedAt = 0;
    let finished = false;
    try {
      for await (const chunk of stream) {
        if (chunk.choices.some((c) => c.finish_reason)) finished = true;
        if (++chunks === 5) {
          await waitRunning();
          abortedAt = Date.now();
          controller.abort();
        }
      }
    } catch (e) {
      // The client ends the iteration quietly or raises its abort error.
      if (!(e.name === 'AbortError' || e.constructor.name === 'APIUserAbortError')) throw e;
    }
    assert.equal(finished, false, 'a choice finished: the request was not long enough');
    assert.ok(abortedAt > 0, 'the stream ended before the client aborted it');
    await assertFreedWithinASecond(before, abortedAt);
  });

  test('raw fetch: the client closes a streaming chat response after the first bytes', async () => {
    const before = await waitIdle(d);
    const controller = new AbortController();
    const r = await fetch(`${d.http}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model: MODEL_NAME,
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
        max_tokens: 450,
        n: 8,
        temperature: 1,
        ignore_eos: true,
        stream: true,
      }),
      signal: controller.signal,
    });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    const first = await reader.read();
    assert.ok(!first.done && first.value.length > 0);
    await waitRunning();
    const abortedAt = Date.now();
    controller.abort();
    await reader.cancel().catch(() => {});
    await assertFreedWithinASecond(before, abortedAt);
  });

  // The connection watches its socket while the answer is pending: a client that closes it
  // cancels its request, streaming or not.
  test(
    'a non-streaming client that disconnects frees its chunks',
    async () => {
      const before = await waitIdle(d);
      const controller = new AbortController();
      const pending = client.completions
        .create(LONG, { signal: controller.signal })
        .then(() => 'completed', (e) => e.constructor.name);
      await waitRunning();
      const abortedAt = Date.now();
      controller.abort();
      assert.equal(await pending, 'APIUserAbortError');
      try {
        await assertFreedWithinASecond(before, abortedAt);
      } finally {
        // Let it end before the next test counts requests.
        const deadline = Date.now() + scaled(30000);
        while (value(await scrape(d), 'banyan_requests_running') > 0 && Date.now() < deadline) {
          await sleep(50);
        }
      }
    },
  );

  test('the server serves normally after the disconnects', async () => {
    const r = await client.completions.create({
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      max_tokens: 16,
      temperature: 0,
    });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 16);
    const m = await waitIdle(d);
    assert.equal(value(m, 'banyan_kv_chunks_live'), 0);
  });
});
