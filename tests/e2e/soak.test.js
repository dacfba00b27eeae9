// Soak: a few hundred mixed requests over both front ends (greedy and sampled, streaming,
// cancelled midway, deadlines, bad input, shared prefixes, n > 1). Afterwards: no crash, no
// leaked chunks (the pool back to the cached-only state: live 0, free + cached == total),
// nothing running, greedy outputs unchanged, and a clean exit 0 (under ASan: no leaks).
//
// Two runs of the same mix:
//  - with the default KV budget (256 MiB): the prefix cache never fills;
//  - with 12 MiB, which the mix fills with cached prefixes, so admission and decoding must
//    evict and preempt (the run where appends once failed within their reservations).
//
// Bounded in work and in time: each run issues E2E_SOAK_JOBS jobs (default 500), and stops early
// after E2E_SOAK_SECONDS (default 30) seconds times E2E_TIME_SCALE; at least 100 of them (or all,
// if fewer) must have completed by then. That bound only catches a daemon that stopped making
// progress, so the file runs beside other tests. E2E_SOAK_SEED changes the mix.
'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const OpenAI = require('openai');
const { startDaemon, MODEL_NAME, scaled, sleep } = require('./lib/daemon');
const g = require('./lib/grpc');
const { assertErrorBody, collectStream, openaiClient, post } = require('./lib/http');
const { scrape, total, value } = require('./lib/metrics');
const { STORY } = require('./lib/text');

const JOBS = Number(process.env.E2E_SOAK_JOBS || 500);
const SECONDS = Number(process.env.E2E_SOAK_SECONDS || 30);
const WORKERS = 16;

// A small deterministic PRNG (mulberry32), so a failing mix can be replayed.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const GREEDY_PROMPTS = ['Once upon a time', 'The little cat', `${STORY.slice(0, 300)} Then`];

test('soak: mixed requests over HTTP and gRPC, then no leaked chunks and a clean exit', async (t) => {
  await soak(t, '256MiB');
});

test(
  'soak with a KV pool that fills with cached prefixes (eviction)',
  {},
  async (t) => {
    await soak(t, '12MiB');
  },
);

async function soak(t, kvMemory) {
  const seed = Number(process.env.E2E_SOAK_SEED || 20261130);
  t.diagnostic(`seed ${seed}, ${JOBS} jobs, ${scaled(SECONDS * 1000) / 1000} s, ${WORKERS} workers, KV ${kvMemory}`);
  const d = await startDaemon({
    args: ['--chunk-size', '16', '--kv-memory', kvMemory, '--max-batch', '16', '--queue-limit', '64'],
  });
  t.after(() => d.kill());
  const client = openaiClient(d);
  const rpc = g.clients(d);
  t.after(() => rpc.close());

  // Reference greedy outputs, each alone.
  const reference = [];
  for (const prompt of GREEDY_PROMPTS) {
    const r = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: 48, temperature: 0, ignore_eos: true });
    reference.push(r.choices[0].text);
  }

  const random = rng(seed);
  const pick = (xs) => xs[Math.floor(random() * xs.length)];
  const counts = {};
  const count = (k) => {
    counts[k] = (counts[k] || 0) + 1;
  };

  // Each job sends one request and checks its answer; a 429 (queue full) is an accepted answer.
  const kinds = {
    async httpGreedy() {
      const i = Math.floor(random() * GREEDY_PROMPTS.length);
      const stream = random() < 0.5;
      const body = { model: MODEL_NAME, prompt: GREEDY_PROMPTS[i], max_tokens: 48, temperature: 0, ignore_eos: true };
      const text = stream
        ? (await collectStream(await client.completions.create({ ...body, stream: true }))).texts[0]
        : (await client.completions.create(body)).choices[0].text;
      assert.equal(text, reference[i], `greedy output of prompt ${i} changed under load`);
    },
    async httpSampled() {
      const n = 1 + Math.floor(random() * 4);
      const r = await client.completions.create({
        model: MODEL_NAME, prompt: pick(['One day', 'Tom had a dog', 'The sun']), n,
        max_tokens: 20 + Math.floor(random() * 200), temperature: 1, seed: Math.floor(random() * 1e6),
      });
      assert.equal(r.choices.length, n);
      for (const c of r.choices) assert.ok(['length', 'stop'].includes(c.finish_reason), c.finish_reason);
    },
    async httpChatStream() {
      const got = await collectStream(
        await client.chat.completions.create({
          model: MODEL_NAME,
          messages: [{ role: 'system', content: STORY }, { role: 'user', content: pick(['Why?', 'Who?', 'And then?']) }],
          max_tokens: 10 + Math.floor(random() * 100),
          temperature: random() < 0.5 ? 0 : 0.8,
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
      assert.ok(['length', 'stop'].includes(got.finish[0]), String(got.finish[0]));
      assert.ok(got.usage && got.usage.completion_tokens >= 1);
    },
    async httpStreamCancelled() {
      const controller = new AbortController();
      const after = 1 + Math.floor(random() * 20);
      const stream = await client.completions.create(
        { model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 400, n: 1 + Math.floor(random() * 3), temperature: 1, ignore_eos: true, stream: true },
        { signal: controller.signal },
      );
      let chunks = 0;
      try {
        for await (const chunk of stream) {
          assert.ok(Array.isArray(chunk.choices));
          if (++chunks === after) controller.abort();
        }
      } catch (e) {
        if (e.constructor.name !== 'APIUserAbortError' && e.name !== 'AbortError') throw e;
      }
    },
    async grpcGreedy() {
      const i = Math.floor(random() * GREEDY_PROMPTS.length);
      const r = await g.generate(rpc.generation, { text: GREEDY_PROMPTS[i], sampling: { max_tokens: 48, temperature: 0, ignore_eos: true } });
      assert.equal(r.choices[0].text, reference[i], `gRPC greedy output of prompt ${i} changed under load`);
    },
    async grpcCancelled() {
      const after = 1 + Math.floor(random() * 10);
      let m = 0;
      await assert.rejects(
        g.generate(
          rpc.generation,
          { text: 'Lily', sampling: { max_tokens: 450, n: 1 + Math.floor(random() * 3), ignore_eos: true } },
          { onResponse: (_, call) => ++m === after && call.cancel() },
        ),
        (e) => e.code === g.status.CANCELLED || e.code === g.status.RESOURCE_EXHAUSTED,
      );
    },
    async grpcDeadline() {
      await g
        .generate(rpc.generation, { text: 'Ben', sampling: { max_tokens: 400, n: 2, ignore_eos: true } }, { deadlineMs: 20 + Math.floor(random() * 200) })
        .then(
          () => count('deadline-not-reached'),
          (e) => assert.ok([g.status.DEADLINE_EXCEEDED, g.status.RESOURCE_EXHAUSTED].includes(e.code), `${e.code} ${e.details}`),
        );
    },
    async httpBad() {
      const bad = pick([
        ['{"prompt": "x", ', 400],
        [JSON.stringify({ model: MODEL_NAME, prompt: 'x', max_tokens: 'ten' }), 400],
        [JSON.stringify({ model: 'nope', prompt: 'x' }), 404],
        [JSON.stringify({ model: MODEL_NAME, prompt: STORY, max_tokens: 400 }), 400],
        [JSON.stringify({ model: MODEL_NAME, prompt: '' }), 400],
        [JSON.stringify({ model: MODEL_NAME, prompt: 'x', n: 99 }), 400],
        [Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0x80]), Buffer.from('"}')]), 400],
      ]);
      const r = await post(d, pick(['/v1/completions', '/v1/completions', '/v1/chat/completions']), bad[0]);
      // The chat endpoint has no "prompt": a bad body there is a 400 (or the model's 404).
      assert.ok(r.status === bad[1] || (r.status === 400 && bad[1] !== 404), `${r.status} ${r.text}`);
      assertErrorBody(r.json, 'bad request');
    },
    async grpcBad() {
      const req = pick([
        { text: '' },
        { model: 'nope', text: 'x' },
        { text: 'x', sampling: { n: 0 } },
        { token_ids: { ids: [1, 99999] } },
        { text: STORY, sampling: { max_tokens: 400 } },
      ]);
      await assert.rejects(g.generate(rpc.generation, req), (e) =>
        [g.status.INVALID_ARGUMENT, g.status.NOT_FOUND].includes(e.code),
      );
    },
    async misc() {
      const which = pick(['tokenize', 'models', 'metrics', 'grpcTokenize']);
      if (which === 'tokenize') assert.equal((await post(d, '/tokenize', { prompt: STORY })).status, 200);
      if (which === 'models') assert.equal((await client.models.list()).data.length, 1);
      if (which === 'metrics') value(await scrape(d), 'banyan_kv_chunks_total');
      if (which === 'grpcTokenize') assert.ok((await g.unary(rpc.generation, 'Tokenize', { text: STORY })).token_ids.length > 100);
    },
  };
  const weights = {
    httpGreedy: 3, httpSampled: 3, httpChatStream: 3, httpStreamCancelled: 3, grpcGreedy: 3,
    grpcCancelled: 3, grpcDeadline: 1, httpBad: 3, grpcBad: 2, misc: 2,
  };
  const bag = Object.entries(weights).flatMap(([k, w]) => Array(w).fill(k));
  const plan = Array.from({ length: JOBS }, () => pick(bag));

  const failures = [];
  const stopAt = Date.now() + scaled(SECONDS * 1000);
  let next = 0;
  let peakLive = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peakLive = Math.max(peakLive, value(await scrape(d), 'banyan_kv_chunks_live'));
      await sleep(100);
    }
  })();
  await Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (next < plan.length && Date.now() < stopAt && failures.length < 5) {
        const kind = plan[next++];
        try {
          await kinds[kind]();
          count(kind);
        } catch (e) {
          if ((e instanceof OpenAI.RateLimitError) || e.code === g.status.RESOURCE_EXHAUSTED) {
            count('429');
          } else {
            failures.push(`${kind}: ${e.stack || e}`);
          }
        }
      }
    }),
  );
  sampling = false;
  await sampler;
  const done = Object.entries(counts).reduce((s, [, v]) => s + v, 0);
  t.diagnostic(`${next} jobs issued; outcomes ${JSON.stringify(counts)}; peak live chunks ${peakLive}`);
  if (!d.running || failures.length > 0) {
    assert.fail(
      `${failures.length} jobs failed; banyand ${d.running ? 'runs' : `died: ${JSON.stringify(d.exitInfo)}`}\n` +
        `--- banyand's last lines:\n${d.tail(15)}\n--- first failures:\n${failures.slice(0, 3).join('\n')}`,
    );
  }
  assert.ok(done >= Math.min(JOBS, 100), `only ${done} jobs completed in ${scaled(SECONDS * 1000) / 1000} s`);

  // Quiescence: cancelled requests leave within a moment.
  let m;
  const deadline = Date.now() + scaled(5000);
  for (;;) {
    m = await scrape(d);
    if (value(m, 'banyan_requests_running') === 0 && value(m, 'banyan_requests_waiting') === 0) break;
    assert.ok(Date.now() < deadline, 'requests still running 5 s after the last job');
    await sleep(20);
  }
  assert.equal(value(m, 'banyan_kv_chunks_live'), 0, 'leaked live chunks');
  assert.equal(value(m, 'banyan_sequences_running'), 0);
  assert.equal(
    value(m, 'banyan_kv_chunks_free') + value(m, 'banyan_kv_chunks_cached'),
    value(m, 'banyan_kv_chunks_total'),
    'free + cached != total',
  );
  assert.equal(value(m, 'banyan_requests_failed_total'), 0, 'requests failed inside the server');
  assert.ok(value(m, 'banyan_requests_cancelled_total') > 0, 'no request was cancelled');
  t.diagnostic(
    `chunks: total ${value(m, 'banyan_kv_chunks_total')}, cached ${value(m, 'banyan_kv_chunks_cached')}; ` +
      `preemptions ${value(m, 'banyan_preemptions_total')}, cancelled ${value(m, 'banyan_requests_cancelled_total')}, ` +
      `rejected ${total(m, 'banyan_requests_rejected_total')}, finished ${value(m, 'banyan_requests_finished_total')}`,
  );

  // Still serving, and the greedy outputs are what they were.
  const r = await client.completions.create({ model: MODEL_NAME, prompt: GREEDY_PROMPTS[0], max_tokens: 48, temperature: 0, ignore_eos: true });
  assert.equal(r.choices[0].text, reference[0]);
  assert.equal((await d.get('/health')).status, 200);

  await d.stop(30000);
  assert.doesNotMatch(d.log, /AddressSanitizer|LeakSanitizer|runtime error:|check failed|Assertion .* failed/i);
}
