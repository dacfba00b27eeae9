// Speculative decoding through the daemon: banyand with the bundled model's Hydra heads
// (--speculative hydra, chains and --draft-tree trees) or with n-gram prompt lookup returns
// exactly the text banyand without them does, for greedy completions, chat, n > 1 and a seeded
// sampled request; reports the candidates in usage.completion_tokens_details; and counts them
// in /metrics under vLLM's
// spec_decode names. And refusals: --speculative hydra without heads, a bad --draft-tree or
// --draft-on.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { describe, test } = require('node:test');
const { startDaemon, MODEL_NAME, scaled } = require('./lib/daemon');
const { post } = require('./lib/http');
const { scrape, value } = require('./lib/metrics');

const SOURCE_DIR = path.resolve(process.env.BANYAN_SOURCE_DIR || path.join(__dirname, '..', '..'));
const HEADS = path.join(SOURCE_DIR, 'models', 'stories260K', 'hydra', 'config.json');
const BANYAND = process.env.BANYAND || path.join(SOURCE_DIR, 'build', 'server', 'banyand');

const PROMPTS = ['Once upon a time', 'The little dog ran to the park and', 'Tom had a toy car. He'];

async function answers(d) {
  const out = [];
  for (const prompt of PROMPTS) {
    const r = await post(d, '/v1/completions', {
      model: MODEL_NAME, prompt, max_tokens: 48, temperature: 0, n: 2,
    });
    assert.equal(r.status, 200, r.text);
    out.push({ texts: r.json.choices.map((c) => c.text), usage: r.json.usage });
  }
  const chat = await post(d, '/v1/chat/completions', {
    model: MODEL_NAME, messages: [{ role: 'user', content: 'A story about a cat' }],
    max_tokens: 40, temperature: 0,
  });
  assert.equal(chat.status, 200, chat.text);
  out.push({ texts: [chat.json.choices[0].message.content], usage: chat.json.usage });
  const sampled = await post(d, '/v1/completions', {
    model: MODEL_NAME, prompt: 'One day', max_tokens: 32, temperature: 0.9, seed: 5,
    presence_penalty: 0.5,
  });
  assert.equal(sampled.status, 200, sampled.text);
  out.push({ texts: [sampled.json.choices[0].text], usage: sampled.json.usage });
  return out;
}

describe('speculative decoding', () => {
  const hydra = ['--speculative', 'hydra', '--draft-heads', HEADS];
  // Prompt lookup on prompts seen for the first time: n-grams of each request's own context.
  const lookup = ['--speculative', 'lookup', '--draft-tokens', '3', '--prompt-lookup-max', '4'];
  // (The heads draft for every request; n-gram lookup where a request's text repeats itself,
  // which the sampled one does not.)
  for (const [name, extra, everyOneDrafts] of [['Hydra heads (chains)', hydra, true],
    ['Hydra heads (trees)', [...hydra, '--draft-tree', '4,2,2'], true],
    ['n-gram lookup chains', lookup, false]]) {
    test(`${name} keep the text and are counted`, async (t) => {
      const plain = await startDaemon({});
      t.after(() => plain.kill());
      const want = await answers(plain);
      const spec = await startDaemon({
        args: [...extra, '--speculation-min-accept', '0', '--speculation-adaptive', 'off'],
      });
      t.after(() => spec.kill());
      const got = await answers(spec);
      let accepted = 0;
      for (let i = 0; i < want.length; ++i) {
        assert.deepEqual(got[i].texts, want[i].texts, `request ${i}`);
        assert.equal(got[i].usage.completion_tokens, want[i].usage.completion_tokens);
        assert.equal(want[i].usage.completion_tokens_details, undefined);
        const details = got[i].usage.completion_tokens_details;
        if (!details && !everyOneDrafts) continue;
        assert.ok(details, `request ${i}: no completion_tokens_details`);
        accepted += details.accepted_prediction_tokens;
        assert.ok(details.rejected_prediction_tokens >= 0);
      }
      assert.ok(accepted > 0, 'no candidate was accepted');
      const m = await scrape(spec);
      assert.equal(
        value(m, `vllm:spec_decode_num_accepted_tokens_total{model_name="${MODEL_NAME}"}`),
        accepted);
      assert.ok(value(m, 'banyan_spec_decode_drafts_total') > 0);
      assert.ok(value(m, 'banyan_spec_decode_accepted_tokens_per_position{position="0"}') > 0);
    });
  }

  // The defaults (the governor with its start-up profile): the profile's synthetic requests
  // leave nothing in /metrics or the cache, and completions keep plain decoding's text.
  test('the start-up profile leaves no trace, and the defaults keep the text', async (t) => {
    const plain = await startDaemon({});
    t.after(() => plain.kill());
    const want = await answers(plain);
    const spec = await startDaemon({
      args: ['--speculative', 'hydra', '--draft-heads', HEADS, '--draft-tree', '4,2,2'],
    });
    t.after(() => spec.kill());
    await spec.waitForLog(/speculation profile: [1-9]\d* size classes/);
    assert.match(spec.log, /speculation profile, steps of 1 rows: [\d.]+ ms with candidates/);
    const m = await scrape(spec);
    for (const name of ['banyan_generation_tokens_total', 'banyan_prompt_tokens_total',
      'banyan_kv_chunks_cached', 'banyan_kv_chunks_live', 'banyan_kv_chunks_live_peak',
      'banyan_spec_decode_drafts_total', 'banyan_requests_finished_total']) {
      assert.equal(value(m, name), 0, name);
    }
    assert.doesNotMatch(spec.log, /request speculation-profile-\d+-\d+ finished/);
    const got = await answers(spec);
    for (let i = 0; i < want.length; ++i) assert.deepEqual(got[i].texts, want[i].texts, `request ${i}`);
  });

  test('hydra without heads is refused at start-up', () => {
    const r = spawnSync(BANYAND, ['--speculative', 'hydra', '--http-port', '0', '--grpc-port', '0'],
      { encoding: 'utf8', timeout: scaled(20000) });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr + r.stdout, /--draft-heads/);
  });

  test('a bad --draft-tree is refused at start-up', () => {
    for (const [tree, want] of [['4,0,2', /branching factors/], ['16,16,16', /256 candidates/]]) {
      const r = spawnSync(BANYAND, ['--speculative', 'hydra', '--draft-heads', HEADS,
        '--draft-tree', tree, '--http-port', '0', '--grpc-port', '0'],
      { encoding: 'utf8', timeout: scaled(20000) });
      assert.notEqual(r.status, 0, tree);
      assert.match(r.stderr + r.stdout, want);
    }
  });

  test('a bad --draft-on is refused at start-up', () => {
    const r = spawnSync(BANYAND, ['--speculative', 'hydra', '--draft-heads', HEADS,
      '--draft-on', 'gpu', '--http-port', '0', '--grpc-port', '0'],
    { encoding: 'utf8', timeout: scaled(20000) });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr + r.stdout, /draft-on.*device.*host/);
  });
});
