// Tool-call syntax per model family: which one a chat template speaks, and the grammar that
// forces a valid call in it.
//
// A family is recognised from the chat template's text, by what the template writes when it
// renders an assistant message's tool_calls back (the model learned to write the same):
//   kMistral  "[TOOL_CALLS]" then a JSON array of {"name": ..., "arguments": {...}}
//             (the template mentions [TOOL_CALLS]; Mistral's tokenizers make the marker a
//             control token);
//   kHermes   "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>", one block per call
//             separated by "\n" (Qwen 2.5 / 3, Hermes; the template mentions <tool_call>);
//   kLlama3   one JSON object {"name": ..., "parameters": {...}}, optionally after
//             "<|python_tag|>" (Llama 3.1 / 3.2; the template mentions <|python_tag|> or
//             ipython next to "parameters").
// The first that matches wins, in that order. kNone: the template shows no tool-call syntax, and
// tool calling is refused.
//
// The grammar accepts exactly the calls the family's parser (tool_call_parser.h) reads back: a
// name that is one of the tools, the arguments (or Llama's parameters) an instance of that
// tool's parameters schema, as text/grammar/json_schema.h generates them (properties in schema
// order, bounded whitespace). Several calls only where the family's syntax has a list
// (kHermes, kMistral) and parallel calls are allowed; Llama 3's syntax is a single call.
#ifndef BANYAN_TEXT_TOOL_CALLS_TOOL_SYNTAX_H_
#define BANYAN_TEXT_TOOL_CALLS_TOOL_SYNTAX_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"

namespace banyan::text::tool_calls {

enum class ToolFamily { kNone, kHermes, kLlama3, kMistral };

ToolFamily DetectToolFamily(std::string_view chat_template);
std::string_view ToolFamilyName(ToolFamily family);

// What starts a family's calls in the text ("" for kLlama3, whose call is a bare object).
std::string_view CallMarker(ToolFamily family);
// Spellings that a tokenizer may hold as special tokens and that the family's calls contain: the
// grammar's vocabulary must give those tokens their text, or no grammar could emit them.
std::vector<std::string> MarkerSpellings(ToolFamily family);

// What begins a call in free output (tool_choice "auto"): the family's marker, or for kLlama3,
// whose call is a bare object, its first key ({"name"). "" for kNone.
std::string_view AutoCallTrigger(ToolFamily family);

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // an object schema ({"type": "object", ...})
};

struct ToolGrammarOptions {
  // Only this tool (tool_choice naming a function); empty: any of the tools.
  std::string only;
  // More than one call, where the syntax has a list.
  bool parallel = false;
  // The grammar of what follows AutoCallTrigger(family) instead of whole calls: the rest of one
  // Hermes block, of Mistral's list, of Llama 3's object (tool_choice "auto", where the output
  // is free until a call begins). It ends where the block does, with nothing after it.
  bool after_trigger = false;
  grammar::JsonSchemaOptions schema;
};

// The grammar of one or more forced calls. An error (InvalidArgument) is the JSON Schema
// compiler's message about a tool's parameters, prefixed with the tool's name; `only` must name
// one of `tools`.
absl::StatusOr<grammar::Grammar> ToolCallGrammar(ToolFamily family,
                                                 const std::vector<ToolSpec>& tools,
                                                 const ToolGrammarOptions& options);

}  // namespace banyan::text::tool_calls

#endif  // BANYAN_TEXT_TOOL_CALLS_TOOL_SYNTAX_H_
