// The zod schemas the agent-framework tests (openai_zod, ai_sdk, langchain) send, and the checks
// they share. Every schema is bounded (strings with max(), arrays with max(), enums, booleans,
// numbers of at most 15 digits) so that the bundled story model, whose only help is the grammar,
// ends each object within the tests' max_tokens.
//
// Two zod APIs, both from the one `zod` package: zod 4's own (`zod`) and zod 3's (`zod/v3`),
// which many applications still write. Each client turns them into JSON Schema differently:
//   - zod 4 writes z.number().int() as {"type":"integer","minimum":-(2^53-1),"maximum":2^53-1};
//     the grammar writes integers within the bounds (openai_zod tests it); PERSON's numbers
//     are z.number().
//   - zod 3 writes .int() as {"type":"integer"}, .datetime() as "format": "date-time", and a
//     subschema used twice as a $ref (openai's helper: "#/definitions/...", LangChain:
//     "#/properties/..."). EVENT covers those. zod 3's .datetime() sends "date-time" (RFC 3339,
//     offsets allowed) but accepts only a 'Z' unless given { offset: true }: the grammar writes
//     offsets such as -00:50, which a plain .datetime() then rejects in the client.
'use strict';

const assert = require('node:assert/strict');
const z4 = require('zod');
const z3 = require('zod/v3');

// zod 4: nested object, enum, nullable, array bounds, booleans, numbers, a literal, a union.
const PERSON = z4.object({
  name: z4.string().max(12),
  age: z4.number(),
  role: z4.enum(['admin', 'user', 'guest']),
  address: z4.object({ city: z4.string().max(10), zip: z4.number().nullable() }),
  tags: z4.array(z4.string().max(6)).min(1).max(3),
  active: z4.boolean(),
  nickname: z4.string().max(8).nullable(),
  kind: z4.literal('person'),
  score: z4.union([z4.boolean(), z4.string().max(4)]),
});

// zod 3: integers, a date-time, a reused subschema (a $ref in the JSON Schema), an array of
// objects, a discriminated union.
const PLACE = z3.object({ city: z3.string().max(10), floor: z3.number().int().nullable() });
const EVENT = z3.object({
  title: z3.string().max(12),
  attendees: z3.number().int(),
  starts: z3.string().datetime({ offset: true }),
  home: PLACE,
  venue: PLACE,
  slots: z3
    .array(z3.object({ minutes: z3.number().int(), booked: z3.boolean() }))
    .min(1)
    .max(2),
  status: z3.discriminatedUnion('state', [
    z3.object({ state: z3.literal('open') }),
    z3.object({ state: z3.literal('closed'), reason: z3.enum(['full', 'late']) }),
  ]),
});

// Independent of the client's own parse: `value` satisfies `schema` (zod 3 or 4), else the
// assertion names zod's issues.
function assertSatisfies(schema, value, what) {
  const r = schema.safeParse(value);
  assert.ok(r.success, `${what}: ${JSON.stringify(r.error && r.error.issues)} in ${JSON.stringify(value)}`);
}

// The id of the token '}' in the model's vocabulary (as structured_outputs.test.js finds it):
// json_object allows it only where an object may close, and a bias on it ends the story model's
// otherwise endless objects.
async function closeBraceToken(daemon, post) {
  const tok = await post(daemon, '/tokenize', { prompt: 'a}' });
  assert.equal(tok.status, 200, tok.text);
  return tok.json.tokens[tok.json.tokens.length - 1];
}

// Seeds of the sampled calls: several per test, temperature 1.0.
const SEEDS = [1, 2, 3, 4, 5, 6];

module.exports = { PERSON, EVENT, SEEDS, assertSatisfies, closeBraceToken, z3, z4 };
