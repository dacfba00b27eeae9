#include "server/common/tool_calling.h"

#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "server/common/structured_outputs.h"
#include "server/common/json_fields.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

using OJson = nlohmann::ordered_json;
using text::tool_calls::ToolFamily;
using text::tool_calls::ToolSpec;

constexpr size_t kMaxToolNameBytes = 64;


bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<ToolSpec> ParseTool(const OJson& tool, size_t i) {
  const std::string where = absl::StrCat("tools[", i, "]");
  if (!tool.is_object()) return InvalidParam(where, where + " must be an object");
  if (const OJson* type = PresentField(tool, "type");
      type != nullptr && !(type->is_string() && type->get<std::string>() == "function")) {
    return InvalidParam(where + ".type", where + ".type must be \"function\"");
  }
  const OJson* fn = PresentField(tool, "function");
  if (fn == nullptr || !fn->is_object()) {
    return InvalidParam(where + ".function", where + ".function must be an object");
  }
  const OJson* name = PresentField(*fn, "name");
  if (name == nullptr || !name->is_string() || !ValidToolName(name->get<std::string>())) {
    return InvalidParam(where + ".function.name",
                        absl::StrCat(where, ".function.name must be 1 to ", kMaxToolNameBytes,
                                     " letters, digits, '_', '-' or '.'"));
  }
  ToolSpec spec{.name = name->get<std::string>(), .parameters = {}};
  const OJson* params = PresentField(*fn, "parameters");
  if (params == nullptr) {
    spec.parameters = OJson{{"type", "object"}, {"properties", OJson::object()}};
    return spec;
  }
  const OJson* type = params->is_object() ? PresentField(*params, "type") : nullptr;
  if (!params->is_object() ||
      (type != nullptr && !(type->is_string() && type->get<std::string>() == "object"))) {
    return InvalidParam(where + ".function.parameters",
                        where + ".function.parameters must be a JSON Schema of type \"object\"");
  }
  spec.parameters = *params;
  if (type == nullptr) spec.parameters["type"] = "object";
  return spec;
}

}  // namespace

absl::StatusOr<std::optional<ToolRequest>> ParseToolFields(const OJson& body, ToolFamily family) {
  ToolRequest req;
  if (const OJson* tc = PresentField(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c == "none") {
        req.choice = ToolRequest::Choice::kNone;
      } else if (c == "auto") {
        req.choice = ToolRequest::Choice::kAuto;
      } else if (c == "required") {
        req.choice = ToolRequest::Choice::kRequired;
      } else {
        return InvalidParam(
            "tool_choice",
            absl::StrCat("unknown tool_choice '", c,
                         "'; use none, auto, required "
                         "or {\"type\": \"function\", \"function\": {\"name\": ...}}"));
      }
    } else if (tc->is_object()) {
      const OJson* type = PresentField(*tc, "type");
      const OJson* fn = PresentField(*tc, "function");
      const OJson* name = fn != nullptr && fn->is_object() ? PresentField(*fn, "name") : nullptr;
      if (type == nullptr || !type->is_string() || type->get<std::string>() != "function" ||
          name == nullptr || !name->is_string()) {
        return InvalidParam("tool_choice",
                            "tool_choice as an object must be {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}");
      }
      req.choice = ToolRequest::Choice::kNamed;
      req.named = name->get<std::string>();
    } else {
      return InvalidParam("tool_choice", "tool_choice must be a string or an object");
    }
  }
  if (const OJson* p = PresentField(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) {
      return InvalidParam("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    }
    req.parallel = p->get<bool>();
  }
  const OJson* tools = PresentField(body, "tools");
  if (tools != nullptr && !tools->is_array())
    return InvalidParam("tools", "tools must be an array");
  const bool has_tools = tools != nullptr && !tools->empty();
  if (!has_tools) {
    if (req.choice == ToolRequest::Choice::kRequired || req.choice == ToolRequest::Choice::kNamed) {
      return InvalidParam("tool_choice", "this tool_choice needs tools; the request has none");
    }
    return std::nullopt;
  }
  if (tools->size() > kMaxTools) {
    return InvalidParam("tools",
                        absl::StrCat("at most ", kMaxTools, " tools, got ", tools->size()));
  }
  if (tools->dump().size() > kMaxToolsBytes) {
    return InvalidParam(
        "tools", absl::StrCat("the tools take more than ", kMaxToolsBytes, " bytes as JSON"));
  }
  absl::flat_hash_map<std::string, size_t> seen;
  for (size_t i = 0; i < tools->size(); ++i) {
    absl::StatusOr<ToolSpec> spec = ParseTool((*tools)[i], i);
    if (!spec.ok()) return spec.status();
    if (auto [it, added] = seen.emplace(spec->name, i); !added) {
      return InvalidParam(absl::StrCat("tools[", i, "].function.name"),
                          absl::StrCat("tools[", i, "] and tools[", it->second,
                                       "] are both named '", spec->name, "'"));
    }
    req.tools.push_back(*std::move(spec));
  }
  if (req.choice == ToolRequest::Choice::kNamed && !seen.contains(req.named)) {
    return InvalidParam(
        "tool_choice.function.name",
        absl::StrCat("tool_choice names '", req.named, "', which is not one of the tools"));
  }
  if (req.choice == ToolRequest::Choice::kNone) return std::nullopt;
  if (family == ToolFamily::kNone) {
    return InvalidParam("tool_choice",
                        "this model's chat template has no tool-call syntax: send tool_choice "
                        "\"none\", or serve the model with a template that renders tool calls "
                        "(--chat-template)");
  }
  return std::optional<ToolRequest>(std::move(req));
}

absl::Status AddToolConstraint(ToolCalling* calling, const ToolRequest& request,
                               ToolFamily family,
                               std::shared_ptr<const text::grammar::TokenConstraint>* constraint) {
  if (!request.forced()) {
    if (*constraint == nullptr && calling != nullptr) {
      *constraint = calling->CompileAuto(request, family);
    }
    return absl::OkStatus();
  }
  if (*constraint != nullptr) {
    return InvalidParam("tool_choice",
                        "a forced tool_choice and another structured output (response_format, "
                        "guided_*, grammar, structured_outputs; gRPC's json_schema, regex, "
                        "choice, grammar, json_object) both constrain the output; send one of "
                        "them");
  }
  if (calling == nullptr) {
    return InvalidParam("tool_choice", "tool calling is not available on this server");
  }
  auto forced = calling->Compile(request, family);
  if (!forced.ok()) return forced.status();
  *constraint = *std::move(forced);
  return absl::OkStatus();
}

std::string NewToolCallId() {
  static constexpr char kAlnum[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

ToolCalling::ToolCalling(const text::Tokenizer* tokenizer, size_t cache_entries,
                         text::grammar::JsonSchemaOptions options)
    : tokenizer_(tokenizer), cache_entries_(cache_entries), options_(options) {}

text::grammar::ConstraintCache& ToolCalling::cache() {
  absl::call_once(once_, [this] {
    // The markers of every family keep their text: a grammar may then emit them as the one
    // control token the model learned.
    std::vector<std::string> keep;
    for (ToolFamily f : {ToolFamily::kHermes, ToolFamily::kLlama3, ToolFamily::kMistral}) {
      for (std::string& s : text::tool_calls::MarkerSpellings(f)) keep.push_back(std::move(s));
    }
    cache_ = std::make_unique<text::grammar::ConstraintCache>(GrammarVocabulary(*tokenizer_, keep),
                                                              cache_entries_);
  });
  return *cache_;
}

absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> ToolCalling::Compile(
    const ToolRequest& request, ToolFamily family) {
  if (tokenizer_ == nullptr) {
    return InvalidParam("tool_choice", "tool calls need the model's tokenizer, and it has none");
  }
  text::tool_calls::ToolGrammarOptions opt;
  opt.only = request.choice == ToolRequest::Choice::kNamed ? request.named : "";
  opt.parallel = request.parallel;
  opt.schema = options_;
  return CompileWith(request, family, opt);
}

std::shared_ptr<const text::grammar::TokenConstraint> ToolCalling::CompileAuto(
    const ToolRequest& request, ToolFamily family) {
  const std::string_view trigger = text::tool_calls::AutoCallTrigger(family);
  if (tokenizer_ == nullptr || trigger.empty()) return nullptr;
  text::tool_calls::ToolGrammarOptions opt;
  opt.parallel = request.parallel;
  opt.after_trigger = true;
  opt.schema = options_;
  auto built = CompileWith(request, family, opt);
  if (!built.ok()) return nullptr;
  auto triggered = std::make_shared<text::grammar::TokenConstraint>(**built);
  triggered->triggers = {std::string(trigger)};
  // Without parallel calls the one call is the rest of the output: a free output after it could
  // begin a second (the after-trigger grammar bounds only the call it follows).
  triggered->trigger_once = !request.parallel;
  // Recurring calls are free where they cannot apply, as before such grammars; the one call
  // that ends the output is checked as any grammar (min_tokens refused).
  triggered->best_effort = !triggered->trigger_once;
  return triggered;
}

absl::StatusOr<std::shared_ptr<const text::grammar::TokenConstraint>> ToolCalling::CompileWith(
    const ToolRequest& request, ToolFamily family,
    const text::tool_calls::ToolGrammarOptions& opt) {
  std::string key =
      absl::StrCat("tools|", std::string(text::tool_calls::ToolFamilyName(family)), "|",
                   opt.after_trigger ? "after_trigger|" : "", opt.parallel, "|",
                   opt.only.size(), ":", opt.only, "|", options_.max_whitespace,
                   ",", options_.max_digits, ",", options_.max_depth, ",", options_.max_items);
  for (const ToolSpec& t : request.tools) {
    absl::StrAppend(&key, "|", t.name.size(), ":", t.name, "|", t.parameters.dump());
  }
  auto built = cache().GetOrCompile(key, [&]() -> absl::StatusOr<text::grammar::Grammar> {
    return text::tool_calls::ToolCallGrammar(family, request.tools, opt);
  });
  if (!built.ok()) {
    // A tool's schema the engine refuses: name that tool's parameters.
    std::string field = "tools";
    const std::string msg(built.status().message());
    for (size_t i = 0; i < request.tools.size(); ++i) {
      const std::string prefix = absl::StrCat("tool '", request.tools[i].name, "': ");
      if (msg.substr(0, prefix.size()) == prefix) {
        field = absl::StrCat("tools[", i, "].function.parameters");
        break;
      }
    }
    return InvalidParam(field, msg);
  }
  return built;
}

}  // namespace banyan::server
