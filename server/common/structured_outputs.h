// Structured outputs, shared by both front ends: what a client asks to constrain (a JSON schema,
// any JSON object, a regular expression or a list of choices), read from its wire fields, and
// compiled into the constraint a scheduler::Request carries (text/grammar/constraint_cache.h).
//
// Wire fields (the HTTP front end):
//   - OpenAI's `response_format`: {"type": "text"} (no constraint), {"type": "json_object"}
//     (any JSON object), {"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
//     "strict": bool}}. `strict` true or false constrain alike: the output always satisfies the
//     schema (text/grammar/json_schema.h generates only what it validates). vLLM's and SGLang's
//     {"type": "structural_tag", "structures": [...], "triggers": [...]}: free text with tagged
//     JSON from each trigger on (structural_tag_fields.h, text/grammar/structural_tag.h).
//   - vLLM's `guided_json`: the schema as an object or as a JSON string.
//   - vLLM's `guided_regex`: the whole output matches the pattern (ECMAScript, text/grammar/regex.h).
//   - vLLM's `guided_choice`: a non-empty list of strings; the output is exactly one of them.
//   - vLLM's `guided_grammar` and llama.cpp's `grammar`: a GBNF grammar (text/grammar/gbnf.h)
//     whose `root` the whole output matches.
//   - vLLM's newer `structured_outputs`: an object with one of `json`, `regex`, `choice`,
//     `grammar` (as the four above), `json_object: true` or `structural_tag` (the tag object, or
//     a string holding it as JSON); its other keys (whitespace_pattern, ...) are refused unless
//     null or false.
// Both on /v1/chat/completions and /v1/completions; at most one of them per request: a second
// is refused naming it. Schemas are read with their keys in the order sent: properties are
// generated in that order.
//
// Wire fields (the gRPC front end, GenerateRequest in proto/banyan/v1/generation.proto):
// json_schema (as JSON text), regex, choice, grammar, json_object and structural_tag (as JSON
// text), the same constraints; the
// front end reads them with the checked builders below and compiles through
// CompileStructuredOutput, as HTTP does.
//
// Errors are InvalidArgument with the wire field as the status param: a bad shape names the
// field, a schema keyword outside the supported subset is the grammar engine's message naming
// the keyword and its JSON pointer.
//
// Threads: StructuredOutputs is thread-safe. Compile runs on the calling front-end thread (never
// the engine thread); its vocabulary is built on first use, once per process, from the model's
// tokenizer.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "text/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "text/grammar/constraint_cache.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/structural_tag.h"

namespace banyan::server {

struct StructuredOutputSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar, kStructuralTag };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema: the schema, keys in the order sent
  std::string regex;                 // kRegex: the pattern the whole output matches
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them (non-empty)
  std::string grammar;               // kGrammar: GBNF text; the whole output matches its root
  text::grammar::StructuralTag structural_tag;  // kStructuralTag: checked (structural_tag_fields.h)
  std::string field;                 // the wire field it came from, for errors

  // One per kind, each member named (designated initializers would leave the others unnamed).
  static StructuredOutputSpec JsonObject(std::string field);
  static StructuredOutputSpec JsonSchema(nlohmann::ordered_json schema, std::string field);
  static StructuredOutputSpec Regex(std::string regex, std::string field);
  static StructuredOutputSpec Choice(std::vector<std::string> choices, std::string field);
  static StructuredOutputSpec Grammar(std::string gbnf, std::string field);
  static StructuredOutputSpec StructuralTag(text::grammar::StructuralTag tag, std::string field);
};

// The wire fields above of an HTTP request body (keys in the order sent). nullopt: no constraint
// asked for.
absl::StatusOr<std::optional<StructuredOutputSpec>> ParseStructuredOutputFields(
    const nlohmann::ordered_json& body);

// Checked specs from values a front end has already read off its wire; InvalidArgument naming
// `field` otherwise. A schema sent as JSON text must parse (nesting within kMaxJsonDepth) into
// an object; a pattern or a grammar must not be empty (its syntax is checked when it compiles);
// a choice list must not be empty.
absl::StatusOr<StructuredOutputSpec> JsonSchemaSpecFromText(std::string_view text,
                                                            std::string field);
absl::StatusOr<StructuredOutputSpec> RegexSpec(std::string pattern, std::string field);
absl::StatusOr<StructuredOutputSpec> ChoiceSpec(std::vector<std::string> choices,
                                                std::string field);
absl::StatusOr<StructuredOutputSpec> GrammarSpec(std::string gbnf, std::string field);
// A structural tag as JSON text (vLLM's structured_outputs.structural_tag, gRPC's
// structural_tag): parsed within kMaxTagBytes and kMaxJsonDepth, then checked
// (structural_tag_fields.h), errors naming `field` and the parts under it.
absl::StatusOr<StructuredOutputSpec> StructuralTagSpecFromText(std::string_view text,
                                                               std::string field);

// The refusal of a request that asks for two constraints: InvalidArgument naming `second` as the
// field and both in the message.
absl::Status BothConstrainError(std::string_view second, std::string_view first);

class StructuredOutputs;

// The spec's constraint from `compiler`, the server's (ServerContext::structured_outputs); a
// null compiler (a server without structured outputs) refuses, naming spec.field.
absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> CompileStructuredOutput(
    StructuredOutputs* compiler, const StructuredOutputSpec& spec);

// The grammar engine's view of a tokenizer: token id -> the bytes it stands for, empty for the
// special and control tokens (BOS, EOS, unknown, the tokenizer's special tokens), which no
// grammar allows, except the special tokens spelled as one of `keep` (a tool-call marker such as
// Mistral's [TOOL_CALLS]), which keep their spelling.
std::shared_ptr<const text::grammar::Vocabulary> GrammarVocabulary(
    const text::Tokenizer& tokenizer, const std::vector<std::string>& keep = {});

// A reasoning model's constraint (--reasoning-parser, text/reasoning.h): the thinking is free,
// and `c` holds from "</think>" to the end of the output (TokenConstraint::trigger_once). One
// that has a trigger of its own (tool_choice auto) and null are returned as they are.
std::shared_ptr<const text::grammar::TokenConstraint> AfterThinking(
    std::shared_ptr<const text::grammar::TokenConstraint> c);

class StructuredOutputs {
 public:
  static constexpr size_t kDefaultCacheEntries = 64;

  // tokenizer: the model's; must outlive this.
  explicit StructuredOutputs(const text::Tokenizer* tokenizer,
                             size_t cache_entries = kDefaultCacheEntries,
                             text::grammar::JsonSchemaOptions options = {});

  // The spec's constraint, from the cache or compiled now (on this thread).
  absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> Compile(
      const StructuredOutputSpec& spec);

  text::grammar::ConstraintCache& cache();

 private:
  const text::Tokenizer* tokenizer_;
  const size_t cache_entries_;
  const text::grammar::JsonSchemaOptions options_;
  absl::once_flag once_;
  std::unique_ptr<text::grammar::ConstraintCache> cache_;  // set once, under once_
};

}  // namespace banyan::server
