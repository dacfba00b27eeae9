#include "server/common/structural_tag_fields.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/json_fields.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

using OJson = nlohmann::ordered_json;


absl::StatusOr<text::grammar::TagStructure> ParseStructure(const OJson& s, const std::string& at) {
  if (!s.is_object()) {
    return InvalidParam(at, absl::StrCat(at, " must be an object {\"begin\", \"schema\", "
                                             "\"end\"}"));
  }
  text::grammar::TagStructure out;
  const OJson* begin = PresentField(s, "begin");
  if (begin == nullptr || !begin->is_string() || begin->get_ref<const std::string&>().empty()) {
    return InvalidParam(at + ".begin", absl::StrCat(at, ".begin must be a non-empty string"));
  }
  out.begin = begin->get<std::string>();
  const OJson* end = PresentField(s, "end");
  if (end == nullptr || !end->is_string()) {
    return InvalidParam(at + ".end", absl::StrCat(at, ".end must be a string (it may be empty)"));
  }
  out.end = end->get<std::string>();
  const OJson* schema = PresentField(s, "schema");
  if (schema == nullptr || (schema->is_boolean() && schema->get<bool>())) {
    out.schema = OJson::object();  // any JSON value
  } else if (schema->is_object()) {
    out.schema = *schema;
  } else {
    return InvalidParam(at + ".schema",
                        absl::StrCat(at, ".schema must be a JSON Schema object"));
  }
  return out;
}

}  // namespace

absl::StatusOr<text::grammar::StructuralTag> ParseStructuralTag(const OJson& tag,
                                                                const std::string& field) {
  if (!tag.is_object()) {
    return InvalidParam(field, absl::StrCat(field, " must be a structural tag object with "
                                                   "'structures' and 'triggers'"));
  }
  if (const OJson* type = PresentField(tag, "type");
      type != nullptr && !(type->is_string() && type->get<std::string>() == "structural_tag")) {
    return InvalidParam(field + ".type", absl::StrCat(field, ".type must be \"structural_tag\""));
  }
  if (PresentField(tag, "format") != nullptr) {
    return InvalidParam(
        field + ".format",
        absl::StrCat(field,
                     ".format: the structural tag's format form (triggered_tags, sequence, ...) "
                     "is not supported by this server; send 'structures' "
                     "[{\"begin\", \"schema\", \"end\"}] and 'triggers' instead"));
  }
  const OJson* structures = PresentField(tag, "structures");
  if (structures == nullptr || !structures->is_array() || structures->empty()) {
    return InvalidParam(field + ".structures",
                        absl::StrCat(field, ".structures must be a non-empty array of "
                                            "{\"begin\", \"schema\", \"end\"}"));
  }
  if (structures->size() > kMaxTagStructures) {
    return InvalidParam(field + ".structures",
                        absl::StrCat(field, ".structures: at most ", kMaxTagStructures,
                                     " structures, got ", structures->size()));
  }
  const OJson* triggers = PresentField(tag, "triggers");
  if (triggers == nullptr || !triggers->is_array() || triggers->empty()) {
    return InvalidParam(field + ".triggers",
                        absl::StrCat(field, ".triggers must be a non-empty array of strings"));
  }
  if (triggers->size() > kMaxTagTriggers) {
    return InvalidParam(field + ".triggers",
                        absl::StrCat(field, ".triggers: at most ", kMaxTagTriggers,
                                     " triggers, got ", triggers->size()));
  }
  if (const size_t bytes = tag.dump().size(); bytes > kMaxTagBytes) {
    return InvalidParam(field, absl::StrCat(field, " takes ", bytes, " bytes as JSON; the limit is ",
                                            kMaxTagBytes));
  }
  std::vector<std::string> all_triggers;
  for (size_t j = 0; j < triggers->size(); ++j) {
    const OJson& t = (*triggers)[j];
    if (!t.is_string() || t.get_ref<const std::string&>().empty()) {
      const std::string at = absl::StrCat(field, ".triggers[", j, "]");
      return InvalidParam(at, absl::StrCat(at, " must be a non-empty string"));
    }
    all_triggers.push_back(t.get<std::string>());
  }
  text::grammar::StructuralTag out;
  std::vector<bool> used(all_triggers.size(), false);
  for (size_t i = 0; i < structures->size(); ++i) {
    const std::string at = absl::StrCat(field, ".structures[", i, "]");
    absl::StatusOr<text::grammar::TagStructure> s = ParseStructure((*structures)[i], at);
    if (!s.ok()) return s.status();
    bool triggered = false;
    for (size_t j = 0; j < all_triggers.size(); ++j) {
      if (s->begin.rfind(all_triggers[j], 0) == 0) used[j] = triggered = true;
    }
    if (!triggered) {
      return InvalidParam(at + ".begin",
                          absl::StrCat(at, ".begin starts with none of the triggers: a "
                                           "structure is entered only through a trigger that "
                                           "begins it"));
    }
    out.structures.push_back(*std::move(s));
  }
  for (size_t j = 0; j < all_triggers.size(); ++j) {
    const bool seen = std::find(out.triggers.begin(), out.triggers.end(), all_triggers[j]) !=
                      out.triggers.end();
    if (used[j] && !seen) out.triggers.push_back(all_triggers[j]);
  }
  return out;
}

}  // namespace banyan::server
