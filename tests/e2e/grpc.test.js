// banyan.v1.Generation and grpc.health.v1.Health with a real gRPC client (@grpc/grpc-js), and
// our C++ banyan-grpc-client once.
'use strict';

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const { after, before, describe, test } = require('node:test');
const { promisify } = require('node:util');
const { startDaemon, GRPC_CLIENT, MODEL_NAME, scaled, sleep } = require('./lib/daemon');
const g = require('./lib/grpc');
const { post } = require('./lib/http');
const { scrape, value, waitIdle } = require('./lib/metrics');

const PROMPT = 'Once upon a time';
// Runs for seconds: 8 samples of 500 tokens.
const LONG = { text: PROMPT, sampling: { max_tokens: 500, n: 8, temperature: 1, seed: 4, ignore_eos: true } };

describe('gRPC Generation', () => {
  let d;
  let rpc;
  let httpGreedy; // the HTTP API's greedy completion of PROMPT, 24 tokens

  before(async () => {
    d = await startDaemon({ args: ['--chunk-size', '16'] });
    rpc = g.clients(d);
    const r = await post(d, '/v1/completions', { model: MODEL_NAME, prompt: PROMPT, max_tokens: 24, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    httpGreedy = r.json;
  });
  after(async () => {
    if (rpc) rpc.close();
    if (d) await d.stop();
  });

  const greedy = { max_tokens: 24, temperature: 0 };

  test('Generate by text: greedy equals the HTTP result; stream shape and usage', async () => {
    const r = await g.generate(rpc.generation, { model: MODEL_NAME, text: PROMPT, sampling: greedy });
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.text, httpGreedy.choices[0].text);
    assert.equal(c.finish_reason, 'FINISH_REASON_LENGTH');
    assert.equal(c.token_ids.length, 24);
    assert.deepEqual(c.logprobs, [], 'no logprobs unless asked');
    assert.ok(r.responses.length >= 2, 'streamed in several messages');
    assert.equal(r.requestIds.size, 1, 'one request id in every message');
    assert.ok([...r.requestIds][0].length > 0);
    const last = r.responses[r.responses.length - 1];
    assert.ok(last.usage, 'the last message carries usage');
    assert.deepEqual(last.choices, [], 'the usage message carries no choices');
    assert.equal(r.responses.filter((x) => x.usage).length, 1);
    assert.equal(r.usage.prompt_tokens, httpGreedy.usage.prompt_tokens);
    assert.equal(r.usage.completion_tokens, 24);
    // The HTTP request before cached the same prompt.
    assert.ok(r.usage.cached_prompt_tokens > 0);
  });

  test('Generate by token ids gives the same tokens as by text; a client request_id is echoed', async () => {
    const tok = await g.unary(rpc.generation, 'Tokenize', { text: PROMPT });
    const byText = await g.generate(rpc.generation, { text: PROMPT, sampling: greedy });
    const byIds = await g.generate(rpc.generation, {
      token_ids: { ids: tok.token_ids },
      sampling: greedy,
      request_id: 'e2e-by-ids.1',
    });
    assert.deepEqual(byIds.choices[0].token_ids, byText.choices[0].token_ids);
    assert.equal(byIds.choices[0].text, byText.choices[0].text);
    assert.deepEqual([...byIds.requestIds], ['e2e-by-ids.1']);
    assert.equal(byIds.usage.prompt_tokens, tok.token_ids.length);
  });

  test('n > 1 with a seed: n complete choices, reproducible, the same as over HTTP', async () => {
    const req = { text: PROMPT, sampling: { max_tokens: 16, temperature: 1, n: 3, seed: '42', ignore_eos: true } };
    const a = await g.generate(rpc.generation, req);
    const b = await g.generate(rpc.generation, req);
    assert.equal(a.choices.length, 3);
    for (let i = 0; i < 3; ++i) {
      assert.equal(a.choices[i].finish_reason, 'FINISH_REASON_LENGTH');
      assert.equal(a.choices[i].token_ids.length, 16);
      assert.deepEqual(a.choices[i].token_ids, b.choices[i].token_ids, `choice ${i} with the same seed`);
    }
    assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, 'the samples are not all the same');
    assert.equal(a.usage.completion_tokens, 48);
    const http = await post(d, '/v1/completions', {
      model: MODEL_NAME, prompt: PROMPT, max_tokens: 16, temperature: 1, n: 3, seed: 42, ignore_eos: true,
    });
    assert.deepEqual(http.json.choices.map((c) => c.text), a.choices.map((c) => c.text));
  });

  test('logprobs and stop strings', async () => {
    const r = await g.generate(rpc.generation, { text: PROMPT, sampling: { ...greedy, logprobs: 3 } });
    const c = r.choices[0];
    assert.equal(c.logprobs.length, c.token_ids.length);
    for (const [i, step] of c.logprobs.entries()) {
      assert.equal(step.token.token_id, c.token_ids[i]);
      assert.ok(step.token.logprob <= 0);
      assert.equal(step.top.length, 3);
      assert.equal(step.top[0].token_id, step.token.token_id, 'greedy takes the most likely token');
    }
    const whole = c.text;
    const stop = 'little';
    const at = whole.indexOf(stop);
    assert.ok(at > 0, whole);
    const s = await g.generate(rpc.generation, { text: PROMPT, sampling: { ...greedy, stop: [stop] } });
    assert.equal(s.choices[0].text, whole.slice(0, at));
    assert.equal(s.choices[0].finish_reason, 'FINISH_REASON_STOP');
  });

  test('cancelling mid-stream frees the chunks at once', async () => {
    const before = await waitIdle(d);
    let cancelledAt = 0;
    let messages = 0;
    await assert.rejects(
      g.generate(rpc.generation, LONG, {
        onResponse: (resp, call) => {
          if (++messages === 3) {
            cancelledAt = Date.now();
            call.cancel();
          }
        },
      }),
      (e) => e.code === g.status.CANCELLED,
    );
    await assertFreed(before, cancelledAt, 'cancel');
  });

  test('a deadline that passes cancels the request: DEADLINE_EXCEEDED, chunks freed', async () => {
    const before = await waitIdle(d);
    const start = Date.now();
    await assert.rejects(g.generate(rpc.generation, LONG, { deadlineMs: 300 }), (e) => e.code === g.status.DEADLINE_EXCEEDED);
    await assertFreed(before, start + 300, 'deadline');
  });

  // Within a second of `since`: no live chunks, nothing running, one more cancelled request.
  async function assertFreed(before, since, what) {
    assert.ok(since > 0, `${what}: the stream ended before it could be cut`);
    for (;;) {
      const m = await scrape(d);
      const cancelled =
        value(m, 'banyan_requests_cancelled_total') - value(before, 'banyan_requests_cancelled_total');
      const live = value(m, 'banyan_kv_chunks_live');
      const running = value(m, 'banyan_requests_running');
      if (live === 0 && running === 0 && cancelled === 1) {
        const generated =
          value(m, 'banyan_generation_tokens_total') - value(before, 'banyan_generation_tokens_total');
        assert.ok(generated < 8 * 500, `${what}: all ${generated} tokens were generated`);
        return;
      }
      assert.ok(
        Date.now() - since < scaled(1000),
        `${what}: after ${Date.now() - since} ms live ${live}, running ${running}, cancelled +${cancelled}`,
      );
      await sleep(10);
    }
  }

  test('Tokenize and Detokenize agree with HTTP /tokenize', async () => {
    const t = await g.unary(rpc.generation, 'Tokenize', { text: PROMPT });
    const http = await post(d, '/tokenize', { prompt: PROMPT });
    assert.deepEqual(t.token_ids, http.json.tokens);
    assert.equal(t.pieces.length, t.token_ids.length);
    assert.equal(t.max_context_length, 512);
    const noBos = await g.unary(rpc.generation, 'Tokenize', { text: PROMPT, add_bos: false });
    assert.deepEqual(noBos.token_ids, t.token_ids.slice(1));
    const back = await g.unary(rpc.generation, 'Detokenize', { token_ids: noBos.token_ids });
    assert.equal(back.text.trim(), PROMPT);
  });

  test('ListModels', async () => {
    const r = await g.unary(rpc.generation, 'ListModels', {});
    assert.equal(r.models.length, 1);
    const m = r.models[0];
    assert.equal(m.id, MODEL_NAME);
    assert.equal(m.max_context_length, 512);
    assert.equal(m.vocab_size, 512);
    assert.equal(m.owned_by, 'banyan');
    assert.ok(m.bos_token_id >= 0 && m.eos_token_id >= 0);
  });

  test('Health: SERVING for the server and the service, NOT_FOUND for others', async () => {
    assert.equal((await g.unary(rpc.health, 'Check', { service: '' })).status, 'SERVING');
    assert.equal((await g.unary(rpc.health, 'Check', { service: 'banyan.v1.Generation' })).status, 'SERVING');
    await assert.rejects(g.unary(rpc.health, 'Check', { service: 'no.such.Service' }), (e) => e.code === g.status.NOT_FOUND);
  });

  test('our C++ banyan-grpc-client', async (t) => {
    if (!fs.existsSync(GRPC_CLIENT)) {
      t.skip(`banyan-grpc-client not found at ${GRPC_CLIENT} (set GRPC_CLIENT)`);
      return;
    }
    const run = (args) => promisify(execFile)(GRPC_CLIENT, ['--addr', d.grpcAddr, ...args], { timeout: scaled(30000) });
    const gen = await run(['--prompt', PROMPT, '--max-tokens', '24', '--temperature', '0', '--jsonl']);
    const lines = gen.stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.length, 2, gen.stdout);
    assert.equal(lines[0].index, 0);
    assert.equal(lines[0].text, httpGreedy.choices[0].text);
    assert.equal(lines[0].token_ids.length, 24);
    assert.match(String(lines[0].finish_reason), /LENGTH/i);
    assert.equal(lines[1].usage.completion_tokens, 24);
    // Plain output streams the text itself.
    const plain = await run(['--prompt', PROMPT, '--max-tokens', '24', '--temperature', '0']);
    assert.ok(plain.stdout.includes(httpGreedy.choices[0].text.trim()), plain.stdout);
    const models = await run(['--list-models']);
    assert.match(models.stdout, /^stories260K 512 512$/m);
    const health = await run(['--health']);
    assert.match(health.stdout, /SERVING/);
    const tok = await run(['--tokenize', '--prompt', PROMPT]);
    const ids = (await g.unary(rpc.generation, 'Tokenize', { text: PROMPT })).token_ids;
    assert.equal(tok.stdout.trim(), ids.join(' '));
    // A failing call: exit status 1, the gRPC status on stderr.
    await assert.rejects(run(['--prompt', PROMPT, '--model', 'nope']), (e) => e.code === 1 && /NOT_FOUND|not exist/i.test(e.stderr));
  });
});

describe('gRPC during drain', () => {
  test('health goes NOT_SERVING, new calls get UNAVAILABLE, a running stream completes, exit 0', async (t) => {
    const d = await startDaemon({ args: ['--drain-timeout-ms', '60000'] });
    t.after(() => d.kill());
    const rpc = g.clients(d);
    t.after(() => rpc.close());

    // Watch: SERVING now, NOT_SERVING when the drain starts.
    const seen = [];
    const watch = rpc.health.Watch({ service: 'banyan.v1.Generation' });
    watch.on('data', (r) => seen.push(r.status));
    watch.on('error', () => {});

    let first;
    const firstMessage = new Promise((r) => {
      first = r;
    });
    const running = g.generate(
      rpc.generation,
      { text: PROMPT, sampling: { max_tokens: 400, n: 4, temperature: 1, seed: 1, ignore_eos: true } },
      { onResponse: () => first() },
    );
    await firstMessage;
    assert.equal((await g.unary(rpc.health, 'Check', { service: '' })).status, 'SERVING');

    d.signal('SIGTERM');
    const t0 = Date.now();
    for (;;) {
      const h = await g.unary(rpc.health, 'Check', { service: '' });
      if (h.status === 'NOT_SERVING') break;
      assert.ok(Date.now() - t0 < scaled(1000), `health still ${h.status} ${Date.now() - t0} ms after SIGTERM`);
      await sleep(5);
    }
    assert.equal((await g.unary(rpc.health, 'Check', { service: 'banyan.v1.Generation' })).status, 'NOT_SERVING');
    await assert.rejects(
      g.generate(rpc.generation, { text: PROMPT, sampling: { max_tokens: 4 } }),
      (e) => e.code === g.status.UNAVAILABLE,
    );

    const r = await running;
    assert.equal(r.choices.length, 4);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'FINISH_REASON_LENGTH');
      assert.equal(c.token_ids.length, 400);
    }
    assert.equal(r.usage.completion_tokens, 1600);
    const exit = await d.waitExit(30000);
    assert.deepEqual(exit, { code: 0, signal: null }, d.tail());
    assert.equal(seen[0], 'SERVING');
    assert.ok(seen.includes('NOT_SERVING'), `Watch saw ${seen}`);
  });
});
