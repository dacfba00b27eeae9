// Tool calling on chat: the request's tools, tool_choice and parallel_tool_calls read and
// checked, and the constraint that forces the calls (text/tool_calls/tool_syntax.h), compiled
// for the model's vocabulary through its own cache.
//
// tool_choice:
//   "none"      tools are shown to the template, nothing is parsed or forced;
//   "auto"      (the default with tools) the output is free until a call begins (the family's
//               AutoCallTrigger: <tool_call>, [TOOL_CALLS], Llama 3's {"name"); the rest of that
//               call is then forced by the grammar (CompileAuto, a triggered constraint), so a
//               call is always parseable; calls are read back with the family's parser. With
//               parallel_tool_calls false, the first call ends the output (only the end may
//               follow it: TokenConstraint::trigger_once); with true, the default, the output
//               is free again after each call;
//   "required"  the grammar forces one call of any tool (several when parallel_tool_calls, the
//               default, and the family's syntax has a list);
//   {"type": "function", "function": {"name": N}}  the grammar forces calls of N.
// A model whose chat template shows no tool-call syntax refuses tools with any tool_choice but
// "none" (400 naming tool_choice).
//
// Errors are InvalidArgument naming the field (StatusParam): tools[i].function.name for a
// missing, malformed or repeated name, tools[i].function.parameters for parameters that are no
// object schema or use a keyword outside the JSON Schema subset (the engine's message with the
// keyword and its pointer), tools for too many or too large tools, tool_choice /
// tool_choice.function.name for an unknown choice or tool.
//
// Threads: ToolCalling is thread-safe; Compile runs on the front end's thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "text/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "text/grammar/constraint_cache.h"
#include "text/grammar/json_schema.h"
#include "text/tool_calls/tool_syntax.h"

namespace banyan::server {

inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolsBytes = 256 << 10;  // the tools array as JSON text

struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  Choice choice = Choice::kAuto;
  std::string named;     // kNamed: the tool
  bool parallel = true;  // parallel_tool_calls
  std::vector<text::tool_calls::ToolSpec> tools;

  bool forced() const { return choice == Choice::kRequired || choice == Choice::kNamed; }
};

// tools / tool_choice / parallel_tool_calls of a chat body (keys in the order sent), for a model
// whose template speaks `family`. nullopt: nothing to parse or force (no tools, or
// tool_choice "none").
absl::StatusOr<std::optional<ToolRequest>> ParseToolFields(const nlohmann::ordered_json& body,
                                                           text::tool_calls::ToolFamily family);

class ToolCalling;

// The constraint a tool request adds to the request's own (`*constraint`: a response_format's,
// null for none), for both front ends: "auto" sets its triggered grammar where there is none (a
// response_format keeps its own; no grammar where the tools' schemas cannot make one), a forced
// tool_choice compiles the grammar of its calls (InvalidArgument naming tool_choice beside
// another constraint, or without a compiler). Compiles on the calling thread.
absl::Status AddToolConstraint(ToolCalling* calling, const ToolRequest& request,
                               text::tool_calls::ToolFamily family,
                               std::shared_ptr<const text::grammar::TokenConstraint>* constraint);

// A fresh call id as OpenAI writes them: "call_" and 24 letters and digits.
std::string NewToolCallId();

class ToolCalling {
 public:
  static constexpr size_t kDefaultCacheEntries = 32;

  // tokenizer: the model's; must outlive this.
  explicit ToolCalling(const text::Tokenizer* tokenizer,
                       size_t cache_entries = kDefaultCacheEntries,
                       text::grammar::JsonSchemaOptions options = {});

  // The constraint forcing `request`'s calls (request.forced()).
  absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> Compile(
      const ToolRequest& request, text::tool_calls::ToolFamily family);
  // tool_choice "auto": free output, each call forced from its trigger on
  // (TokenConstraint::triggers). nullptr where none can be made (a tool's parameters outside the
  // grammar engine's subset, no tokenizer): the output is then free throughout, parsed as before.
  std::shared_ptr<const text::grammar::TokenConstraint> CompileAuto(
      const ToolRequest& request, text::tool_calls::ToolFamily family);

 private:
  text::grammar::ConstraintCache& cache();
  absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> CompileWith(
      const ToolRequest& request, text::tool_calls::ToolFamily family,
      const text::tool_calls::ToolGrammarOptions& opt);

  const text::Tokenizer* tokenizer_;
  const size_t cache_entries_;
  const text::grammar::JsonSchemaOptions options_;
  absl::once_flag once_;
  std::unique_ptr<text::grammar::ConstraintCache> cache_;  // set once, under once_
};

}  // namespace banyan::server
