// Tool calling with the official `openai` client: banyand serves the bundled story model with a
// Hermes-style chat template (tests/testing/templates/hermes_tools.jinja), and tool_choice
// "required" or a named function forces the calls through the grammar. Sampled at temperature
// 1.0 over several seeds, streaming (accumulated by the client's own stream helper) and not:
// every choice must end with finish_reason "tool_calls" and calls of the allowed tools whose
// arguments validate (ajv) against the tool's parameters: 100% valid.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { after, before, describe, test } = require('node:test');
const Ajv = require('ajv');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { openaiClient } = require('./lib/http');

const TEMPLATE = path.join(__dirname, '..', 'testing', 'templates', 'hermes_tools.jinja');

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 10 },
          unit: { enum: ['c', 'f'] },
        },
        required: ['city'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      parameters: {
        type: 'object',
        properties: {
          a: { type: 'integer' },
          b: { type: 'integer' },
          tags: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 2 },
        },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];

describe('tool calls (openai client)', () => {
  let d;
  let client;
  const ajv = new Ajv({ strict: true });
  const validators = Object.fromEntries(
    TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]),
  );

  before(async () => {
    d = await startDaemon({ args: ['--chat-template', TEMPLATE] });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

  function checkChoice(choice, only, where) {
    assert.equal(choice.finish_reason, 'tool_calls', where);
    assert.equal(choice.message.content || null, null, where);
    const calls = choice.message.tool_calls;
    assert.ok(Array.isArray(calls) && calls.length === 1, `${where}: ${JSON.stringify(calls)}`);
    for (const call of calls) {
      assert.match(call.id, /^call_[A-Za-z0-9]+$/, where);
      assert.equal(call.type, 'function', where);
      if (only) assert.equal(call.function.name, only, where);
      const validate = validators[call.function.name];
      assert.ok(validate, `${where}: unknown tool ${call.function.name}`);
      const args = JSON.parse(call.function.arguments);
      assert.ok(validate(args), `${where}: ${call.function.arguments} ${ajv.errorsText(validate.errors)}`);
    }
    return calls.length;
  }

  const choices = [
    { tool_choice: 'required', only: null },
    { tool_choice: { type: 'function', function: { name: 'add' } }, only: 'add' },
    { tool_choice: { type: 'function', function: { name: 'get_weather' } }, only: 'get_weather' },
  ];

  for (const { tool_choice, only } of choices) {
    for (const stream of [false, true]) {
      test(`tool_choice ${JSON.stringify(tool_choice)}, ${stream ? 'streaming' : 'whole'}`, async () => {
        let valid = 0;
        let total = 0;
        for (const seed of [1, 2, 3, 4, 5, 6]) {
          const body = {
            model: MODEL_NAME,
            messages,
            tools: TOOLS,
            tool_choice,
            parallel_tool_calls: false,
            temperature: 1.0,
            seed,
            n: 2,
          };
          const r = stream
            ? await client.chat.completions.stream(body).finalChatCompletion()
            : await client.chat.completions.create(body);
          assert.equal(r.choices.length, 2);
          for (const c of r.choices) {
            total += 1;
            checkChoice(c, only, `seed ${seed} choice ${c.index}`);
            valid += 1;
          }
        }
        assert.equal(valid, total);
      });
    }
  }

  test('refusals name the field', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL_NAME,
        messages,
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'nope' } },
      }),
      (e) => e.status === 400 && e.param === 'tool_choice.function.name',
    );
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL_NAME,
        messages,
        tools: [TOOLS[0], TOOLS[0]],
        tool_choice: 'required',
      }),
      (e) => e.status === 400 && e.param === 'tools[1].function.name',
    );
  });
});
