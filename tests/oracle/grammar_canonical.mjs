// The canonical forms text/grammar/json_schema.h promises to accept: for a value that validates,
// the serializations a model following the schema could write (object keys in schema order, no
// key outside `properties` unless the object is a map or unconstrained, numbers of at most 15
// digits a part and two exponent digits, no whitespace). A value with several readings (anyOf,
// a type list) has several candidates; the automaton must accept at least one of them. An
// empty list means the value lies outside the canonical subset, and completeness is not asked.

const kMaxCandidates = 8;
const kMaxDepth = 64;

const kInteger = /^-?(0|[1-9]\d{0,14})$/;
const kInt32 = /^-?(0|[1-9]\d{0,8})$/;
const kNumber = /^-?(0|[1-9]\d{0,14})(\.\d{1,15})?([eE][+-]?\d{1,2})?$/;
const kDecimal = /^-?(0|[1-9]\d{0,14})(\.\d{1,6})?$/;
const kLoneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function resolve(root, ref) {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let node = root;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    if (node === null || typeof node !== "object" || !(key in node)) return undefined;
    node = node[key];
  }
  return node;
}

function numbersCanonical(value) {
  if (typeof value === "number") return kNumber.test(JSON.stringify(value));
  if (typeof value === "string") return !kLoneSurrogate.test(value);
  if (Array.isArray(value)) return value.every(numbersCanonical);
  if (value !== null && typeof value === "object") {
    return Object.entries(value).every(([k, v]) => !kLoneSurrogate.test(k) && numbersCanonical(v));
  }
  return true;
}

function anyValue(value) {
  return numbersCanonical(value) ? [JSON.stringify(value)] : [];
}

// The schema's types as the compiler reads them (json_schema.cc, Types()).
function types(schema) {
  let out = [];
  if ("type" in schema) {
    out = Array.isArray(schema.type) ? [...schema.type] : [schema.type];
  } else if ("properties" in schema || "required" in schema || "additionalProperties" in schema) {
    out = ["object"];
  } else if (["items", "prefixItems", "minItems", "maxItems"].some((k) => k in schema)) {
    out = ["array"];
  } else if (["minLength", "maxLength", "format"].some((k) => k in schema)) {
    out = ["string"];
  }
  if (schema.nullable === true) out.push("null");
  return out;
}

function hasType(value, type) {
  switch (type) {
    case "string": return typeof value === "string";
    case "integer": return Number.isInteger(value);
    case "number": return typeof value === "number";
    case "boolean": return typeof value === "boolean";
    case "null": return value === null;
    case "object": return value !== null && typeof value === "object" && !Array.isArray(value);
    case "array": return Array.isArray(value);
    default: return false;
  }
}

const kFormats = {
  date: /^\d{4}-(02-(0[1-9]|1\d|2[0-8])|(0[469]|11)-(0[1-9]|[12]\d|30)|(0[13578]|1[02])-(0[1-9]|[12]\d|3[01]))$/,
  time: /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)$/,
  // text/grammar/string_format.h's subset: dotted atoms, '@', two or more labels of <= 63.
  email: new RegExp("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" +
                    "([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+" +
                    "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"),
};

function formatCanonical(format, s) {
  if (format === "date-time") {
    const t = s.indexOf("T");
    return t > 0 && kFormats.date.test(s.slice(0, t)) && kFormats.time.test(s.slice(t + 1));
  }
  return kFormats[format] !== undefined && kFormats[format].test(s);
}

// Every combination of the parts' candidates, joined; at most kMaxCandidates.
function product(parts, join) {
  let out = [[]];
  for (const options of parts) {
    if (options.length === 0) return [];
    const next = [];
    for (const prefix of out) {
      for (const o of options) {
        if (next.length < kMaxCandidates) next.push([...prefix, o]);
      }
    }
    out = next;
  }
  return out.map(join);
}

function objectCandidates(ctx, schema, value, depth) {
  const props = new Map();  // key -> schema, in the order the compiler writes them
  for (const [k, s] of Object.entries(schema.properties ?? {})) props.set(k, s);
  const extra = schema.additionalProperties;
  for (const k of schema.required ?? []) {
    if (!props.has(k)) props.set(k, typeof extra === "object" ? extra : true);
  }
  if (typeof extra === "object" && props.size === 0) {
    const parts = Object.entries(value).map(([k, v]) =>
      candidates(ctx, extra, v, depth + 1).map((c) => `${JSON.stringify(k)}:${c}`));
    return product(parts, (p) => `{${p.join(",")}}`);
  }
  if (!("additionalProperties" in schema) && !("properties" in schema) && !("required" in schema)) {
    return anyValue(value);
  }
  if (Object.keys(value).some((k) => !props.has(k))) return [];
  const parts = [];
  for (const [k, s] of props) {
    if (!(k in value)) continue;
    parts.push(candidates(ctx, s, value[k], depth + 1).map((c) => `${JSON.stringify(k)}:${c}`));
  }
  return product(parts, (p) => `{${p.join(",")}}`);
}

function arrayCandidates(ctx, schema, value, depth) {
  const prefix = schema.prefixItems ?? [];
  const parts = value.map((v, i) => {
    const s = i < prefix.length ? prefix[i] : (schema.items ?? true);
    return candidates(ctx, s, v, depth + 1);
  });
  return product(parts, (p) => `[${p.join(",")}]`);
}

function typedCandidates(ctx, schema, type, value, depth) {
  switch (type) {
    case "string":
      if (kLoneSurrogate.test(value)) return [];
      if ("format" in schema && !formatCanonical(schema.format, value)) return [];
      return [JSON.stringify(value)];
    case "integer":
    case "number": {
      // ajv-formats' int32 is bounded here by nine digits, int64 by the integer grammar.
      const text = JSON.stringify(value);
      if (schema.format === "int32") return kInt32.test(text) ? [text] : [];
      if (type === "integer" || schema.format === "int64") {
        return kInteger.test(text) ? [text] : [];
      }
      // A decimal multipleOf: its multiples with at most six decimals (its own places, which
      // the value, being a multiple, never exceeds); a whole one: the integers it divides, also
      // for "number".
      if ("multipleOf" in schema && !Number.isInteger(schema.multipleOf)) {
        return kDecimal.test(text) ? [text] : [];
      }
      if ("multipleOf" in schema) return kInteger.test(text) ? [text] : [];
      return kNumber.test(text) ? [text] : [];
    }
    case "boolean":
    case "null":
      return [JSON.stringify(value)];
    case "object": return objectCandidates(ctx, schema, value, depth);
    case "array": return arrayCandidates(ctx, schema, value, depth);
    default: return [];
  }
}

// Candidates for `value` (which ajv accepts against the whole schema) under `schema`; a branch
// the value does not satisfy may still yield candidates, which only adds strings to try.
function candidates(ctx, schema, value, depth = 0) {
  if (depth > kMaxDepth) return [];
  if (schema === true) return anyValue(value);
  if (schema === false || schema === null || typeof schema !== "object") return [];
  if (typeof schema.$ref === "string") {
    const target = resolve(ctx.root, schema.$ref);
    return target === undefined ? [] : candidates(ctx, target, value, depth + 1);
  }
  for (const key of ["anyOf", "oneOf", "allOf"]) {
    if (Array.isArray(schema[key])) {
      const out = new Set();
      for (const branch of schema[key]) {
        for (const c of candidates(ctx, branch, value, depth + 1)) out.add(c);
      }
      return [...out].slice(0, kMaxCandidates);
    }
  }
  const ts = types(schema);
  if ("const" in schema || "enum" in schema) {
    // The compiler writes the listed value itself; JSON.stringify of the equal value is it.
    return numbersCanonical(value) ? [JSON.stringify(value)] : [];
  }
  if (ts.length === 0) return anyValue(value);
  const out = new Set();
  for (const t of ts) {
    if (!hasType(value, t)) continue;
    for (const c of typedCandidates(ctx, schema, t, value, depth)) out.add(c);
  }
  return [...out].slice(0, kMaxCandidates);
}

export function canonicalCandidates(schema, value) {
  return candidates({ root: schema }, schema, value);
}

// A small seeded generator (mulberry32) so a failing run can be replayed from its seed.
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Objects of `value` (a parsed sample), each with the path to it, depth first.
function objectsIn(value, out = []) {
  if (Array.isArray(value)) {
    value.forEach((v) => objectsIn(v, out));
  } else if (value !== null && typeof value === "object") {
    out.push(value);
    Object.values(value).forEach((v) => objectsIn(v, out));
  }
  return out;
}

const kWrongValues = [0, 1.5, -7, "x", "", true, false, null, [], {}, [1], { z: 1 }];

// Random mutants of a valid value: a key dropped, a value of the wrong type, a key added, an
// array element of the wrong type, a string changed; each as { kind, value }.
export function mutants(value, rand, count) {
  const pick = (list) => list[Math.floor(rand() * list.length)];
  const out = [];
  for (let i = 0; i < count * 4 && out.length < count; ++i) {
    const copy = structuredClone(value);
    const objects = objectsIn(copy);
    const kind = pick(["drop", "retype", "extra", "restring"]);
    if (objects.length === 0) {
      out.push({ kind: "replace", value: pick(kWrongValues) });
      continue;
    }
    const target = pick(objects);
    const keys = Object.keys(target);
    if (kind === "drop" && keys.length > 0) {
      delete target[pick(keys)];
    } else if (kind === "retype" && keys.length > 0) {
      target[pick(keys)] = structuredClone(pick(kWrongValues));
    } else if (kind === "extra") {
      target[pick(["extra", "zzz", keys[0] ? `${keys[0]}_2` : "k"])] = pick(kWrongValues);
    } else if (kind === "restring") {
      const strings = keys.filter((k) => typeof target[k] === "string");
      if (strings.length === 0) continue;
      target[pick(strings)] = pick(["not-in-enum", "", "2024-13-45", "x".repeat(300)]);
    } else {
      continue;
    }
    out.push({ kind, value: copy });
  }
  return out;
}
