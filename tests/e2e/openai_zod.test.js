// Structured outputs through the official `openai` client's zod helper: zodResponseFormat(schema)
// with client.chat.completions.parse and .stream, as agent code writes them. The client parses the
// reply and checks it against the zod schema itself (a mismatch throws); each result is checked
// again here against the same schema. Sampled at temperature 1.0 from the bundled story model over
// six seeds: every output must validate and end with "stop".
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { zodResponseFormat } = require('openai/helpers/zod');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { openaiClient } = require('./lib/http');
const { PERSON, EVENT, SEEDS, assertSatisfies, z4 } = require('./lib/zod_schemas');

describe('structured outputs: openai client with zodResponseFormat', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon();
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  const messages = [{ role: 'user', content: 'Tell me about a person.' }];
  const sampling = { temperature: 1.0, max_tokens: 450 };

  for (const [label, schema] of [
    ['zod 4 (nullable, union, literal, nested object, array)', PERSON],
    ['zod 3 (integers, date-time, a $ref to a reused object)', EVENT],
  ]) {
    test(`chat.completions.parse, ${label}: every choice parses`, async (t) => {
      const sent = JSON.stringify(zodResponseFormat(schema, 'record').json_schema.schema);
      if (schema === EVENT) assert.match(sent, /"\$ref":"#\/definitions\//, sent);
      let valid = 0;
      for (const seed of SEEDS) {
        const r = await client.chat.completions.parse({
          model: MODEL_NAME,
          messages,
          response_format: zodResponseFormat(schema, 'record'),
          seed,
          n: 2,
          ...sampling,
        });
        assert.equal(r.choices.length, 2);
        for (const c of r.choices) {
          assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
          assert.ok(c.message.parsed, `seed ${seed}: nothing parsed from ${c.message.content}`);
          assertSatisfies(schema, c.message.parsed, `seed ${seed}`);
          assert.deepEqual(c.message.parsed, schema.parse(JSON.parse(c.message.content)));
          ++valid;
        }
      }
      assert.equal(valid, SEEDS.length * 2);
      t.diagnostic(`${valid}/${SEEDS.length * 2} parsed and valid`);
    });
  }

  test('chat.completions.stream with a zod response_format: every final message parses', async (t) => {
    let valid = 0;
    for (const seed of SEEDS) {
      const stream = client.chat.completions.stream({
        model: MODEL_NAME,
        messages,
        response_format: zodResponseFormat(PERSON, 'person'),
        seed,
        ...sampling,
      });
      let deltas = 0;
      stream.on('content.delta', () => ++deltas);
      const final = await stream.finalChatCompletion();
      const c = final.choices[0];
      assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
      assert.ok(deltas > 1, `seed ${seed}: ${deltas} content deltas`);
      assertSatisfies(PERSON, c.message.parsed, `seed ${seed}`);
      ++valid;
    }
    assert.equal(valid, SEEDS.length);
    t.diagnostic(`${valid}/${SEEDS.length} streamed, parsed and valid`);
  });

  // zod 4 writes .int() with the safe-integer bounds as minimum/maximum, and .min()/.max() as
  // tighter ones: the grammar writes only integers within them, and the client's own zod check
  // of every reply is the judge.
  test('zod 4 .int() with and without bounds: every reply within them', async (t) => {
    const COUNTS = z4.object({ count: z4.number().int(), small: z4.number().int().min(-3).max(7),
      ratio: z4.number().min(0).max(1) });
    let valid = 0;
    for (const seed of SEEDS) {
      const r = await client.chat.completions.parse({
        model: MODEL_NAME,
        messages,
        seed,
        temperature: 1.0,
        max_tokens: 80,
        response_format: zodResponseFormat(COUNTS, 'counts'),
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
      assertSatisfies(COUNTS, c.message.parsed, `seed ${seed}`);
      ++valid;
    }
    assert.equal(valid, SEEDS.length);
    t.diagnostic(`${valid}/${SEEDS.length} valid with integer and number bounds`);
  });
  // zod 4 sends its own pattern beside each format; banyand intersects the two automata.
  test('zod 4 formats and multipleOf (pattern beside format): every reply validates', async (t) => {
    const FORMATS = z4.object({
      id: z4.uuid(),
      day: z4.iso.date(),
      at: z4.iso.datetime(),
      seats: z4.int().multipleOf(5).min(0).max(100),
    });
    // z4.email() compiles too (grammar_ajv_oracle checks the format), but its parts have no
    // length bound and the story model writes them until max_tokens.
    const sent = zodResponseFormat(FORMATS, 'formats').json_schema.schema;
    assert.ok(sent.properties.id.pattern && sent.properties.id.format === 'uuid', JSON.stringify(sent));
    assert.equal(sent.properties.seats.multipleOf, 5, JSON.stringify(sent));
    let valid = 0;
    for (const seed of SEEDS) {
      const r = await client.chat.completions.parse({
        model: MODEL_NAME,
        messages,
        seed,
        temperature: 1.0,
        max_tokens: 450,
        response_format: zodResponseFormat(FORMATS, 'formats'),
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
      assertSatisfies(FORMATS, c.message.parsed, `seed ${seed}`);
      assert.equal(c.message.parsed.seats % 5, 0, c.message.content);
      ++valid;
    }
    assert.equal(valid, SEEDS.length);
    t.diagnostic(`${valid}/${SEEDS.length} valid: uuid, date, datetime, multipleOf`);
  });
});
