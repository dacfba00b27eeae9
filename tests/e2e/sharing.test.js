// Prefix sharing: many concurrent streams with one long system prompt give exactly the outputs
// each gives alone (greedy), while /metrics shows the shared prefix stored once.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { startDaemon, MODEL_NAME, sleep } = require('./lib/daemon');
const { collectStream, openaiClient, post } = require('./lib/http');
const { scrape, value, waitIdle } = require('./lib/metrics');
const { STORY } = require('./lib/text');

const CHUNK = 16;
const STREAMS = 16;
const MAX_TOKENS = 40;

const QUESTIONS = [
  'What was the dog called?', 'Where did the ball go?', 'Who helped Tom?', 'Was Tom happy?',
  'What did the lady carry?', 'Where was the pond?', 'What colour was the ball?',
  'Why did Max bark?', 'Tell me more.', 'What happened next?', 'Who found the ball?',
  'What did Tom do then?', 'Was the wind strong?', 'Where did Tom live?',
  'What did they eat?', 'How did it end?',
];

describe('prefix sharing under concurrency', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon({ args: ['--chunk-size', String(CHUNK)] });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  function request(i, user) {
    return client.chat.completions.create({
      model: MODEL_NAME,
      messages: [
        { role: 'system', content: STORY },
        { role: 'user', content: QUESTIONS[i] },
      ],
      max_tokens: MAX_TOKENS,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
      ...(user ? { user } : {}),
    });
  }

  // Runs the STREAMS requests at once while sampling /metrics; returns their outputs and the
  // samples taken while requests ran.
  async function concurrently(user) {
    const samples = [];
    let running = true;
    const sampler = (async () => {
      while (running) {
        const m = await scrape(d);
        if (value(m, 'banyan_requests_running') > 0) samples.push(m);
        await sleep(2);
      }
    })();
    let outputs;
    try {
      outputs = await Promise.all(
        QUESTIONS.map(async (_, i) => collectStream(await request(i, user))),
      );
    } finally {
      running = false;
      await sampler;
    }
    return { outputs, samples };
  }

  async function promptChunks() {
    // The chat prompt of the longest question, in KV chunks.
    const tok = await post(d, '/tokenize', {
      messages: [
        { role: 'system', content: STORY },
        { role: 'user', content: QUESTIONS[0] },
      ],
    });
    assert.equal(tok.status, 200, tok.text);
    assert.ok(tok.json.count > 300, `the shared prompt is only ${tok.json.count} tokens`);
    return { tokens: tok.json.count, chunks: Math.ceil(tok.json.count / CHUNK) };
  }

  // Private chunks a stream may hold beside the shared prefix: its question and output (16 +
  // MAX_TOKENS tokens) and one partly filled chunk at the fork.
  const privatePerSeq = Math.ceil((16 + MAX_TOKENS) / CHUNK) + 1;

  // Checks the samples of a concurrent run: the prefix of `chunks` chunks stored once.
  function assertStoredOnce(samples, tokens, chunks) {
    assert.ok(samples.length > 0, '/metrics never saw a running request');
    const peakLive = Math.max(...samples.map((m) => value(m, 'banyan_kv_chunks_live')));
    const peakSaved = Math.max(...samples.map((m) => value(m, 'banyan_kv_chunks_saved_by_sharing')));
    const minSaved = Math.min(...samples.map((m) => value(m, 'banyan_kv_chunks_saved_by_sharing')));
    const peakSeqs = Math.max(...samples.map((m) => value(m, 'banyan_sequences_running')));
    const detail =
      `prompt ${tokens} tokens = ${chunks} chunks; peak live ${peakLive}, saved ` +
      `${minSaved}..${peakSaved}, peak running sequences ${peakSeqs}, ${samples.length} samples`;
    // Among the samples there was a moment with several sequences running together.
    assert.ok(peakSeqs >= 4, `never more than ${peakSeqs} sequences at once: ${detail}`);
    assert.ok(peakSaved > 0, `no chunks saved by sharing: ${detail}`);
    // A sequence whose path splits mid-chunk holds one partial chunk more than ceil(len / 16),
    // so "saved" may dip below 0 by about one chunk per sequence; never by more.
    assert.ok(minSaved >= -peakSeqs, `sharing "saved" a negative number of chunks: ${detail}`);
    // Each running sequence would need `chunks` chunks alone; stored once, the shared prefix
    // costs `chunks` chunks in all plus a few private chunks per sequence (question, 40 tokens,
    // a partly filled chunk at the fork).
    assert.ok(
      peakLive <= chunks + STREAMS * privatePerSeq,
      `live chunks ${peakLive} > one prefix + ${privatePerSeq} private chunks per stream: ${detail}`,
    );
    assert.ok(peakLive < (peakSeqs * chunks) / 2, `prefix not shared: ${detail}`);
  }

  test('16 concurrent streams give the outputs each gives alone; the prefix is stored once', async () => {
    const { tokens, chunks } = await promptChunks();
    // Alone, one after another, each in its own cache namespace (`user` splits the prefix
    // cache), so the concurrent run below starts from a cold cache and must share the prefix
    // among the running streams themselves.
    const alone = [];
    for (let i = 0; i < STREAMS; ++i) {
      const r = await collectStream(await request(i, `alone-${i}`));
      assert.ok(r.texts[0].length > 0, `request ${i} alone gave no text`);
      alone.push(r);
    }
    // The counters are published at the end of the engine iteration that finished the last
    // request, which can come after its client read [DONE]: wait for that state, not for time.
    const before = await waitIdle(d);
    const { outputs, samples } = await concurrently('together');
    for (let i = 0; i < STREAMS; ++i) {
      assert.equal(outputs[i].texts[0], alone[i].texts[0], `request ${i}: concurrent != alone`);
      assert.equal(outputs[i].finish[0], alone[i].finish[0], `request ${i}: finish reason`);
      assert.equal(outputs[i].usage.completion_tokens, alone[i].usage.completion_tokens);
      assert.equal(outputs[i].usage.prompt_tokens, alone[i].usage.prompt_tokens);
    }
    assertStoredOnce(samples, tokens, chunks);

    const afterRun = await waitIdle(d);
    assert.equal(value(afterRun, 'banyan_kv_chunks_live'), 0);
    assert.equal(
      value(afterRun, 'banyan_requests_finished_total') - value(before, 'banyan_requests_finished_total'),
      STREAMS,
    );
  });

  // A sequence whose next tokens follow a cached continuation (the same greedy request again)
  // once split the cached node at every step, holding one chunk per generated token (peak
  // banyan_kv_chunks_live 398 where 26 suffice) so that "saved by sharing" went negative.
  test(
    'warm cache: the same 16 streams again share the cached prefix and continuations',
    {},
    async () => {
      const { tokens, chunks } = await promptChunks();
      // 'together' cached prompt and outputs above (the test before this one ran them).
      const first = await concurrently('warm');
      const { outputs } = await concurrently('warm');
      for (let i = 0; i < STREAMS; ++i) {
        assert.equal(outputs[i].texts[0], first.outputs[i].texts[0], `request ${i}`);
        assert.ok(
          outputs[i].usage.prompt_tokens_details.cached_tokens >= tokens - CHUNK,
          `request ${i}: ${JSON.stringify(outputs[i].usage)}`,
        );
      }
      // Stored once: read from the daemon's high-water mark of live chunks, not from samples (a
      // warm run can end between two scrapes on a loaded machine). The mark covers this run and
      // the ones before it, so it bounds this run's peak from above; the bug above (a chunk per
      // generated token) would push it far past the bound.
      const m = await waitIdle(d);
      const peak = value(m, 'banyan_kv_chunks_live_peak');
      assert.ok(
        peak <= chunks + STREAMS * privatePerSeq,
        `live chunks peaked at ${peak} > one prefix of ${chunks} + ${privatePerSeq} private per stream`,
      );
    },
  );
});
