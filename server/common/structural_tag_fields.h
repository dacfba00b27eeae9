// A structural tag read off the wire and checked, for both front ends: vLLM's and SGLang's
// response_format {"type": "structural_tag", "structures": [{"begin", "schema", "end"}, ...],
// "triggers": [...]}, and vLLM's structured_outputs.structural_tag (the same object, or a string
// holding it as JSON). What it does: text/grammar/structural_tag.h.
//
// Accepted:
//   - structures: 1 to kMaxTagStructures objects; `begin` a non-empty string that starts with
//     one of the triggers, `end` a string (may be empty), `schema` a JSON Schema object (absent,
//     null or true: any JSON value). Unknown keys in a structure are ignored, as vLLM does.
//   - triggers: 1 to kMaxTagTriggers non-empty strings. A trigger that begins no structure is
//     dropped (it could only ever lead to a grammar that refuses it), duplicates too.
//   - `type`, where present, must be "structural_tag".
//   - the whole tag within kMaxTagBytes as JSON.
// Refused (InvalidArgument naming the field, under the caller's prefix):
//   - the newer form with `format` (xgrammar's structural tag with format objects:
//     triggered_tags, sequence, or, ...): not implemented; the message says to send structures
//     and triggers;
//   - every shape error above. A schema outside the JSON Schema subset is refused when it
//     compiles (StructuredOutputs::Compile), naming structures[i].schema.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/grammar/structural_tag.h"

namespace banyan::server {

inline constexpr size_t kMaxTagStructures = 128;
inline constexpr size_t kMaxTagTriggers = 128;
inline constexpr size_t kMaxTagBytes = 256 << 10;  // the tag as JSON text

// `tag` is the structural tag object; `field` the wire field it came from ("response_format",
// "structured_outputs.structural_tag"), the prefix of every error's param.
absl::StatusOr<text::grammar::StructuralTag> ParseStructuralTag(const nlohmann::ordered_json& tag,
                                                                const std::string& field);

}  // namespace banyan::server
