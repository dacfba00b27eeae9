#include "server/common/structured_outputs.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "server/common/structural_tag_fields.h"
#include "server/common/json_fields.h"
#include "server/common/validation.h"
#include "text/grammar/gbnf.h"
#include "text/grammar/regex.h"
#include "text/reasoning.h"

namespace banyan::server {
namespace {

using OJson = nlohmann::ordered_json;


absl::StatusOr<std::optional<StructuredOutputSpec>> FromResponseFormat(const OJson& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return InvalidParam("response_format",
                        "response_format must be an object with a string 'type'");
  }
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    return StructuredOutputSpec::JsonObject("response_format");
  }
  if (type == "structural_tag") {
    absl::StatusOr<text::grammar::StructuralTag> tag = ParseStructuralTag(rf, "response_format");
    if (!tag.ok()) return tag.status();
    return StructuredOutputSpec::StructuralTag(*std::move(tag), "response_format");
  }
  if (type != "json_schema") {
    return InvalidParam("response_format.type",
                        absl::StrCat("response_format type '", type,
                                     "' is not supported; use text, json_object, json_schema or "
                                     "structural_tag"));
  }
  const OJson* js = PresentField(rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return InvalidParam("response_format.json_schema",
                        "response_format type 'json_schema' needs a 'json_schema' object");
  }
  const OJson* name = PresentField(*js, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return InvalidParam("response_format.json_schema.name",
                        "response_format.json_schema.name must be a non-empty string");
  }
  if (const OJson* strict = PresentField(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
    return InvalidParam("response_format.json_schema.strict",
                        "response_format.json_schema.strict must be a boolean");
  }
  const OJson* schema = PresentField(*js, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return InvalidParam("response_format.json_schema.schema",
                        "response_format.json_schema.schema must be a JSON Schema object");
  }
  return StructuredOutputSpec::JsonSchema(*schema, "response_format.json_schema.schema");
}

// guided_json, structured_outputs.json: the schema as an object or a JSON string.
absl::StatusOr<StructuredOutputSpec> FromGuidedJson(const OJson& g, const std::string& field) {
  if (g.is_string()) return JsonSchemaSpecFromText(g.get_ref<const std::string&>(), field);
  if (!g.is_object()) {
    return InvalidParam(field, absl::StrCat(field, " must be a JSON Schema: an object, or a "
                                                   "string holding one"));
  }
  return StructuredOutputSpec::JsonSchema(g, field);
}

std::string RegexShapeMessage(const std::string& field) {
  return absl::StrCat(field,
                      " must be a non-empty string: a regular expression the whole output "
                      "matches");
}

std::string GrammarShapeMessage(const std::string& field) {
  return absl::StrCat(field,
                      " must be a non-empty string: a GBNF grammar whose root rule the whole "
                      "output matches");
}

std::string ChoiceShapeMessage(const std::string& field) {
  return absl::StrCat(field, " must be a non-empty list of strings");
}

// guided_regex, structured_outputs.regex. The pattern compiles in Compile, where a construct
// the engine refuses becomes a 400 naming the field.
absl::StatusOr<StructuredOutputSpec> FromGuidedRegex(const OJson& g, const std::string& field) {
  if (!g.is_string()) return InvalidParam(field, RegexShapeMessage(field));
  return RegexSpec(g.get<std::string>(), field);
}

// guided_grammar, grammar, structured_outputs.grammar. As a pattern, the grammar compiles in
// Compile.
absl::StatusOr<StructuredOutputSpec> FromGuidedGrammar(const OJson& g, const std::string& field) {
  if (!g.is_string()) return InvalidParam(field, GrammarShapeMessage(field));
  return GrammarSpec(g.get<std::string>(), field);
}

// guided_choice, structured_outputs.choice.
absl::StatusOr<StructuredOutputSpec> FromGuidedChoice(const OJson& g, const std::string& field) {
  if (!g.is_array()) return InvalidParam(field, ChoiceShapeMessage(field));
  std::vector<std::string> choices;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].is_string()) {
      return InvalidParam(
          field, absl::StrCat(field, "[", i, "] is not a string: ", ChoiceShapeMessage(field)));
    }
    choices.push_back(g[i].get<std::string>());
  }
  return ChoiceSpec(std::move(choices), field);
}

// structured_outputs.structural_tag: the tag object, or a string holding it as JSON (vLLM
// passes it on as text).
absl::StatusOr<StructuredOutputSpec> FromStructuralTagField(const OJson& g,
                                                            const std::string& field) {
  if (g.is_string()) return StructuralTagSpecFromText(g.get_ref<const std::string&>(), field);
  absl::StatusOr<text::grammar::StructuralTag> tag = ParseStructuralTag(g, field);
  if (!tag.ok()) return tag.status();
  return StructuredOutputSpec::StructuralTag(*std::move(tag), field);
}

// vLLM's structured_outputs object: one of json, regex, choice, grammar, structural_tag or json_object: true. Its
// other keys change the output or the backend in ways banyan does not implement: refused unless
// null or false (the defaults of vLLM's boolean switches).
absl::StatusOr<std::optional<StructuredOutputSpec>> FromStructuredOutputs(const OJson& so) {
  if (!so.is_object()) {
    return InvalidParam("structured_outputs",
                        "structured_outputs must be an object with one of 'json', 'regex', "
                        "'choice', 'grammar', 'structural_tag' or 'json_object'");
  }
  std::optional<StructuredOutputSpec> chosen;
  for (const auto& [key, value] : so.items()) {
    const std::string field = absl::StrCat("structured_outputs.", key);
    if (value.is_null() || (value.is_boolean() && !value.get<bool>())) continue;
    absl::StatusOr<StructuredOutputSpec> spec;
    if (key == "json") {
      spec = FromGuidedJson(value, field);
    } else if (key == "regex") {
      spec = FromGuidedRegex(value, field);
    } else if (key == "choice") {
      spec = FromGuidedChoice(value, field);
    } else if (key == "grammar") {
      spec = FromGuidedGrammar(value, field);
    } else if (key == "json_object" && value.is_boolean()) {
      spec = StructuredOutputSpec::JsonObject(field);
    } else if (key == "structural_tag") {
      spec = FromStructuralTagField(value, field);
    } else {
      return InvalidParam(field, absl::StrCat(field, " is not supported by this server; send "
                                                     "one of json, regex, choice, grammar, "
                                                     "structural_tag or json_object"));
    }
    if (!spec.ok()) return spec.status();
    if (chosen.has_value()) return BothConstrainError(field, chosen->field);
    chosen = *std::move(spec);
  }
  return chosen;
}

// The whole output matches `pattern`. The engine's refusal (backreferences, lookaround, a
// repeat over its limits) names the field and the construct.
absl::StatusOr<text::grammar::Grammar> RegexGrammar(const std::string& pattern,
                                                    const std::string& field) {
  absl::StatusOr<text::grammar::Expr> body = text::grammar::RegexToExpr(
      pattern, text::grammar::RegexMatch::kWhole, text::grammar::RegexText::kUtf8);
  if (!body.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " cannot be compiled: ", body.status().message()));
  }
  text::grammar::Grammar g;
  g.set_root(g.AddRule("regex", *std::move(body)));
  return g;
}

// The whole output matches the GBNF grammar's root. A syntax error names the field, the line and
// the column.
absl::StatusOr<text::grammar::Grammar> GbnfGrammar(const std::string& gbnf,
                                                   const std::string& field) {
  absl::StatusOr<text::grammar::Grammar> g = text::grammar::GbnfToGrammar(gbnf);
  if (!g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " cannot be compiled: ", g.status().message()));
  }
  return g;
}

// Exactly one of the choices: an alternation of their bytes, so no character needs escaping.
text::grammar::Grammar ChoiceGrammar(const std::vector<std::string>& choices) {
  std::vector<text::grammar::Expr> alts;
  alts.reserve(choices.size());
  for (const std::string& c : choices) alts.push_back(text::grammar::Literal(c));
  text::grammar::Grammar g;
  g.set_root(g.AddRule("choice", text::grammar::Alt(std::move(alts))));
  return g;
}

}  // namespace

StructuredOutputSpec StructuredOutputSpec::JsonObject(std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kJsonObject;
  spec.field = std::move(field);
  return spec;
}

StructuredOutputSpec StructuredOutputSpec::JsonSchema(nlohmann::ordered_json schema,
                                                      std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kJsonSchema;
  spec.schema = std::move(schema);
  spec.field = std::move(field);
  return spec;
}

StructuredOutputSpec StructuredOutputSpec::Regex(std::string regex, std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kRegex;
  spec.regex = std::move(regex);
  spec.field = std::move(field);
  return spec;
}

StructuredOutputSpec StructuredOutputSpec::Choice(std::vector<std::string> choices,
                                                  std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kChoice;
  spec.choices = std::move(choices);
  spec.field = std::move(field);
  return spec;
}

StructuredOutputSpec StructuredOutputSpec::Grammar(std::string gbnf, std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kGrammar;
  spec.grammar = std::move(gbnf);
  spec.field = std::move(field);
  return spec;
}

StructuredOutputSpec StructuredOutputSpec::StructuralTag(text::grammar::StructuralTag tag,
                                                         std::string field) {
  StructuredOutputSpec spec;
  spec.kind = Kind::kStructuralTag;
  spec.structural_tag = std::move(tag);
  spec.field = std::move(field);
  return spec;
}

absl::StatusOr<std::optional<StructuredOutputSpec>> ParseStructuredOutputFields(
    const OJson& body) {
  std::optional<StructuredOutputSpec> chosen;
  const char* chosen_name = nullptr;
  // Keeps the first field that asks for a constraint; a second is refused, naming it.
  auto take = [&](const char* name,
                  absl::StatusOr<std::optional<StructuredOutputSpec>> spec) -> absl::Status {
    if (!spec.ok()) return spec.status();
    if (!spec->has_value()) return absl::OkStatus();
    if (chosen.has_value()) return BothConstrainError(name, chosen_name);
    chosen = *std::move(spec);
    chosen_name = name;
    return absl::OkStatus();
  };
  auto one = [](absl::StatusOr<StructuredOutputSpec> spec)
      -> absl::StatusOr<std::optional<StructuredOutputSpec>> {
    if (!spec.ok()) return spec.status();
    return std::optional<StructuredOutputSpec>(*std::move(spec));
  };
  if (const OJson* rf = PresentField(body, "response_format")) {
    if (absl::Status s = take("response_format", FromResponseFormat(*rf)); !s.ok()) return s;
  }
  if (const OJson* g = PresentField(body, "guided_json")) {
    if (absl::Status s = take("guided_json", one(FromGuidedJson(*g, "guided_json"))); !s.ok()) {
      return s;
    }
  }
  if (const OJson* g = PresentField(body, "guided_regex")) {
    if (absl::Status s = take("guided_regex", one(FromGuidedRegex(*g, "guided_regex")));
        !s.ok()) {
      return s;
    }
  }
  if (const OJson* g = PresentField(body, "guided_choice")) {
    if (absl::Status s = take("guided_choice", one(FromGuidedChoice(*g, "guided_choice")));
        !s.ok()) {
      return s;
    }
  }
  // vLLM's guided_grammar and llama.cpp's grammar: the same GBNF text.
  for (const char* name : {"guided_grammar", "grammar"}) {
    if (const OJson* g = PresentField(body, name)) {
      if (absl::Status s = take(name, one(FromGuidedGrammar(*g, name))); !s.ok()) return s;
    }
  }
  if (const OJson* so = PresentField(body, "structured_outputs")) {
    if (absl::Status s = take("structured_outputs", FromStructuredOutputs(*so)); !s.ok()) {
      return s;
    }
  }
  return chosen;
}

absl::StatusOr<StructuredOutputSpec> JsonSchemaSpecFromText(std::string_view text,
                                                            std::string field) {
  absl::StatusOr<OJson> schema = ParseOrderedJson(
      text, field, JsonLimits{.max_depth = kMaxJsonDepth, .max_bytes = text.size()});
  if (!schema.ok()) return InvalidParam(field, std::string(schema.status().message()));
  if (!schema->is_object()) {
    return InvalidParam(field, absl::StrCat(field, " must hold a JSON Schema object"));
  }
  return StructuredOutputSpec::JsonSchema(*std::move(schema), std::move(field));
}

absl::StatusOr<StructuredOutputSpec> StructuralTagSpecFromText(std::string_view text,
                                                               std::string field) {
  if (text.size() > kMaxTagBytes) {
    return InvalidParam(field, absl::StrCat(field, " takes ", text.size(),
                                            " bytes; the limit is ", kMaxTagBytes));
  }
  absl::StatusOr<OJson> parsed = ParseOrderedJson(
      text, field, JsonLimits{.max_depth = kMaxJsonDepth, .max_bytes = text.size()});
  if (!parsed.ok()) return InvalidParam(field, std::string(parsed.status().message()));
  absl::StatusOr<text::grammar::StructuralTag> tag = ParseStructuralTag(*parsed, field);
  if (!tag.ok()) return tag.status();
  return StructuredOutputSpec::StructuralTag(*std::move(tag), std::move(field));
}

absl::StatusOr<StructuredOutputSpec> RegexSpec(std::string pattern, std::string field) {
  if (pattern.empty()) return InvalidParam(field, RegexShapeMessage(field));
  return StructuredOutputSpec::Regex(std::move(pattern), std::move(field));
}

absl::StatusOr<StructuredOutputSpec> ChoiceSpec(std::vector<std::string> choices,
                                                std::string field) {
  if (choices.empty()) return InvalidParam(field, ChoiceShapeMessage(field));
  return StructuredOutputSpec::Choice(std::move(choices), std::move(field));
}

absl::StatusOr<StructuredOutputSpec> GrammarSpec(std::string gbnf, std::string field) {
  if (gbnf.empty()) return InvalidParam(field, GrammarShapeMessage(field));
  return StructuredOutputSpec::Grammar(std::move(gbnf), std::move(field));
}

absl::Status BothConstrainError(std::string_view second, std::string_view first) {
  return InvalidParam(second, absl::StrCat(std::string(second), " and ", std::string(first),
                                           " both constrain the output; send one of them"));
}

absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> CompileStructuredOutput(
    StructuredOutputs* compiler, const StructuredOutputSpec& spec) {
  if (compiler == nullptr) {
    return InvalidParam(spec.field, absl::StrCat(spec.field,
                                                 ": structured outputs are not available on "
                                                 "this server"));
  }
  return compiler->Compile(spec);
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

std::shared_ptr<const text::grammar::TokenConstraint> AfterThinking(
    std::shared_ptr<const text::grammar::TokenConstraint> c) {
  if (c == nullptr || !c->triggers.empty()) return c;
  // A copy sharing the compiled grammar and the masker (and so its classified masks).
  auto after = std::make_shared<text::grammar::TokenConstraint>(*c);
  after->triggers = {std::string(text::kThinkEnd)};
  after->trigger_once = true;
  return after;
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
  using Kind = StructuredOutputSpec::Kind;
  // Everything the grammar depends on: the kind, the options, the schema with its key order,
  // the pattern, the choices.
  std::string key;
  switch (spec.kind) {
    case Kind::kJsonObject:
    case Kind::kJsonSchema:
      key = absl::StrCat(spec.kind == Kind::kJsonObject ? "json_object" : "json_schema", "|",
                         options_.max_whitespace, ",", options_.max_digits, ",",
                         options_.max_depth, ",", options_.max_items, "|",
                         spec.kind == Kind::kJsonObject ? std::string() : spec.schema.dump());
      break;
    case Kind::kRegex:
      key = absl::StrCat("regex|", spec.regex);
      break;
    case Kind::kChoice:
      key = absl::StrCat("choice|", nlohmann::json(spec.choices).dump());
      break;
    case Kind::kGrammar:
      key = absl::StrCat("gbnf|", spec.grammar);
      break;
    case Kind::kStructuralTag: {
      OJson structures = OJson::array();
      for (const text::grammar::TagStructure& s : spec.structural_tag.structures) {
        structures.push_back({{"begin", s.begin}, {"schema", s.schema}, {"end", s.end}});
      }
      key = absl::StrCat("structural_tag|", options_.max_whitespace, ",", options_.max_digits,
                         ",", options_.max_depth, ",", options_.max_items, "|",
                         structures.dump());
      break;
    }
  }
  auto built = cache().GetOrCompile(key, [&]() -> absl::StatusOr<text::grammar::Grammar> {
    switch (spec.kind) {
      case Kind::kJsonObject:
        return text::grammar::AnyJsonObjectGrammar(options_);
      case Kind::kJsonSchema:
        return text::grammar::JsonSchemaToGrammar(spec.schema, options_);
      case Kind::kRegex:
        return RegexGrammar(spec.regex, spec.field);
      case Kind::kChoice:
        return ChoiceGrammar(spec.choices);
      case Kind::kGrammar:
        return GbnfGrammar(spec.grammar, spec.field);
      case Kind::kStructuralTag:
        return text::grammar::StructuralTagGrammar(spec.structural_tag, options_);
    }
    return absl::InternalError("unknown structured output kind");
  });
  if (!built.ok()) {
    // The engine's refusal (an unsupported keyword and its pointer, a grammar over the compile
    // limits) is the client's to fix: a 400 naming the field. A GBNF grammar's compile errors
    // (left recursion, the limits) name the field in the message too, as its syntax errors do.
    std::string message(built.status().message());
    if (spec.kind == Kind::kGrammar && message.rfind(spec.field + " ", 0) != 0) {
      message = absl::StrCat(spec.field, " cannot be compiled: ", message);
    }
    if (spec.kind == Kind::kStructuralTag) {
      // "structures[i].schema: ..." (StructuralTagGrammar): that structure's schema.
      if (const size_t colon = message.find(": "); message.rfind("structures[", 0) == 0 &&
                                                   colon != std::string::npos) {
        return InvalidParam(absl::StrCat(spec.field, ".", message.substr(0, colon)),
                            absl::StrCat(spec.field, ".", message));
      }
      return InvalidParam(spec.field, absl::StrCat(spec.field, " cannot be compiled: ", message));
    }
    return InvalidParam(spec.field, message);
  }
  if (spec.kind == Kind::kStructuralTag) {
    // The cached grammar is the structures'; the triggers make it a triggered constraint (a copy
    // sharing the grammar and the masker). The key leaves the triggers out: several trigger
    // lists over the same structures share the classified masks.
    auto tagged = std::make_shared<text::grammar::TokenConstraint>(**built);
    tagged->triggers = spec.structural_tag.triggers;
    tagged->grammar_reads_trigger = true;
    return std::shared_ptr<const text::grammar::TokenConstraint>(std::move(tagged));
  }
  return built;
}

}  // namespace banyan::server
