// --deterministic on (the CPU backend: row-invariant products, paged attention): a request's
// tokens and logprobs are bit for bit the same whether it runs alone or in a concurrent burst of
// requests of other lengths sharing its system prompt (its prefix computed in its own prefill or
// found in the cache, its prompt prefilled in one step or split across steps by the burst),
// greedy and with a seed at temperature 1; and with Hydra speculation (chains and trees) the same
// bits as without it. banyand says which mode runs: the start-up log and banyan_deterministic on
// /metrics.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { openaiClient } = require('./lib/http');
const { STORY } = require('./lib/text');
const path = require('node:path');

const SOURCE_DIR = path.resolve(process.env.BANYAN_SOURCE_DIR || path.join(__dirname, '..', '..'));
const HEADS = path.join(SOURCE_DIR, 'models', 'stories260K', 'hydra', 'config.json');

const QUESTIONS = [
  'What was the dog called?', 'Where did the ball go?', 'Who helped Tom?', 'Was Tom happy?',
  'What did the lady carry?', 'Tell me more.', 'What happened next?', 'How did it end?',
];

// Each speculating answer carries its solo answer's text and logprobs, bit for bit, and some
// candidate was accepted (not a run that never speculated).
function expectSpeculatedBits(solo, speculated) {
  let accepted = 0;
  for (let i = 0; i < QUESTIONS.length; ++i) {
    const a = solo[i].choices[0];
    const b = speculated[i].choices[0];
    assert.equal(b.text, a.text, QUESTIONS[i]);
    assert.deepEqual(b.logprobs, a.logprobs, QUESTIONS[i]);
    const details = speculated[i].usage.completion_tokens_details;
    assert.ok(details, `${QUESTIONS[i]}: no completion_tokens_details`);
    accepted += details.accepted_prediction_tokens;
  }
  assert.ok(accepted > 0, 'no candidate was accepted');
}

describe('deterministic mode', () => {
  let d;
  let client;

  before(async () => {
    // A prefill budget below the burst's prompt tokens, so that some prompts are split.
    d = await startDaemon({
      args: ['--backend', 'cpu', '--deterministic', 'on', '--chunk-size', '16',
        '--prefill-budget', '256'],
    });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  test('the start-up log and /metrics say which mode runs', async () => {
    await d.waitForLog(/mode: deterministic/);
    const body = await (await fetch(`${d.http}/metrics`)).text();
    assert.match(body, /^banyan_deterministic 1$/m);
  });

  const asker = (c, sampled) => (q, i) =>
    c.completions.create({
      model: MODEL_NAME,
      prompt: `${STORY}\n${q}`,
      max_tokens: 12 + 2 * i,
      temperature: sampled ? 1 : 0,
      ...(sampled ? { seed: 100 + i } : {}),
      logprobs: 3,
    });

  for (const sampled of [false, true]) {
    test(`tokens and logprobs alone equal those in a burst (${sampled ? 'seeded, T = 1' : 'greedy'})`,
      async () => {
        const ask = asker(client, sampled);
        const solo = [];
        for (let i = 0; i < QUESTIONS.length; ++i) solo.push(await ask(QUESTIONS[i], i));
        const together = await Promise.all(QUESTIONS.map(ask));
        for (let i = 0; i < QUESTIONS.length; ++i) {
          const a = solo[i].choices[0];
          const b = together[i].choices[0];
          assert.ok(a.logprobs.tokens.length > 0, `no tokens for ${QUESTIONS[i]}`);
          assert.equal(b.text, a.text, QUESTIONS[i]);
          // Numbers compared as JSON carries them: the same bits give the same decimal.
          assert.deepEqual(b.logprobs, a.logprobs, QUESTIONS[i]);
        }
      });
  }

  // Speculation verifies candidates in rows of their own; in this mode each row's products do
  // not depend on the others, so the accepted tokens and their logprobs are those of plain
  // decoding, bit for bit. The candidates must be accepted (not a run that never speculates).
  for (const [name, extra] of [['chains', []], ['trees', ['--draft-tree', '4,2,2']]]) {
    for (const sampled of [false, true]) {
      test(`Hydra ${name} in a burst keep each prompt's bits alone without speculation (${
        sampled ? 'seeded, T = 1' : 'greedy'})`, async (t) => {
        const spec = await startDaemon({
          args: ['--backend', 'cpu', '--deterministic', 'on', '--chunk-size', '16',
            '--prefill-budget', '256', '--speculative', 'hydra', '--draft-heads', HEADS,
            '--speculation-adaptive', 'off', '--speculation-min-accept', '0', ...extra],
        });
        t.after(() => spec.stop());
        const solo = [];
        const plain = asker(client, sampled);
        for (let i = 0; i < QUESTIONS.length; ++i) solo.push(await plain(QUESTIONS[i], i));
        const together = await Promise.all(QUESTIONS.map(asker(openaiClient(spec), sampled)));
        expectSpeculatedBits(solo, together);
      });
    }
  }

  // Prompt lookup: the burst sent twice, the second time drafting the first's continuations
  // (cached prefixes, chains accepted whole): the second burst keeps each prompt's solo bits.
  test('prompt lookup chains in a repeated burst keep each prompt\'s bits alone (greedy)',
    async (t) => {
      const spec = await startDaemon({
        args: ['--backend', 'cpu', '--deterministic', 'on', '--chunk-size', '16',
          '--prefill-budget', '256', '--speculative', 'lookup', '--draft-tokens', '3',
          '--speculation-adaptive', 'off'],
      });
      t.after(() => spec.stop());
      const solo = [];
      const plain = asker(client, false);
      for (let i = 0; i < QUESTIONS.length; ++i) solo.push(await plain(QUESTIONS[i], i));
      const ask = asker(openaiClient(spec), false);
      await Promise.all(QUESTIONS.map(ask));
      const again = await Promise.all(QUESTIONS.map(ask));
      expectSpeculatedBits(solo, again);
    });
});
