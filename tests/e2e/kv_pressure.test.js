// KV memory pressure: more concurrent work than the KV pool holds. The scheduler must evict
// cached prefixes, preempt by recompute and resume, so every request completes with the output
// it gives alone, and the daemon neither crashes nor stalls.
//
// Both tests guard bugs these loads once hit (each test's comment says which).
'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { startDaemon, MODEL_NAME, scaled } = require('./lib/daemon');
const { post } = require('./lib/http');
const { scrape, value, waitIdle } = require('./lib/metrics');

// 256 chunks of 16 tokens: 4096 token slots.
const SMALL_POOL = ['--chunk-size', '16', '--kv-memory', '5MiB', '--drain-timeout-ms', '1000'];
const BODY = { model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 400, temperature: 0, ignore_eos: true };

async function complete(d, body, timeoutMs) {
  return post(d, '/v1/completions', body, { signal: AbortSignal.timeout(scaled(timeoutMs)) }).catch((e) => ({
    status: `no answer (${e.name})`,
  }));
}

// Two identical greedy requests decode along each other's tokens. This load once split the
// shared node at every step (one chunk per token), ran the pool out, preempted both and never
// re-admitted them (all chunks "cached", none evicted, the engine thread spinning until the
// drain timeout).
test(
  'two identical greedy requests over a small pool complete (preemption recovers)',
  {},
  async (t) => {
    const d = await startDaemon({ args: SMALL_POOL });
    t.after(() => d.kill());
    const [a, b] = await Promise.all([complete(d, BODY, 10000), complete(d, BODY, 10000)]);
    const m = await scrape(d);
    const state =
      `running ${value(m, 'banyan_requests_running')}, waiting ${value(m, 'banyan_requests_waiting')}, ` +
      `free ${value(m, 'banyan_kv_chunks_free')}, cached ${value(m, 'banyan_kv_chunks_cached')}, ` +
      `preemptions ${value(m, 'banyan_preemptions_total')}`;
    assert.equal(a.status, 200, `first: ${a.status}; ${state}`);
    assert.equal(b.status, 200, `second: ${b.status}; ${state}`);
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    const alone = await complete(d, BODY, 15000);
    assert.equal(alone.json.choices[0].text, a.json.choices[0].text);
    await waitIdle(d);
    await d.stop();
  },
);

// 16 distinct greedy prompts of 400 tokens each over the same pool, three rounds. This load
// once aborted the daemon in about half of the runs (an append failed within its reservation).
test(
  '16 concurrent long requests over a small pool: no crash, outputs as alone',
  {},
  async (t) => {
    const d = await startDaemon({ args: SMALL_POOL });
    t.after(() => d.kill());
    const bodies = Array.from({ length: 16 }, (_, i) => ({ ...BODY, prompt: `Once upon a time ${i}` }));
    let outputs;
    for (let round = 0; round < 3; ++round) {
      const rs = await Promise.all(bodies.map((b) => complete(d, b, 30000)));
      assert.ok(d.running, `round ${round}: banyand died (${JSON.stringify(d.exitInfo)})\n${d.tail(5)}`);
      for (const [i, r] of rs.entries()) assert.equal(r.status, 200, `round ${round}, request ${i}: ${r.status}`);
      const texts = rs.map((r) => r.json.choices[0].text);
      if (outputs) assert.deepEqual(texts, outputs, `round ${round}: outputs changed`);
      outputs = texts;
    }
    const m = await waitIdle(d);
    assert.equal(value(m, 'banyan_kv_chunks_live'), 0);
    assert.ok(value(m, 'banyan_preemptions_total') > 0, 'the pool was never short: no preemption tested');
    await d.stop();
  },
);
