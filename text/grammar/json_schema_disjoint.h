// Whether two JSON Schemas can never validate the same value: what lets json_schema.cc compile
// oneOf as anyOf. A value the grammar writes for one branch must fail every other branch, or a
// validator refuses it ("must match exactly one schema"); the grammar cannot count matches, so
// oneOf compiles only when its branches are pairwise disjoint by one of these sufficient tests:
//   1. their JSON types (null, boolean, integer, non-integer number, string, array, object)
//      cannot meet: from `type` (with OpenAPI's `nullable`) and from the values of enum/const;
//      a branch without either may be any type, whatever else it says (JSON Schema's keywords
//      other than `type` constrain only values of their own type);
//   2. both list their values (enum/const) and share none;
//   3. both are objects that require a common property whose value lists are disjoint (a
//      discriminator such as "kind": {"const": "circle"}).
// Anything else is "not provably disjoint", and the compiler refuses the oneOf.
#ifndef BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_DISJOINT_H_
#define BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_DISJOINT_H_

#include <functional>
#include <string>

#include "nlohmann/json.hpp"

namespace banyan::text::grammar {

// Resolves a "$ref" within the document (nullptr when it does not).
using SchemaResolver = std::function<const nlohmann::ordered_json*(const std::string& ref)>;

bool ProvablyDisjoint(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b,
                      const SchemaResolver& resolve);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_JSON_SCHEMA_DISJOINT_H_
