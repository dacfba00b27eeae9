// Structured outputs with the official `openai` client: response_format json_schema (required
// properties, an enum, a nested object, an array), json_object and structural_tag, streaming and
// not, and vLLM's
// guided_choice / guided_regex / structured_outputs and GBNF grammars (guided_grammar, llama.cpp's
// grammar) sent as extra body fields, sampled at temperature 1.0 from the bundled story model
// (which knows no JSON: the grammar does the work).
// Every output is checked by an independent validator (ajv). An output cut by max_tokens
// (finish_reason "length") is reported and not counted as valid; a json_schema output must end
// with "stop".
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const Ajv = require('ajv');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { collectStream, openaiClient, post } = require('./lib/http');

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer' },
    role: { enum: ['admin', 'user', 'guest'] },
    address: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, zip: { type: 'integer' } },
      required: ['city'],
      additionalProperties: false,
    },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, minItems: 1, maxItems: 3 },
    active: { type: 'boolean' },
  },
  required: ['name', 'age', 'role', 'address', 'tags'],
  additionalProperties: false,
};

describe('structured outputs (openai client)', () => {
  let d;
  let client;
  const ajv = new Ajv({ strict: true });
  const validPerson = ajv.compile(PERSON);
  const validObject = ajv.compile({ type: 'object' });

  before(async () => {
    d = await startDaemon();
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  const messages = [{ role: 'user', content: 'Tell me about a person.' }];

  // One request, streaming or not: [{ text, finish }] per choice.
  async function outputs(body, stream) {
    if (!stream) {
      const r = await client.chat.completions.create({ model: MODEL_NAME, ...body });
      return r.choices.map((c) => ({ text: c.message.content, finish: c.finish_reason }));
    }
    const s = await client.chat.completions.create({ model: MODEL_NAME, ...body, stream: true });
    const { texts, finish } = await collectStream(s);
    return texts.map((text, i) => ({ text, finish: finish[i] }));
  }

  // Checks every output with `validate`; returns [valid, cut by length].
  function check(outs, validate, what, t) {
    let valid = 0;
    let cut = 0;
    for (const o of outs) {
      if (o.finish === 'length') {
        ++cut;
        t.diagnostic(`${what}: cut by max_tokens (reported, not counted): ${o.text}`);
        assert.ok(o.text.startsWith('{') || /^\s/.test(o.text), o.text);
        continue;
      }
      assert.equal(o.finish, 'stop', `${what}: ${o.text}`);
      let parsed;
      assert.doesNotThrow(() => {
        parsed = JSON.parse(o.text);
      }, `${what}: not JSON: ${o.text}`);
      assert.ok(validate(parsed), `${what}: ${JSON.stringify(validate.errors)} in ${o.text}`);
      ++valid;
    }
    return [valid, cut];
  }

  for (const stream of [false, true]) {
    test(`json_schema, ${stream ? 'streaming' : 'non-streaming'}: every output validates`, async (t) => {
      const format = {
        type: 'json_schema',
        json_schema: { name: 'person', strict: true, schema: PERSON },
      };
      let total = 0;
      let valid = 0;
      for (let seed = 1; seed <= 6; ++seed) {
        const outs = await outputs(
          { messages, response_format: format, temperature: 1.0, seed, n: 2, max_tokens: 450 },
          stream,
        );
        assert.equal(outs.length, 2);
        const [v, cut] = check(outs, validPerson, `seed ${seed}`, t);
        assert.equal(cut, 0, 'a bounded schema must end within 450 tokens');
        total += outs.length;
        valid += v;
      }
      assert.equal(valid, total, `${valid} of ${total} outputs valid`);
      t.diagnostic(`${valid}/${total} outputs valid`);
    });

    // Any JSON object has unbounded strings, and the story model writes pairs of them to any
    // length: a bias on '}' (which the grammar allows only where an object may close) ends it.
    test(`json_object with logit_bias, ${stream ? 'streaming' : 'non-streaming'}: every output is an object`, async (t) => {
      const tok = await post(d, '/tokenize', { prompt: 'a}' });
      const close = tok.json.tokens[tok.json.tokens.length - 1];
      let valid = 0;
      let cut = 0;
      for (let seed = 1; seed <= 6; ++seed) {
        const outs = await outputs(
          {
            messages,
            response_format: { type: 'json_object' },
            temperature: 1.0,
            seed,
            n: 2,
            max_tokens: 450,
            logit_bias: { [close]: 8 },
          },
          stream,
        );
        const [v, c] = check(outs, validObject, `seed ${seed}`, t);
        valid += v;
        cut += c;
      }
      t.diagnostic(`${valid} valid, ${cut} cut by max_tokens`);
      assert.equal(cut, 0);
      assert.equal(valid, 12);
    });
  }

  test('vLLM guided_json on completions validates too', async (t) => {
    const r = await post(d, '/v1/completions', {
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      guided_json: PERSON,
      temperature: 1.0,
      seed: 9,
      n: 3,
      max_tokens: 450,
    });
    assert.equal(r.status, 200, r.text);
    const outs = r.json.choices.map((c) => ({ text: c.text, finish: c.finish_reason }));
    const [valid] = check(outs, validPerson, 'guided_json', t);
    assert.equal(valid, 3);
  });

  // The openai client sends fields it does not know as they are (Python's extra_body).
  const CHOICES = ['the cat sat', 'a dog (barked)', 'yes', 'no.'];
  for (const stream of [false, true]) {
    test(`guided_choice, ${stream ? 'streaming' : 'non-streaming'}: every output is one of the choices`, async (t) => {
      const seen = new Set();
      let total = 0;
      for (let seed = 1; seed <= 4; ++seed) {
        const outs = await outputs(
          { messages, guided_choice: CHOICES, temperature: 1.0, seed, n: 2, max_tokens: 40 },
          stream,
        );
        assert.equal(outs.length, 2);
        for (const o of outs) {
          assert.equal(o.finish, 'stop', o.text);
          assert.ok(CHOICES.includes(o.text), `not a choice: ${JSON.stringify(o.text)}`);
          seen.add(o.text);
          ++total;
        }
      }
      assert.equal(total, 8);
      t.diagnostic(`8 of 8 outputs are choices; distinct: ${[...seen].join(' | ')}`);
    });
  }

  test('guided_regex on completions and structured_outputs.regex on chat: the whole output matches', async (t) => {
    const pattern = '[0-9]{3}-[a-z]{2,5}( [A-Z][a-z]{0,6}){1,3}\\.';
    const whole = new RegExp(`^(?:${pattern})$`);
    const texts = [];
    const comp = await client.completions.create({
      model: MODEL_NAME, prompt: 'Once upon a time', guided_regex: pattern, temperature: 1.0,
      seed: 3, n: 3, max_tokens: 60,
    });
    for (const c of comp.choices) {
      assert.equal(c.finish_reason, 'stop', c.text);
      texts.push(c.text);
    }
    const chat = await client.chat.completions.create({
      model: MODEL_NAME, messages, structured_outputs: { regex: pattern }, temperature: 1.0,
      seed: 4, n: 3, max_tokens: 60,
    });
    for (const c of chat.choices) {
      assert.equal(c.finish_reason, 'stop', c.message.content);
      texts.push(c.message.content);
    }
    assert.equal(texts.length, 6);
    for (const text of texts) assert.match(text, whole);
    t.diagnostic(`6 of 6 match: ${texts.join(' | ')}`);
  });

  // A recursive (not regular) GBNF grammar: sums and products of small numbers with parentheses.
  const ARITHMETIC = [
    '# sums of products, nested in parentheses',
    'root   ::= expr',
    'expr   ::= term (" + " term){0,2}',
    'term   ::= factor ("*" factor)?',
    'factor ::= [1-9] [0-9]? | "(" expr ")"',
  ].join('\n');
  // expr := term (' + ' term)*, term := factor ('*' factor)?, factor := [1-9][0-9]? | '(' expr ')'
  // with the same bounds: a recognizer written apart from the grammar engine.
  function isArithmetic(text) {
    let pos = 0;
    const eat = (s) => (text.startsWith(s, pos) ? ((pos += s.length), true) : false);
    function factor() {
      if (eat('(')) return expr() && eat(')');
      if (!/[1-9]/.test(text[pos] ?? '')) return false;
      ++pos;
      if (/[0-9]/.test(text[pos] ?? '')) ++pos;
      return true;
    }
    function term() {
      if (!factor()) return false;
      if (eat('*')) return factor();
      return true;
    }
    function expr() {
      if (!term()) return false;
      for (let i = 0; i < 2 && text.startsWith(' + ', pos); ++i) {
        pos += 3;
        if (!term()) return false;
      }
      return true;
    }
    return expr() && pos === text.length;
  }

  test('GBNF through guided_grammar, grammar and structured_outputs.grammar: every output is in the language', async (t) => {
    const texts = [];
    let cut = 0;
    const keep = (text, finish) => {
      if (finish === 'length') ++cut;  // cut by max_tokens: a prefix, not counted
      else texts.push(text);
    };
    const comp = await client.completions.create({
      model: MODEL_NAME, prompt: 'Once upon a time', guided_grammar: ARITHMETIC, temperature: 1.0,
      seed: 5, n: 3, max_tokens: 80,
    });
    for (const c of comp.choices) keep(c.text, c.finish_reason);
    const chat = await client.chat.completions.create({
      model: MODEL_NAME, messages, grammar: ARITHMETIC, temperature: 1.0, seed: 6, n: 3,
      max_tokens: 80,
    });
    for (const c of chat.choices) keep(c.message.content, c.finish_reason);
    const stream = await client.chat.completions.create({
      model: MODEL_NAME, messages, structured_outputs: { grammar: ARITHMETIC }, temperature: 1.0,
      seed: 7, n: 2, max_tokens: 80, stream: true,
    });
    const { texts: streamed, finish } = await collectStream(stream);
    streamed.forEach((text, i) => keep(text, finish[i]));
    assert.ok(texts.length >= 3, `only ${texts.length} of 8 outputs finished`);
    for (const text of texts) assert.ok(isArithmetic(text), JSON.stringify(text));
    t.diagnostic(`${texts.length} of 8 in the language (${cut} cut by max_tokens): ${texts.join(' | ')}`);
  });

  test('a GBNF grammar with an error is a 400 naming the field, the line and the column', async () => {
    const refused = async (extra, param, message, api = 'chat') => {
      const create = api === 'chat'
        ? client.chat.completions.create({ model: MODEL_NAME, messages, ...extra })
        : client.completions.create({ model: MODEL_NAME, prompt: 'Once', ...extra });
      await assert.rejects(create, (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.param, param);
        assert.match(e.message, message);
        return true;
      });
    };
    await refused({ guided_grammar: 'root ::= item\nitem ::= "a" | missing' }, 'guided_grammar',
                  /rule 'missing' is not defined at line 2, column 16/);
    await refused({ grammar: 'root ::= "unterminated' }, 'grammar',
                  /unterminated string literal at line 1, column 10/, 'completions');
    await refused({ structured_outputs: { grammar: 'root ::= "\\q"' } },
                  'structured_outputs.grammar', /bad escape '\\q' at line 1, column 11/);
    await refused({ grammar: 'start ::= "a"' }, 'grammar', /no 'root' rule/);
    await refused({ grammar: 'root ::= e\ne ::= e "+" "1" | "1"' }, 'grammar', /left-recursive/);
    await refused({ grammar: 'root ::= "a"', guided_regex: 'a' }, 'grammar', /both constrain/);
  });

  test('guided_regex the engine cannot compile, or two constraints, is a 400 naming the field', async () => {
    const refused = async (extra, param, message) => {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL_NAME, messages, ...extra }),
        (e) => {
          assert.equal(e.status, 400);
          assert.equal(e.param, param);
          assert.match(e.message, message);
          return true;
        },
      );
    };
    await refused({ guided_regex: '(a)\\1' }, 'guided_regex', /backreference/);
    await refused({ guided_choice: [] }, 'guided_choice', /non-empty list of strings/);
    await refused({ guided_choice: ['a'], guided_json: { type: 'string' } }, 'guided_choice',
                  /both constrain/);
  });

  // A structural tag (vLLM / SGLang): free text, and from each trigger on one structure whose
  // JSON ajv checks against that structure's schema. A bias on '<' (the trigger, a byte token
  // the story model almost never writes) makes it enter structures now and then.
  const WEATHER = {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } },
    required: ['city'],
    additionalProperties: false,
  };
  const ADD = {
    type: 'object',
    properties: { a: { type: 'integer' }, b: { type: 'integer' } },
    required: ['a', 'b'],
    additionalProperties: false,
  };
  for (const stream of [false, true]) {
    test(`structural_tag, ${stream ? 'streaming' : 'non-streaming'}: every tagged JSON validates`, async (t) => {
      const validators = { get_weather: ajv.compile(WEATHER), add: ajv.compile(ADD) };
      const tok = await post(d, '/tokenize', { prompt: 'a<' });
      const lt = tok.json.tokens[tok.json.tokens.length - 1];
      const tag = {
        type: 'structural_tag',
        structures: [
          { begin: '<function=get_weather>', schema: WEATHER, end: '</function>' },
          { begin: '<function=add>', schema: ADD, end: '</function>' },
        ],
        triggers: ['<function=', '<'],
      };
      let structures = 0;
      for (let seed = 1; seed <= 6; ++seed) {
        const outs = await outputs(
          { messages, response_format: tag, temperature: 1.0, seed, n: 2, max_tokens: 160,
            logit_bias: { [lt]: 24 } },
          stream,
        );
        for (const o of outs) {
          const re = /<function=([a-z_]+)>(.*?)<\/function>/gs;
          let m;
          let last = 0;
          while ((m = re.exec(o.text)) !== null) {
            assert.equal(m.index, o.text.indexOf('<', last), `a trigger with no structure: ${o.text}`);
            const validate = validators[m[1]];
            assert.ok(validate, `unknown structure ${m[1]} in ${o.text}`);
            let parsed;
            assert.doesNotThrow(() => { parsed = JSON.parse(m[2]); }, `not JSON: ${o.text}`);
            assert.ok(validate(parsed), `${JSON.stringify(validate.errors)} in ${o.text}`);
            ++structures;
            last = re.lastIndex;
          }
          // After the last whole structure, a '<' may only begin one that max_tokens cut.
          if (o.text.indexOf('<', last) >= 0) assert.equal(o.finish, 'length', o.text);
        }
      }
      t.diagnostic(`${structures} tagged JSON values, all valid`);
      assert.ok(structures >= 4, `${structures} structures`);
    });
  }

  test('a structural tag in the format form, or a begin no trigger starts, is a 400 naming the field', async () => {
    const refused = async (rf, param, message) => {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL_NAME, messages, response_format: rf }),
        (e) => {
          assert.equal(e.status, 400);
          assert.equal(e.param, param);
          assert.match(e.message, message);
          return true;
        },
      );
    };
    await refused({ type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<'], tags: [] } },
                  'response_format.format', /structures/);
    await refused({ type: 'structural_tag', structures: [{ begin: '<f>', schema: {}, end: '' }], triggers: ['['] },
                  'response_format.structures[0].begin', /none of the triggers/);
  });

  test('an unsupported keyword is a 400 naming it and its path', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL_NAME,
        messages,
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'x',
            schema: { type: 'object', properties: { a: { type: 'number', multipleOf: 0.123456789 } } },
          },
        },
      }),
      (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.param, 'response_format.json_schema.schema');
        assert.match(e.message, /multipleOf/);
        assert.match(e.message, /#\/properties\/a/);
        return true;
      },
    );
  });
});
