#include "server/common/structured_outputs.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

using OJson = nlohmann::ordered_json;

const OJson* Present(const OJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::optional<StructuredOutputSpec>> FromResponseFormat(const OJson& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return InvalidParam("response_format",
                        "response_format must be an object with a string 'type'");
  }
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    return StructuredOutputSpec{.kind = StructuredOutputSpec::Kind::kJsonObject,
                                .schema = {}, .field = "response_format"};
  }
  if (type != "json_schema") {
    return InvalidParam("response_format.type",
                        absl::StrCat("response_format type '", type,
                                     "' is not supported; use text, json_object or json_schema"));
  }
  const OJson* js = Present(rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return InvalidParam("response_format.json_schema",
                        "response_format type 'json_schema' needs a 'json_schema' object");
  }
  const OJson* name = Present(*js, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return InvalidParam("response_format.json_schema.name",
                        "response_format.json_schema.name must be a non-empty string");
  }
  if (const OJson* strict = Present(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
    return InvalidParam("response_format.json_schema.strict",
                        "response_format.json_schema.strict must be a boolean");
  }
  const OJson* schema = Present(*js, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return InvalidParam("response_format.json_schema.schema",
                        "response_format.json_schema.schema must be a JSON Schema object");
  }
  return StructuredOutputSpec{.kind = StructuredOutputSpec::Kind::kJsonSchema, .schema = *schema,
                              .field = "response_format.json_schema.schema"};
}

absl::StatusOr<StructuredOutputSpec> FromGuidedJson(const OJson& g) {
  OJson schema = g;
  if (g.is_string()) {
    const std::string& text = g.get_ref<const std::string&>();
    absl::StatusOr<OJson> parsed =
        ParseOrderedJson(text, "guided_json", JsonLimits{.max_depth = kMaxJsonDepth,
                                                         .max_bytes = text.size()});
    if (!parsed.ok()) return InvalidParam("guided_json", std::string(parsed.status().message()));
    schema = *std::move(parsed);
  }
  if (!schema.is_object()) {
    return InvalidParam("guided_json",
                        "guided_json must be a JSON Schema: an object, or a string holding one");
  }
  return StructuredOutputSpec{.kind = StructuredOutputSpec::Kind::kJsonSchema,
                              .schema = std::move(schema), .field = "guided_json"};
}

}  // namespace

absl::StatusOr<std::optional<StructuredOutputSpec>> ParseStructuredOutputFields(
    const OJson& body) {
  std::optional<StructuredOutputSpec> from_rf;
  if (const OJson* rf = Present(body, "response_format")) {
    absl::StatusOr<std::optional<StructuredOutputSpec>> spec = FromResponseFormat(*rf);
    if (!spec.ok()) return spec.status();
    from_rf = *std::move(spec);
  }
  const OJson* g = Present(body, "guided_json");
  if (g == nullptr) return from_rf;
  if (from_rf.has_value()) {
    return InvalidParam("guided_json",
                        "guided_json and a response_format other than 'text' both constrain the "
                        "output; send one of them");
  }
  absl::StatusOr<StructuredOutputSpec> spec = FromGuidedJson(*g);
  if (!spec.ok()) return spec.status();
  return std::optional<StructuredOutputSpec>(*std::move(spec));
}

std::shared_ptr<const text::grammar::Vocabulary> GrammarVocabulary(
    const text::Tokenizer& tokenizer, const std::vector<std::string>& keep) {
  const int n = tokenizer.vocab_size();
  std::vector<std::string> bytes(n);
  for (int id = 0; id < n; ++id) bytes[id] = tokenizer.TokenBytes(id);
  auto blank = [&](int id) {
    if (id >= 0 && id < n) bytes[id].clear();
  };
  blank(tokenizer.bos_id());
  blank(tokenizer.eos_id());
  blank(tokenizer.unk_id());
  for (const auto& [spelling, id] : tokenizer.SpecialTokens()) blank(id);
  for (const auto& [spelling, id] : tokenizer.SpecialTokens()) {
    if (id >= 0 && id < n && std::find(keep.begin(), keep.end(), spelling) != keep.end()) {
      bytes[id] = spelling;
    }
  }
  return std::make_shared<const text::grammar::Vocabulary>(std::move(bytes));
}

StructuredOutputs::StructuredOutputs(const text::Tokenizer* tokenizer, size_t cache_entries,
                                     text::grammar::JsonSchemaOptions options)
    : tokenizer_(tokenizer), cache_entries_(cache_entries), options_(options) {}

text::grammar::ConstraintCache& StructuredOutputs::cache() {
  absl::call_once(once_, [this] {
    cache_ = std::make_unique<text::grammar::ConstraintCache>(GrammarVocabulary(*tokenizer_),
                                                              cache_entries_);
  });
  return *cache_;
}

absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> StructuredOutputs::Compile(
    const StructuredOutputSpec& spec) {
  if (tokenizer_ == nullptr) {
    return InvalidParam(spec.field, absl::StrCat(spec.field, ": structured outputs need the "
                                                             "model's tokenizer, and it has none"));
  }
  const bool object = spec.kind == StructuredOutputSpec::Kind::kJsonObject;
  // Everything the grammar depends on: the kind, the options, the schema with its key order.
  const std::string key =
      absl::StrCat(object ? "json_object" : "json_schema", "|", options_.max_whitespace, ",",
                   options_.max_digits, ",", options_.max_depth, ",", options_.max_items, "|",
                   object ? std::string() : spec.schema.dump());
  auto built = cache().GetOrCompile(key, [&]() -> absl::StatusOr<text::grammar::Grammar> {
    if (object) return text::grammar::AnyJsonObjectGrammar(options_);
    return text::grammar::JsonSchemaToGrammar(spec.schema, options_);
  });
  if (!built.ok()) {
    // The engine's refusal (an unsupported keyword and its pointer, a grammar over the compile
    // limits) is the client's to fix: a 400 naming the field.
    return InvalidParam(spec.field, std::string(built.status().message()));
  }
  return built;
}

}  // namespace banyan::server
