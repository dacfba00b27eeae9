// JSON Schema → Grammar: the structured outputs of response_format, tool parameters and vLLM's
// guided_json.
//
// The grammar accepts a canonical subset of the instances the schema validates, and nothing it
// does not validate:
//   - an object's properties come in the schema's order, required ones always, optional ones
//     when the model chooses; no property outside `properties` is generated (also when
//     `additionalProperties` allows it), except for a map (`additionalProperties` a schema and
//     no `properties`), whose keys are any strings;
//   - numbers are written as JSON writes them, with at most `max_digits` digits in the integer
//     part and the fraction and two in the exponent (finite as a double), and strings with
//     JSON's escapes;
//   - whitespace between tokens is at most `max_whitespace` of space, tab and newline (bounded,
//     so a model cannot fill its tokens with blanks: xgrammar's default is unbounded).
// Supported keywords: type (and type lists, OpenAPI's nullable), properties, required (a key
// outside properties takes additionalProperties' schema), additionalProperties, enum and const
// (beside type, nullable and annotations only), anyOf, oneOf (as anyOf, when no value can match
// two branches: json_schema_disjoint.h), $ref to "#", "#/$defs/..." and "#/definitions/...",
// items, prefixItems, minItems, maxItems, minLength, maxLength (code points), format (date,
// time, date-time, uuid, ipv4, email on strings: string_format.h; int32, int64, float, double
// on numbers), pattern (regex.h; beside a format, the intersection of both automata; not
// beside a length), minimum / maximum / exclusiveMinimum / exclusiveMaximum (integers exactly,
// number_range.h; a bounded number is written without an exponent, as the integers of the
// bounds and the decimals strictly between them), multipleOf (a whole k up to 1000: the
// integers within the bounds that k divides, also for "number"; a decimal k = m / 10^s, m up
// to 1000 and s up to 6 places: the numbers within the bounds, with at most s decimals, that k
// divides in exact decimal arithmetic), and the
// annotations (title, description, default, examples, $schema, $id at the root, $comment,
// deprecated, readOnly, writeOnly). Any other keyword is an InvalidArgument error naming the
// keyword and its JSON pointer: never silently ignored. tests/oracle/grammar_oracle.mjs checks
// all this against ajv and the JSON Schema Test Suite (ctest grammar_ajv_oracle).
#ifndef BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_H_
#define BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_H_

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

struct JsonSchemaOptions {
  int max_whitespace = 2;  // blanks allowed around each structural character
  int max_digits = 15;     // in the integer part and in the fraction
  int max_depth = 32;      // nesting of schemas within the schema
  int max_items = 4096;    // bound on minItems/maxItems/minLength/maxLength values
};

// `schema` is an ordered_json so that properties keep the order the client wrote.
absl::StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema,
                                            const JsonSchemaOptions& options = {});
// The rules of `schema` added to `*grammar` beside the rules it has (a tool's parameters among
// other tools'): returns the rule that matches the schema; "#" in the schema's $refs is the
// schema itself. The grammar's root is left as it was.
absl::StatusOr<int32_t> AddJsonSchemaRules(const nlohmann::ordered_json& schema,
                                           const JsonSchemaOptions& options, Grammar* grammar);
// response_format json_object: any JSON object.
Grammar AnyJsonObjectGrammar(const JsonSchemaOptions& options = {});

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_H_
