// Structured outputs through the Vercel AI SDK (`ai` with `@ai-sdk/openai` and
// `@ai-sdk/openai-compatible`) pointed at banyand's /v1: generateObject, streamObject and
// generateText's Output.object with zod schemas, in structured-outputs mode (response_format
// json_schema, strict). The SDK validates every object against the schema itself and throws
// (AI_NoObjectGeneratedError) on a mismatch; each object is checked again here. Temperature 1.0,
// six seeds (the SDK passes `seed` through): every call must give a valid object and end with
// "stop".
//
// @ai-sdk/openai's default model (`openai(id)`) speaks the Responses API, which banyand does not
// serve; agents on an OpenAI-compatible server use `openai.chat(id)` or openai-compatible.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { generateObject, generateText, streamObject, Output } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');
const { startDaemon, scaled, MODEL_NAME } = require('./lib/daemon');
const { PERSON, EVENT, SEEDS, assertSatisfies } = require('./lib/zod_schemas');

describe('structured outputs: AI SDK', () => {
  let d;
  const models = {};

  before(async () => {
    d = await startDaemon();
    const baseURL = `${d.http}/v1`;
    models.openaiChat = createOpenAI({ baseURL, apiKey: 'no-key' }).chat(MODEL_NAME);
    models.compatible = createOpenAICompatible({
      name: 'banyan',
      baseURL,
      apiKey: 'no-key',
      supportsStructuredOutputs: true,
    }).chatModel(MODEL_NAME);
  });
  after(async () => {
    if (d) await d.stop();
  });

  const call = (seed) => ({
    prompt: 'Tell me about a person.',
    temperature: 1.0,
    seed,
    maxOutputTokens: 450,
    maxRetries: 0,
    abortSignal: AbortSignal.timeout(scaled(60000)),
  });

  for (const [provider, label, schema] of [
    ['openaiChat', 'zod 4 schema', PERSON],
    ['openaiChat', 'zod 3 schema (integers, date-time)', EVENT],
    ['compatible', 'zod 4 schema', PERSON],
    ['compatible', 'zod 3 schema (integers, date-time)', EVENT],
  ]) {
    test(`generateObject, ${provider}, ${label}: every object validates`, async (t) => {
      const seen = new Set();
      for (const seed of SEEDS) {
        const r = await generateObject({ model: models[provider], schema, ...call(seed) });
        assert.equal(r.finishReason, 'stop', `seed ${seed}`);
        assertSatisfies(schema, r.object, `seed ${seed}`);
        seen.add(JSON.stringify(r.object));
      }
      // The seed reaches the server: six seeds at temperature 1.0 give more than one object.
      assert.ok(seen.size > 1, `${seen.size} distinct objects`);
      t.diagnostic(`${SEEDS.length}/${SEEDS.length} objects valid, ${seen.size} distinct`);
    });
  }

  test('streamObject, openai-compatible: every final object validates', async (t) => {
    let valid = 0;
    for (const seed of SEEDS) {
      const r = streamObject({ model: models.compatible, schema: PERSON, ...call(seed) });
      let partials = 0;
      for await (const partial of r.partialObjectStream) {
        assert.equal(typeof partial, 'object');
        ++partials;
      }
      assert.ok(partials > 1, `seed ${seed}: ${partials} partial objects`);
      assert.equal(await r.finishReason, 'stop', `seed ${seed}`);
      assertSatisfies(PERSON, await r.object, `seed ${seed}`);
      ++valid;
    }
    assert.equal(valid, SEEDS.length);
    t.diagnostic(`${valid}/${SEEDS.length} streamed objects valid`);
  });

  test('generateText with Output.object, openai.chat: every output validates', async (t) => {
    let valid = 0;
    for (const seed of SEEDS) {
      const r = await generateText({
        model: models.openaiChat,
        output: Output.object({ schema: EVENT }),
        ...call(seed),
      });
      assert.equal(r.finishReason, 'stop', `seed ${seed}`);
      assertSatisfies(EVENT, r.output, `seed ${seed}`);
      ++valid;
    }
    assert.equal(valid, SEEDS.length);
    t.diagnostic(`${valid}/${SEEDS.length} outputs valid`);
  });
});
