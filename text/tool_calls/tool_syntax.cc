#include "text/tool_calls/tool_syntax.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan::text::tool_calls {
namespace {

using grammar::Alt;
using grammar::Expr;
using grammar::Literal;
using grammar::Opt;
using grammar::Ref;
using grammar::Seq;
using grammar::Star;

// Mistral's calls inside its list brackets: one, or with `parallel` one or more, ", "-separated.
Expr MistralCallList(int32_t call, bool parallel) {
  return parallel ? Seq({Ref(call), Star(Seq({Literal(", "), Ref(call)}))}) : Ref(call);
}

// The call object as the family's template renders it back: {"name": "<name>", "<key>": <args>}.
// Without its opening `{"name"`, where that began the call in free output, the colon's space is
// optional: the token that completed the trigger may have brought the colon and the quote.
Expr CallObject(std::string_view name, std::string_view args_key, int32_t args_rule,
                bool without_open) {
  const std::string quoted_name = nlohmann::json(std::string(name)).dump();
  Expr open = without_open ? Seq({Literal(":"), Opt(Literal(" "))}) : Literal("{\"name\": ");
  return Seq({std::move(open), Literal(quoted_name + ", \"" + std::string(args_key) + "\": "),
              Ref(args_rule), Literal("}")});
}

}  // namespace

bool Contains(std::string_view text, std::string_view word) {
  return text.find(word) != std::string_view::npos;
}

ToolFamily DetectToolFamily(std::string_view t) {
  if (Contains(t, "[TOOL_CALLS]")) return ToolFamily::kMistral;
  if (Contains(t, "<tool_call>")) return ToolFamily::kHermes;
  if ((Contains(t, "<|python_tag|>") || Contains(t, "ipython")) &&
      Contains(t, "parameters")) {
    return ToolFamily::kLlama3;
  }
  return ToolFamily::kNone;
}

std::string_view ToolFamilyName(ToolFamily family) {
  switch (family) {
    case ToolFamily::kNone:
      return "none";
    case ToolFamily::kHermes:
      return "hermes";
    case ToolFamily::kLlama3:
      return "llama3_json";
    case ToolFamily::kMistral:
      return "mistral";
  }
  return "none";
}

std::string_view CallMarker(ToolFamily family) {
  switch (family) {
    case ToolFamily::kHermes:
      return "<tool_call>";
    case ToolFamily::kMistral:
      return "[TOOL_CALLS]";
    case ToolFamily::kLlama3:
    case ToolFamily::kNone:
      return "";
  }
  return "";
}

std::string_view AutoCallTrigger(ToolFamily family) {
  switch (family) {
    case ToolFamily::kLlama3:
      return "{\"name\"";
    case ToolFamily::kHermes:
    case ToolFamily::kMistral:
    case ToolFamily::kNone:
      return CallMarker(family);
  }
  return "";
}

std::vector<std::string> MarkerSpellings(ToolFamily family) {
  switch (family) {
    case ToolFamily::kMistral:
      return {"[TOOL_CALLS]"};
    case ToolFamily::kHermes:  // Qwen's <tool_call> is an added token, but not a special one
    case ToolFamily::kLlama3:
    case ToolFamily::kNone:
      return {};
  }
  return {};
}

absl::StatusOr<grammar::Grammar> ToolCallGrammar(ToolFamily family,
                                                 const std::vector<ToolSpec>& tools,
                                                 const ToolGrammarOptions& options) {
  if (family == ToolFamily::kNone) {
    return absl::InvalidArgumentError("the model's chat template has no tool-call syntax");
  }
  grammar::Grammar g;
  const int32_t root = g.AddRule("tool-calls");
  const std::string_view args_key = family == ToolFamily::kLlama3 ? "parameters" : "arguments";
  std::vector<Expr> calls;
  for (const ToolSpec& tool : tools) {
    if (!options.only.empty() && tool.name != options.only) continue;
    absl::StatusOr<int32_t> args = grammar::AddJsonSchemaRules(tool.parameters, options.schema, &g);
    if (!args.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool '", tool.name, "': ", args.status().message()));
    }
    calls.push_back(CallObject(tool.name, args_key, *args,
                               options.after_trigger && family == ToolFamily::kLlama3));
  }
  if (calls.empty()) {
    return absl::InvalidArgumentError(
        options.only.empty() ? std::string("no tools to call")
                             : absl::StrCat("no tool is named '", options.only, "'"));
  }
  const int32_t call = g.AddRule("call", Alt(std::move(calls)));
  Expr body;
  if (options.after_trigger) {
    switch (family) {
      case ToolFamily::kHermes:
        body = Seq({Literal("\n"), Ref(call), Literal("\n</tool_call>")});
        break;
      case ToolFamily::kMistral: {
        body = Seq({Literal("["), MistralCallList(call, options.parallel), Literal("]")});
        break;
      }
      case ToolFamily::kLlama3:
      case ToolFamily::kNone:
        body = Ref(call);
        break;
    }
    g.SetBody(root, std::move(body));
    g.set_root(root);
    return g;
  }
  switch (family) {
    case ToolFamily::kHermes: {
      Expr block = Seq({Literal("<tool_call>\n"), Ref(call), Literal("\n</tool_call>")});
      body = options.parallel ? Seq({block, Star(Seq({Literal("\n"), block}))}) : std::move(block);
      break;
    }
    case ToolFamily::kMistral: {
      body = Seq({Literal("[TOOL_CALLS]["), MistralCallList(call, options.parallel),
                  Literal("]")});
      break;
    }
    case ToolFamily::kLlama3:
    case ToolFamily::kNone:
      body = Ref(call);
      break;
  }
  g.SetBody(root, std::move(body));
  g.set_root(root);
  return g;
}

}  // namespace banyan::text::tool_calls
