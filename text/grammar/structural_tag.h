// Structural tags: free text in which, from each trigger on, one tagged structure is forced.
// vLLM's and SGLang's response_format {"type": "structural_tag", "structures": [...],
// "triggers": [...]} (xgrammar's first structural-tag form).
//
// A structure is a begin string, a JSON Schema and an end string. The output is free until its
// text contains a trigger; from the trigger's first byte it is one structure whose begin starts
// with that trigger: the begin, a JSON value the schema validates (json_schema.h's canonical
// subset), the end; then free again, watching for the next trigger. The grammar built here is
// what holds between a trigger and the end of its structure: the alternation of every
// structure, begin to end, read from the trigger's first byte on
// (TokenConstraint::grammar_reads_trigger), so the trigger fed first keeps exactly the
// structures that begin with it, whichever trigger fired.
//
// The checks that make a tag meaningful (structures and triggers not empty, every begin
// starting with a trigger) are the caller's, who names the wire fields
// (server/common/structured_outputs.h); StructuralTagGrammar assumes them.
#ifndef BANYAN_TEXT_GRAMMAR_STRUCTURAL_TAG_H_
#define BANYAN_TEXT_GRAMMAR_STRUCTURAL_TAG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"

namespace banyan::text::grammar {

struct TagStructure {
  std::string begin;              // starts with one of the tag's triggers; not empty
  nlohmann::ordered_json schema;  // the JSON value between begin and end ({}: any value)
  std::string end;                // may be empty: free text right after the value
};

struct StructuralTag {
  std::vector<TagStructure> structures;  // not empty
  std::vector<std::string> triggers;     // not empty, each a prefix of some structure's begin
};

// The grammar of one structure from its begin's first byte to its end's last. An error is the
// JSON Schema compiler's message for a structure's schema, prefixed "structures[i].schema: ".
absl::StatusOr<Grammar> StructuralTagGrammar(const StructuralTag& tag,
                                             const JsonSchemaOptions& options = {});

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_STRUCTURAL_TAG_H_
