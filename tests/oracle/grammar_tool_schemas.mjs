// Tool-call and response_format schemas of the kinds clients send, for grammar_oracle.mjs: the
// grammar's random samples must all validate, and mutants of them must be refused by the
// automaton whenever ajv refuses them.
export const toolSchemas = {
  weather: {
    type: "object",
    properties: {
      location: { type: "string", description: "City and country" },
      unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      days: { type: "integer" },
    },
    required: ["location"],
    additionalProperties: false,
  },
  web_search: {
    type: "object",
    properties: {
      query: { type: "string", minLength: 1, maxLength: 40 },
      max_results: { type: "integer", enum: [5, 10, 20] },
      safe: { type: "boolean" },
      sites: { type: "array", items: { type: "string" }, maxItems: 3 },
    },
    required: ["query", "safe"],
  },
  calendar_event: {
    type: "object",
    properties: {
      title: { type: "string", maxLength: 30 },
      start: { type: "string", format: "date-time" },
      end: { type: "string", format: "date-time" },
      day: { type: "string", format: "date" },
      reminder: { type: "string", format: "time" },
      attendees: {
        type: "array",
        items: {
          type: "object",
          properties: { email: { type: "string" }, optional: { type: "boolean" } },
          required: ["email"],
          additionalProperties: false,
        },
      },
    },
    required: ["title", "start", "end"],
    additionalProperties: false,
  },
  order: {
    type: "object",
    properties: {
      order_id: { type: "string", format: "uuid" },
      items: {
        type: "array",
        minItems: 1,
        maxItems: 4,
        items: {
          type: "object",
          properties: {
            sku: { type: "string", minLength: 3, maxLength: 8 },
            quantity: { type: "integer" },
            price: { type: "number" },
          },
          required: ["sku", "quantity", "price"],
        },
      },
      client_ip: { type: "string", format: "ipv4" },
    },
    required: ["order_id", "items"],
  },
  nullable_fields: {
    type: "object",
    properties: {
      name: { anyOf: [{ type: "string" }, { type: "null" }] },
      age: { type: ["integer", "null"] },
      nickname: { type: "string", nullable: true },
      score: { oneOf: [{ type: "number" }, { type: "null" }] },
    },
    required: ["name", "age", "nickname", "score"],
  },
  tree: {
    $defs: {
      node: {
        type: "object",
        properties: {
          value: { type: "integer" },
          children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 3 },
        },
        required: ["value"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  linked_list: {
    type: "object",
    properties: {
      head: { type: "string", maxLength: 5 },
      tail: { anyOf: [{ $ref: "#" }, { type: "null" }] },
    },
    required: ["head", "tail"],
  },
  labels_map: {
    type: "object",
    additionalProperties: { type: "string", maxLength: 10 },
  },
  scores_map: {
    type: "object",
    additionalProperties: { type: "array", items: { type: "number" }, maxItems: 3 },
  },
  tuple_point: {
    type: "array",
    prefixItems: [{ type: "number" }, { type: "number" }, { enum: ["m", "km"] }],
    items: false,
    minItems: 2,
  },
  status_enum: {
    type: "object",
    properties: {
      status: { enum: ["open", "closed", null, 3, true] },
      priority: { const: "high" },
      tags: { type: "array", items: { enum: ["a", "b", "c"] }, minItems: 1, maxItems: 2 },
    },
    required: ["status"],
  },
  matrix: {
    type: "object",
    properties: {
      rows: {
        type: "array",
        items: { type: "array", items: { type: "integer" }, minItems: 1, maxItems: 3 },
        maxItems: 3,
      },
    },
    required: ["rows"],
  },
  any_payload: {
    type: "object",
    properties: { kind: { type: "string" }, payload: true, meta: {} },
    required: ["kind", "payload"],
  },
  shapes_union: {
    $defs: {
      circle: {
        type: "object",
        properties: { kind: { const: "circle" }, r: { type: "number" } },
        required: ["kind", "r"],
        additionalProperties: false,
      },
      rect: {
        type: "object",
        properties: { kind: { const: "rect" }, w: { type: "number" }, h: { type: "number" } },
        required: ["kind", "w", "h"],
        additionalProperties: false,
      },
    },
    type: "object",
    properties: {
      shapes: { type: "array", items: { anyOf: [{ $ref: "#/$defs/circle" }, { $ref: "#/$defs/rect" }] } },
    },
    required: ["shapes"],
  },
  required_outside_properties: {
    type: "object",
    properties: { a: { type: "string" } },
    required: ["a", "b"],
  },
  // format, multipleOf, and a pattern beside a format as zod 4 sends them (patterns written
  // here in that spirit: each must agree with its format).
  signup_form: {
    type: "object",
    properties: {
      email: { type: "string", format: "email" },
      id: { type: "string", format: "uuid",
            pattern: "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$" },
      birthday: { type: "string", format: "date",
                  pattern: "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$" },
      joined: { type: "string", format: "date-time",
                pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?(Z|[+-]\\d{2}:\\d{2})$" },
      contact: { type: "string", format: "email", pattern: "@example\\.(com|org)$" },
      seats: { type: "integer", multipleOf: 5, minimum: 0, maximum: 100 },
      week_step: { type: "integer", multipleOf: 7 },
      price_cents: { type: "number", multipleOf: 25, exclusiveMinimum: -1000, maximum: 100000 },
      batch: { type: "integer", multipleOf: 1000, minimum: 1 },
    },
    required: ["email", "id", "birthday", "joined", "contact", "seats", "week_step", "price_cents",
               "batch"],
  },
  // Decimal multipleOf, as zod's number().multipleOf(0.01) sends money (within bounds: ajv's
  // check divides doubles, which stays exact enough only for values of a few digits).
  order_line: {
    type: "object",
    properties: {
      price: { type: "number", multipleOf: 0.01, minimum: 0, maximum: 10000 },
      rating: { type: "number", multipleOf: 0.5, minimum: 0, maximum: 5 },
      discount: { type: "number", multipleOf: 0.25, minimum: -10, exclusiveMaximum: 10 },
      weight_kg: { type: "number", multipleOf: 0.001, minimum: 0, maximum: 1000 },
      quantity: { type: "integer", multipleOf: 2.5, minimum: 0, maximum: 1000 },
    },
    required: ["price", "rating", "discount", "weight_kg", "quantity"],
    additionalProperties: false,
  },
  unicode_text: {
    type: "object",
    properties: {
      note: { type: "string", minLength: 2, maxLength: 4 },
      "clé": { type: "string" },
      "quote\"key": { type: "boolean" },
    },
    required: ["note", "clé", "quote\"key"],
  },
};

// Keyword combinations at the edge of the supported subset, run like the suite's groups: each
// must either compile and agree with ajv, or be refused.
export const edgeGroups = [
  { description: "enum beside minLength", schema: { type: "string", enum: ["a", "abc"], minLength: 2 },
    data: ["a", "abc", "ab"] },
  { description: "const beside enum", schema: { const: "x", enum: ["y"] }, data: ["x", "y"] },
  { description: "enum of objects beside required",
    schema: { type: "object", required: ["k"], enum: [{ k: 1 }, { j: 2 }] }, data: [{ k: 1 }, { j: 2 }] },
  { description: "overlapping oneOf", schema: { oneOf: [{ type: "integer" }, { type: "number" }] },
    data: [1, 1.5, "x"] },
  { description: "oneOf of untyped branches",
    schema: { oneOf: [{ properties: { a: { type: "integer" } } }, { type: "string" }] }, data: ["x", { a: 1 }] },
  { description: "disjoint oneOf by type", schema: { oneOf: [{ type: "string" }, { type: "null" }] },
    data: ["x", null, 1] },
  { description: "oneOf with a const discriminator",
    schema: { oneOf: [
      { type: "object", properties: { kind: { const: "a" }, x: { type: "integer" } }, required: ["kind"] },
      { type: "object", properties: { kind: { const: "b" }, y: { type: "string" } }, required: ["kind"] }] },
    data: [{ kind: "a", x: 1 }, { kind: "b", y: "s" }, { kind: "c" }] },
  { description: "required key outside properties, values by additionalProperties",
    schema: { type: "object", properties: { a: { type: "string" } }, required: ["b"],
              additionalProperties: { type: "integer" } },
    data: [{ b: 1 }, { b: "x" }, { a: "s", b: 2 }] },
  { description: "required key outside properties, additionalProperties false",
    schema: { type: "object", properties: { a: { type: "string" } }, required: ["b"],
              additionalProperties: false },
    data: [{ b: 1 }, { a: "x" }] },
  { description: "map with a required key",
    schema: { type: "object", additionalProperties: { type: "boolean" }, required: ["on"] },
    data: [{ on: true }, { on: 1 }, {}] },
  { description: "int32 format", schema: { type: "integer", format: "int32" },
    data: [1, 2147483647, 2147483648, 99999999999] },
  { description: "nested $id changes what # means",
    schema: { type: "object", properties: {
      child: { $id: "https://example.com/child", type: "array", items: { anyOf: [{ type: "integer" }, { $ref: "#" }] } } } },
    data: [{ child: [1, [2]] }, { child: [{ child: [] }] }] },
  { description: "minLength counts code points",
    schema: { type: "string", minLength: 2, maxLength: 2 }, data: ["\ud83d\ude00", "a\ud83d\ude00", "ab"] },
  { description: "properties without type", schema: { properties: { a: { type: "integer" } } },
    data: [{ a: 1 }, "x", 3] },
  { description: "multipleOf on integers", schema: { type: "integer", multipleOf: 5 },
    data: [0, 5, -35, 7, 1e3, 1.5] },
  { description: "multipleOf within bounds",
    schema: { type: "integer", multipleOf: 3, minimum: 4, exclusiveMaximum: 30 },
    data: [3, 6, 27, 30, -3] },
  { description: "multipleOf on a number", schema: { type: "number", multipleOf: 4, maximum: 40 },
    data: [4, 8, 6, 8.5, 44, -400] },
  { description: "multipleOf without type", schema: { multipleOf: 2 }, data: [2, 3, "x", null] },
  { description: "fractional multipleOf", schema: { type: "number", multipleOf: 0.5 },
    data: [1.5, 1.25] },
  { description: "decimal multipleOf within bounds",
    schema: { type: "number", multipleOf: 0.01, minimum: -5, maximum: 5 },
    data: [0.07, 0.3, -4.99, 0.075, 5.01, 3, 0.1] },
  { description: "decimal multipleOf on integers", schema: { type: "integer", multipleOf: 0.4 },
    data: [2, 4, -8, 0.8, 3] },
  { description: "decimal multipleOf beyond the supported places",
    schema: { type: "number", multipleOf: 0.0000001 }, data: [0.0000003] },
  { description: "email format", schema: { type: "string", format: "email" },
    data: ["a@b.co", "first.last+tag@mail.example.org", "a@b", "a..b@c.de", "x", "\"q\"@a.bc"] },
  { description: "pattern beside uuid format",
    schema: { type: "string", format: "uuid", pattern: "^[0-9a-f]{8}-[0-9a-f]{4}-4" },
    data: ["123e4567-e89b-42d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000", "x"] },
  { description: "pattern beside date format", schema: { type: "string", format: "date", pattern: "-12-" },
    data: ["2024-12-25", "2024-11-25", "2024-12-32"] },
  { description: "pattern beside email format, disjoint", schema: { type: "string", format: "email", pattern: "^[^@]*$" },
    data: ["a@b.co", "ab"] },
];
