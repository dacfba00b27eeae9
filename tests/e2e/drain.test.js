// SIGTERM during generation: /ready flips to 503 at once, new requests get 503, running ones
// complete (or are cut at the drain timeout), and the process exits 0.
'use strict';

const assert = require('node:assert/strict');
const { describe, test } = require('node:test');
const OpenAI = require('openai');
const { startDaemon, MODEL_NAME, scaled, sleep } = require('./lib/daemon');
const { assertErrorBody, openaiClient, post, startStream } = require('./lib/http');
const { scrape, value } = require('./lib/metrics');

// Polls /ready until it answers `status`; returns the milliseconds it took.
async function waitReadyStatus(d, status, limitMs) {
  const t0 = Date.now();
  for (;;) {
    const r = await d.get('/ready');
    const text = await r.text();
    if (r.status === status) {
      if (status === 503) assertErrorBody(JSON.parse(text), '/ready while draining');
      return Date.now() - t0;
    }
    assert.ok(Date.now() - t0 < limitMs, `/ready still ${r.status} after ${limitMs} ms`);
    await sleep(5);
  }
}

describe('SIGTERM drain', () => {
  test('running streams complete, new requests get 503, exit 0', async (t) => {
    const d = await startDaemon({ args: ['--drain-timeout-ms', '60000'] });
    t.after(() => d.kill());
    const client = openaiClient(d);
    const body = {
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      max_tokens: 400,
      n: 4,
      temperature: 1,
      seed: 3,
      ignore_eos: true,
    };
    const streams = [0, 1, 2, 3].map((i) => startStream(client, { ...body, seed: i }));
    await Promise.all(streams.map((s) => s.firstChunk));
    // SIGTERM as soon as every stream has its first chunk (a scrape first would let a loaded
    // machine finish the streams before the signal); then they must still be running, drained.
    const sigtermAt = Date.now();
    d.signal('SIGTERM');
    const m = await scrape(d);
    assert.equal(value(m, 'banyan_requests_running') + value(m, 'banyan_requests_waiting'), 4,
      'the streams should all be running while the drain waits for them');
    const readyMs = await waitReadyStatus(d, 503, scaled(1000));
    t.diagnostic(`/ready answered 503 ${readyMs} ms after SIGTERM`);

    // New requests are refused with 503 and an OpenAI error, over the client and raw HTTP.
    await assert.rejects(
      client.completions.create({ model: MODEL_NAME, prompt: 'Hello', max_tokens: 4 }),
      (e) => e instanceof OpenAI.APIError && e.status === 503 && typeof e.error?.message === 'string',
    );
    const raw = await post(d, '/v1/chat/completions', {
      model: MODEL_NAME,
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 4,
    });
    assert.equal(raw.status, 503, raw.text);
    assertErrorBody(raw.json, 'chat while draining');
    // Liveness stays up while draining.
    assert.equal((await d.get('/health')).status, 200);
    assert.ok(d.running, 'the daemon exited while streams were running');

    const results = await Promise.all(streams.map((s) => s.done));
    for (const [i, r] of results.entries()) {
      assert.deepEqual(r.finish, ['length', 'length', 'length', 'length'], `stream ${i}`);
      assert.equal(r.usage.completion_tokens, 4 * 400, `stream ${i}`);
      assert.ok(r.endedAt > sigtermAt);
    }
    const exit = await d.waitExit(30000);
    assert.deepEqual(exit, { code: 0, signal: null }, d.tail());
    assert.match(d.log, /draining/);
  });

  test('drain timeout: very long requests are cut, streams end, exit 0', async (t) => {
    const d = await startDaemon({ args: ['--drain-timeout-ms', '200'] });
    t.after(() => d.kill());
    const client = openaiClient(d);
    const body = {
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      max_tokens: 500,
      n: 16,
      temperature: 1,
      ignore_eos: true,
    };
    const streams = [0, 1, 2].map((i) => startStream(client, { ...body, seed: i }));
    // And one non-streaming request: its answer must come too.
    const plain = client.completions.create({ ...body, n: 8 });
    await Promise.all(streams.map((s) => s.firstChunk));
    const sigtermAt = Date.now();
    d.signal('SIGTERM');

    const results = await Promise.all(streams.map((s) => s.done));
    for (const [i, r] of results.entries()) {
      assert.equal(r.finish.filter(Boolean).length, 16, `stream ${i}: every choice ends`);
      assert.ok(r.finish.includes('abort'), `stream ${i}: nothing was cut: ${r.finish}`);
      assert.ok(r.endedAt - sigtermAt < scaled(5000), `stream ${i} ended ${r.endedAt - sigtermAt} ms after SIGTERM`);
    }
    const p = await plain;
    assert.equal(p.choices.length, 8);
    assert.ok(p.choices.some((c) => c.finish_reason === 'abort'), JSON.stringify(p.choices.map((c) => c.finish_reason)));
    const exit = await d.waitExit(10000);
    assert.deepEqual(exit, { code: 0, signal: null }, d.tail());
    t.diagnostic(`exited ${Date.now() - sigtermAt} ms after SIGTERM`);
  });

  test('SIGTERM when idle exits 0 at once', async (t) => {
    const d = await startDaemon();
    t.after(() => d.kill());
    const t0 = Date.now();
    await d.stop(10000);
    assert.ok(Date.now() - t0 < scaled(5000), `took ${Date.now() - t0} ms`);
  });
});
