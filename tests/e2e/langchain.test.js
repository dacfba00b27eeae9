// Structured outputs through LangChain JS: @langchain/openai's ChatOpenAI with
// configuration.baseURL at banyand's /v1 and withStructuredOutput(zodSchema). LangChain parses
// the reply and checks it against the zod schema (a mismatch throws an OutputParserException);
// each result is checked again here. Temperature 1.0, six seeds per test (passed as the call's
// `seed` option): every call must give a valid object and end with "stop".
//
// method "jsonSchema" sends response_format json_schema (strict). method "jsonMode" sends
// json_object, which carries no schema: the story model writes an object of its own keys, so that
// test checks a schema every object satisfies, with a bias on '}' so that the objects end (as
// structured_outputs.test.js does). method "functionCalling" needs tool calls (not served yet).
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { ChatOpenAI } = require('@langchain/openai');
const { startDaemon, scaled, MODEL_NAME } = require('./lib/daemon');
const { post } = require('./lib/http');
const { PERSON, EVENT, SEEDS, assertSatisfies, closeBraceToken, z4 } = require('./lib/zod_schemas');

describe('structured outputs: LangChain ChatOpenAI.withStructuredOutput', () => {
  let d;

  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    if (d) await d.stop();
  });

  function chat(extra = {}) {
    return new ChatOpenAI({
      model: MODEL_NAME,
      apiKey: 'no-key',
      temperature: 1.0,
      maxTokens: 450,
      maxRetries: 0,
      timeout: scaled(60000),
      configuration: { baseURL: `${d.http}/v1` },
      ...extra,
    });
  }

  const prompt = [{ role: 'user', content: 'Tell me about a person.' }];

  for (const [label, schema] of [
    ['zod 4 schema', PERSON],
    ['zod 3 schema (integers, date-time, a $ref to a reused object)', EVENT],
  ]) {
    test(`method jsonSchema, ${label}: every result validates`, async (t) => {
      const runnable = chat().withStructuredOutput(schema, {
        method: 'jsonSchema',
        name: 'record',
        includeRaw: true,
      });
      const seen = new Set();
      for (const seed of SEEDS) {
        const { raw, parsed } = await runnable.invoke(prompt, { seed });
        assert.equal(raw.response_metadata.finish_reason, 'stop', `seed ${seed}: ${raw.content}`);
        assertSatisfies(schema, parsed, `seed ${seed}`);
        seen.add(JSON.stringify(parsed));
      }
      assert.ok(seen.size > 1, `${seen.size} distinct results over ${SEEDS.length} seeds`);
      t.diagnostic(`${SEEDS.length}/${SEEDS.length} results valid, ${seen.size} distinct`);
    });
  }

  test('method jsonSchema, batch of six: every result validates', async (t) => {
    const runnable = chat().withStructuredOutput(PERSON, { method: 'jsonSchema', name: 'person' });
    const results = await runnable.batch(
      SEEDS.map(() => prompt),
      SEEDS.map((seed) => ({ seed: seed + 100 })),
    );
    assert.equal(results.length, SEEDS.length);
    results.forEach((r, i) => assertSatisfies(PERSON, r, `batch item ${i}`));
    t.diagnostic(`${results.length}/${SEEDS.length} batched results valid`);
  });

  test('method jsonMode with a bias on "}": every result is an object', async (t) => {
    const close = await closeBraceToken(d, post);
    const anyObject = z4.record(z4.string(), z4.json());
    const runnable = chat({ logitBias: { [close]: 8 } }).withStructuredOutput(anyObject, {
      method: 'jsonMode',
      includeRaw: true,
    });
    for (const seed of SEEDS) {
      const { raw, parsed } = await runnable.invoke(prompt, { seed });
      assert.equal(raw.response_metadata.finish_reason, 'stop', `seed ${seed}: ${raw.content}`);
      assert.ok(parsed && typeof parsed === 'object' && !Array.isArray(parsed), raw.content);
      assertSatisfies(anyObject, parsed, `seed ${seed}`);
    }
    t.diagnostic(`${SEEDS.length}/${SEEDS.length} objects`);
  });
});
