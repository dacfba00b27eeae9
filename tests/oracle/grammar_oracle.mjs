// The grammar engine (text/grammar, through grammar_oracle_cli) against ajv and the JSON Schema
// Test Suite. Run by the ctest grammar_ajv_oracle:
//   node grammar_oracle.mjs --cli <grammar_oracle_cli> [--seed N] [--verbose]
//
// Checks, for every schema the compiler accepts:
//   soundness:    every instance the automaton accepts, and every random sample the grammar
//                 generates, validates under ajv (Ajv2020 with ajv-formats);
//   completeness: every instance ajv accepts is accepted in at least one of its canonical forms
//                 (grammar_canonical.mjs), when it has one.
// Schemas the compiler refuses are counted by the keyword its message names, never dropped.
// Prints a summary and exits 1 on any disagreement, invalid sample or dead automaton state.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { canonicalCandidates, mutants, seededRandom } from "./grammar_canonical.mjs";
import { edgeGroups, toolSchemas } from "./grammar_tool_schemas.mjs";

const require = createRequire(import.meta.url);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const args = process.argv.slice(2);
const argValue = (name) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const cli = argValue("--cli");
const verbose = args.includes("--verbose");
if (!cli) {
  console.error("usage: grammar_oracle.mjs --cli <grammar_oracle_cli> [--seed N] [--verbose]");
  process.exit(2);
}
const seed = Number(argValue("--seed") ?? process.env.BANYAN_TEST_SEED ?? crypto.randomInt(2 ** 31));
console.log(`grammar_oracle: seed ${seed} (replay with --seed ${seed} or BANYAN_TEST_SEED=${seed})`);
const rand = seededRandom(seed);

// Each disagreement is counted; the first of each kind for each schema is printed.
const failures = [];
const failureKeys = new Set();
const fail = (kind, name, what) => {
  failures.push(what);
  const key = `${kind}\n${name}`;
  if (!failureKeys.has(key)) {
    failureKeys.add(key);
    console.log(`DISAGREEMENT ${kind}: ${name}: ${what}`);
  }
};

// ajv compiles each schema once; $schema is dropped because the suite's draft-04 meta-schema
// is not loaded (the engine reads every schema with the 2020-12 meaning of its keywords).
// multipleOfPrecision: ajv divides doubles (0.0075 / 0.0001 is 74.99999999999999, which it would
// call no multiple); the engine's decimal multipleOf is exact, so ajv rounds the quotient to 9
// places (json_schema_test checks the exact cases where doubles would err).
function makeValidator(schema) {
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true,
                            multipleOfPrecision: 9 });
  addFormats(ajv);
  const copy = typeof schema === "object" && schema !== null ? { ...schema } : schema;
  if (typeof copy === "object" && copy !== null) delete copy.$schema;
  try {
    return ajv.compile(copy);
  } catch (e) {
    return null;
  }
}

// One CLI run for a batch of requests; replies in the same order.
function runCli(requests) {
  const input = requests.map((r) => JSON.stringify(r)).join("\n") + "\n";
  const result = spawnSync(cli, [], { input, maxBuffer: 1 << 30, encoding: "utf8" });
  if (result.status !== 0) {
    console.error(`grammar_oracle_cli failed (${result.status}): ${result.stderr}`);
    process.exit(1);
  }
  const lines = result.stdout.split("\n").filter((l) => l.length > 0);
  if (lines.length !== requests.length) {
    console.error(`grammar_oracle_cli answered ${lines.length} lines for ${requests.length}`);
    process.exit(1);
  }
  return lines.map((l) => JSON.parse(l));
}

// The keyword a refusal names, for the summary.
function refusalKeyword(message) {
  let m = message.match(/unsupported JSON Schema keyword '([^']+)'/);
  if (m) return m[1];
  m = message.match(/'([^']+)' beside '([^']+)'/);
  if (m) return `${m[1]} beside ${m[2]}`;
  m = message.match(/unsupported string format '([^']+)'/);
  if (m) return `format ${m[1]}`;
  m = message.match(/^the schema at (\S+) must be an object/);
  if (m) return `${m[1].split("/").pop()} (not a schema)`;
  m = message.match(/^\$ref '.*' at .* is not supported/);
  if (m) return "$ref (not local)";
  m = message.match(/^'([^']+)'/) ?? message.match(/'([^']+)'/);
  if (m) return m[1];
  return message.replace(/ at #.*$/, "");
}

const stats = {
  suiteGroups: 0, suiteCompiled: 0, edgeCompiled: 0, suiteRefused: 0, refusedBy: new Map(), ajvRefused: 0,
  suiteInstances: 0, canonicalChecked: 0, outsideSubset: 0, labelMismatch: 0,
  samples: 0, stuck: 0, mutants: 0, mutantsRefusedByBoth: 0, mutantsFlagged: 0, compileUs: [],
};

// Soundness and completeness of one schema over values: returns the CLI request and a function
// that checks its reply.
function instanceChecks(name, schema, validate, values) {
  const texts = [];
  const checks = [];
  for (const { label, value } of values) {
    const forms = [JSON.stringify(value), JSON.stringify(value, null, 1)];
    const candidates = canonicalCandidates(schema, value);
    const first = texts.length;
    texts.push(...forms, ...candidates);
    checks.push({ label, value, first, forms: forms.length, candidates });
  }
  const check = (accepted) => {
    for (const c of checks) {
      const valid = validate(c.value);
      const all = texts.slice(c.first, c.first + c.forms + c.candidates.length);
      all.forEach((text, i) => {
        if (accepted[c.first + i] && !validate(JSON.parse(text))) {
          fail("soundness", name, `(${c.label}) the automaton accepts ${text} but ajv refuses it`);
        }
      });
      if (valid && c.candidates.length === 0) ++stats.outsideSubset;
      if (valid && c.candidates.length > 0) {
        ++stats.canonicalChecked;
        const any = c.candidates.some((_, i) => accepted[c.first + c.forms + i]);
        if (!any) {
          fail("completeness", name, `(${c.label}) ajv accepts ${JSON.stringify(c.value)} but ` +
               `the automaton refuses every canonical form: ${c.candidates.join(" | ")}`);
        }
      }
    }
  };
  return { texts, check, count: checks.length };
}

function checkSamples(name, validate, reply) {
  if (reply.error !== undefined) fail("samples", name, reply.error);
  stats.stuck += reply.stuck ?? 0;
  const parsed = [];
  for (const text of reply.samples ?? []) {
    ++stats.samples;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      fail("samples", name, `the grammar generated text that is not JSON: ${text}`);
      continue;
    }
    if (!validate(value)) {
      fail("samples", name, `the grammar generated ${text}, which ajv refuses: ` +
           JSON.stringify(validate.errors));
      continue;
    }
    parsed.push(value);
  }
  return parsed;
}

// (a) The JSON Schema Test Suite. npm's json-schema-test-suite 0.0.10 carries drafts 3 and 4
// (draft 4 is read; a later draft is preferred where present); @json-schema-org/tests would
// need a git fetch from GitHub at install time.
function suiteFiles() {
  const root = path.dirname(require.resolve("json-schema-test-suite/package.json"));
  const dir = ["draft2020-12", "draft7", "draft4"].map((d) => path.join(root, "tests", d))
    .find((d) => fs.existsSync(d));
  console.log(`suite: ${path.relative(root, dir)} of json-schema-test-suite ` +
              require("json-schema-test-suite/package.json").version);
  const files = [];
  for (const sub of ["", "optional"]) {
    const d = path.join(dir, sub);
    if (!fs.existsSync(d)) continue;
    for (const f of fs.readdirSync(d).filter((f) => f.endsWith(".json")).sort()) {
      files.push(path.join(sub, f));
    }
  }
  return files.map((f) => ({ file: f, groups: JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")) }));
}

function runSuite() {
  const groups = [];
  for (const { file, groups: list } of suiteFiles()) {
    for (const g of list) groups.push({ name: `${file}: ${g.description}`, ...g });
  }
  stats.suiteOnly = groups.length;
  for (const g of edgeGroups) {
    groups.push({ name: `edge: ${g.description}`, schema: g.schema, edge: true,
                  tests: g.data.map((data, i) => ({ description: `data ${i}`, data, valid: null })) });
  }
  stats.suiteGroups = groups.length;
  const probe = runCli(groups.map((g) => ({ schema: g.schema })));
  for (const r of probe) if (r.compiled) stats.compileUs.push(r.compile_us);
  const jobs = [];
  const refusedNames = new Map();
  groups.forEach((g, i) => {
    if (g.edge) {
      if (probe[i].compiled) ++stats.edgeCompiled;
    } else if (!probe[i].compiled) {
      ++stats.suiteRefused;
    } else {
      ++stats.suiteCompiled;
    }
    if (!probe[i].compiled) {
      const k = refusalKeyword(probe[i].error);
      stats.refusedBy.set(k, (stats.refusedBy.get(k) ?? 0) + 1);
      if (!refusedNames.has(k)) refusedNames.set(k, []);
      refusedNames.get(k).push(g.name);
      return;
    }
    const validate = makeValidator(g.schema);
    if (validate === null) {
      ++stats.ajvRefused;
      return;
    }
    for (const t of g.tests) {
      if (!g.edge) ++stats.suiteInstances;
      if (t.valid !== null && validate(t.data) !== t.valid) {
        ++stats.labelMismatch;
        if (verbose) console.log(`note: ajv (2020-12) and the draft-4 label differ: ${g.name} / ${t.description}`);
      }
    }
    const checks = instanceChecks(g.name, g.schema, validate,
                                  g.tests.map((t) => ({ label: t.description, value: t.data })));
    jobs.push({ g, validate, checks });
  });
  const replies = runCli(jobs.map(({ g, checks }, i) => ({
    schema: g.schema, instances: checks.texts, samples: 20, seed: seed + i })));
  jobs.forEach(({ g, validate, checks }, i) => {
    checks.check(replies[i].accepted);
    checkSamples(g.name, validate, replies[i]);
  });
  if (verbose) {
    for (const [k, names] of refusedNames) console.log(`refused by ${k}: ${names.join("; ")}`);
  }
}

// (b) Realistic tool schemas: samples, their canonical forms and their mutants.
function runToolSchemas() {
  const entries = Object.entries(toolSchemas);
  const sampled = runCli(entries.map(([, schema], i) => ({
    schema, samples: 200, seed: seed + 100000 + i })));
  for (const r of sampled) if (r.compiled) stats.compileUs.push(r.compile_us);
  const jobs = [];
  entries.forEach(([name, schema], i) => {
    if (!sampled[i].compiled) {
      fail("compile", name, `the tool schema does not compile: ${sampled[i].error}`);
      return;
    }
    const validate = makeValidator(schema);
    const values = checkSamples(name, validate, sampled[i]);
    const cases = values.slice(0, 60).map((value) => ({ label: "sample", value }));
    for (const value of values.slice(0, 60)) {
      for (const m of mutants(value, rand, 3)) cases.push({ label: `mutant ${m.kind}`, value: m.value });
    }
    const checks = instanceChecks(name, schema, validate, cases);
    jobs.push({ name, schema, validate, cases, checks });
  });
  const replies = runCli(jobs.map(({ schema, checks }) => ({ schema, instances: checks.texts })));
  jobs.forEach(({ validate, cases, checks }, i) => {
    checks.check(replies[i].accepted);
    let at = 0;
    const perCase = [];
    for (const c of cases) {
      // instanceChecks put each case's compact form first.
      perCase.push({ c, first: at });
      at += 2 + canonicalCandidates(jobs[i].schema, c.value).length;
    }
    for (const { c, first } of perCase) {
      if (!c.label.startsWith("mutant")) continue;
      ++stats.mutants;
      const valid = validate(c.value);
      const accepted = replies[i].accepted[first];
      if (!valid && !accepted) ++stats.mutantsRefusedByBoth;
      if (valid && !accepted) ++stats.mutantsFlagged;  // valid, outside the canonical subset
    }
  });
}

runSuite();
runToolSchemas();

// Compile time per schema (schema -> automaton -> classes of positions), this machine.
const compileUs = [...stats.compileUs].sort((a, b) => a - b);
const quantile = (q) => compileUs.length ? compileUs[Math.min(compileUs.length - 1,
  Math.floor(q * compileUs.length))].toFixed(0) : "-";
const refusals = [...stats.refusedBy.entries()].sort((a, b) => b[1] - a[1])
  .map(([k, n]) => `${k} ${n}`).join(", ");
console.log(`
schemas in the suite        ${stats.suiteOnly}
  compiled                  ${stats.suiteCompiled}${stats.ajvRefused ? ` (ajv refused ${stats.ajvRefused})` : ""}
  refused                   ${stats.suiteRefused}
edge cases                  ${stats.suiteGroups - stats.suiteOnly}, compiled ${stats.edgeCompiled}
refusals by keyword         ${refusals}
suite instances checked     ${stats.suiteInstances} of compiled schemas (ajv and the draft-4 label differ on ${stats.labelMismatch})
canonical forms checked     ${stats.canonicalChecked} (valid but outside the canonical subset: ${stats.outsideSubset})
tool schemas                ${Object.keys(toolSchemas).length}
samples validated           ${stats.samples} (walks dropped at the step cap: ${stats.stuck})
mutants                     ${stats.mutants}: refused by both ${stats.mutantsRefusedByBoth}, valid but outside the subset ${stats.mutantsFlagged}
compile time, µs            median ${quantile(0.5)}, p99 ${quantile(0.99)}, max ${quantile(1)} over ${compileUs.length} schemas (to automaton and classes)
disagreements               ${failures.length}`);
process.exit(failures.length === 0 ? 0 : 1);
