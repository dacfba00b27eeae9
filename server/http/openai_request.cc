#include "server/http/openai_request.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_limits.h"
#include "server/http/http_log.h"
#include "server/http/prompt.h"

namespace banyan::server::http {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::array kSamplingFields = {"model",
                                        "max_tokens",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "frequency_penalty",
                                        "presence_penalty",
                                        "repetition_penalty",
                                        "seed",
                                        "n",
                                        "stop",
                                        "stop_token_ids",
                                        "logprobs",
                                        "stream",
                                        "stream_options",
                                        "user",
                                        "cache_salt",
                                        "ignore_eos",
                                        "priority",
                                        "best_of",
                                        "logit_bias",
                                        "min_tokens"};
constexpr std::array kCompletionFields = {"prompt", "echo", "suffix", "add_special_tokens",
                                         "response_format"};
constexpr std::array kChatFields = {"messages",  "max_completion_tokens", "top_logprobs",
                                   "tools",     "tool_choice",           "functions",
                                   "function_call", "parallel_tool_calls", "response_format",
                                   "add_generation_prompt", "chat_template_kwargs"};

template <size_t N>
bool In(const std::array<const char*, N>& names, std::string_view key) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return key == n; });
}

// OpenAI ignores fields it does not know; so do we, but say so at debug level.
void LogUnknownFields(const Json& body, Api api) {
  if (!HttpLog().should_log(spdlog::level::debug)) return;
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    const bool known =
        In(kSamplingFields, key) ||
        (api == Api::kCompletions ? In(kCompletionFields, key) : In(kChatFields, key));
    if (!known) unknown.push_back(key);
  }
  if (!unknown.empty()) {
    HttpLog().debug("ignoring unknown request fields: {}", absl::StrJoin(unknown, ", "));
  }
}

// OpenAI's logit_bias: an object from token ids (as strings) to numbers, sorted by id. The bias
// range is checked here too, before the cast to float; the ids against the vocabulary with the
// other sampling parameters (ValidateSampling).
absl::Status ParseLogitBias(const Json& lb, std::vector<std::pair<int32_t, float>>* out) {
  if (!lb.is_object()) {
    return absl::InvalidArgumentError(
        "logit_bias must be an object mapping token ids (as strings) to biases in [-100, 100]");
  }
  out->clear();
  for (const auto& [key, value] : lb.items()) {
    // One rule: decimal digits only, as OpenAI writes token ids ("50256"). SimpleAtoi alone
    // would also take " 5" and "+5" (and refuse "5.0"), so the digits are checked first.
    int64_t id = 0;
    const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits || !absl::SimpleAtoi(key, &id) || id > INT32_MAX) {
      size_t shown = std::min<size_t>(key.size(), 32);  // cut on a UTF-8 character boundary
      while (shown < key.size() && shown > 0 && (key[shown] & 0xC0) == 0x80) --shown;
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias keys must be token ids written in decimal digits only (as \"50256\"; "
          "no sign, space or decimal point), got \"",
          key.substr(0, shown), shown < key.size() ? "...\"" : "\""));
    }
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias[\"", id,
                                                     "\"] must be a number, got ", value.type_name()));
    }
    const double bias = value.get<double>();
    if (!(std::fabs(bias) <= engine::kMaxAbsLogitBias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias[\"", id, "\"] must be in [-100, 100], got ", bias));
    }
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  std::sort(out->begin(), out->end());
  for (size_t i = 1; i < out->size(); ++i) {
    if ((*out)[i].first == (*out)[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias names token ", (*out)[i].first, " twice"));
    }
  }
  return absl::OkStatus();
}

// The body with its keys in the order sent (`body` sorts them), parsed at most once: from the
// raw text, or without one (a caller that built `body`) from its dump, keys sorted. Of bounded
// depth either way, as ParseBody returned it.
class OrderedBody {
 public:
  OrderedBody(const Json& body, std::string_view raw_body) : body_(body), raw_body_(raw_body) {}

  absl::StatusOr<const nlohmann::ordered_json*> Get() {
    if (!parsed_.has_value()) {
      parsed_ = ParseOrderedJson(raw_body_, "request body", kRequestBodyJsonLimits);
      if (!parsed_->ok() || !(*parsed_)->is_object()) {
        parsed_ = ParseOrderedJson(body_.dump(), "request body", kRequestBodyJsonLimits);
      }
    }
    if (!parsed_->ok()) return parsed_->status();
    return &**parsed_;
  }

 private:
  const Json& body_;
  std::string_view raw_body_;
  std::optional<absl::StatusOr<nlohmann::ordered_json>> parsed_;
};

// tools / tool_choice / parallel_tool_calls (server/common/tool_calling.h), for the family the model's
// chat template speaks. Forced calls (required, named) compile their grammar here, on the front
// end's thread; auto only marks the output to be parsed for calls.
absl::Status ParseTools(const Json& body, OrderedBody& ordered_body, const ServerContext& ctx,
                        GenerationInput* common, ParsedGeneration* out) {
  auto present = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null();
  };
  if (!present("tools") && !present("tool_choice") && !present("parallel_tool_calls")) {
    return absl::OkStatus();
  }
  absl::StatusOr<const nlohmann::ordered_json*> ordered = ordered_body.Get();
  if (!ordered.ok()) return ordered.status();
  const text::tool_calls::ToolFamily family =
      ctx.jinja_chat != nullptr ? ctx.jinja_chat->tool_family : text::tool_calls::ToolFamily::kNone;
  absl::StatusOr<std::optional<ToolRequest>> req = ParseToolFields(**ordered, family);
  if (!req.ok()) return req.status();
  if (!req->has_value()) return absl::OkStatus();
  out->tool_family = family;
  if (absl::Status s = AddToolConstraint(ctx.tool_calling.get(), **req, family,
                                         &common->constraint);
      !s.ok()) {
    return s;
  }
  out->tools_forced = (*req)->forced();
  return absl::OkStatus();
}

// response_format, guided_json / _regex / _choice / _grammar, grammar, structured_outputs
// (server/common/structured_outputs.h): read with the keys in the order
// sent (`body` has them sorted, and properties are generated in schema order), and compiled
// here, on the front end's thread, never on the engine's.
absl::Status ParseStructuredOutput(const Json& body, OrderedBody& ordered_body,
                                   const ServerContext& ctx, GenerationInput* common) {
  auto present = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null();
  };
  if (!present("response_format") && !present("guided_json") && !present("guided_regex") &&
      !present("guided_choice") && !present("guided_grammar") && !present("grammar") &&
      !present("structured_outputs")) {
    return absl::OkStatus();
  }
  absl::StatusOr<const nlohmann::ordered_json*> ordered = ordered_body.Get();
  if (!ordered.ok()) return ordered.status();
  absl::StatusOr<std::optional<StructuredOutputSpec>> spec = ParseStructuredOutputFields(**ordered);
  if (!spec.ok()) return spec.status();
  if (!spec->has_value()) return absl::OkStatus();
  auto constraint = CompileStructuredOutput(ctx.structured_outputs.get(), **spec);
  if (!constraint.ok()) return constraint.status();
  common->constraint = *std::move(constraint);
  return absl::OkStatus();
}

// The fields both endpoints share. Fills `common` (prompt left empty) and `out`'s stream flags.
absl::Status ParseCommon(const Json& body, const ServerContext& ctx, GenerationInput* common,
                         ParsedGeneration* out) {
  if (absl::Status s = CheckModel(body, ctx); !s.ok()) return s;
  FieldReader f(body);
  engine::SamplingParams& p = common->params;
  f.Float("temperature", &p.temperature);
  f.Float("top_p", &p.top_p);
  int64_t top_k = p.top_k;
  f.IntRange("top_k", -1, 1 << 30, &top_k);
  p.top_k = static_cast<int>(top_k);
  f.Float("min_p", &p.min_p);
  f.Float("frequency_penalty", &p.frequency_penalty);
  f.Float("presence_penalty", &p.presence_penalty);
  f.Float("repetition_penalty", &p.repetition_penalty);
  std::optional<int64_t> seed;
  f.Int("seed", &seed);
  if (seed.has_value()) {
    p.seed = static_cast<uint64_t>(*seed);
    p.has_seed = true;
  }
  f.Int("n", &common->n);
  std::optional<int64_t> best_of;
  f.Int("best_of", &best_of);
  f.StringOrList("stop", &common->stop);
  f.IntList("stop_token_ids", &p.stop_token_ids);
  f.Bool("ignore_eos", &p.ignore_eos);
  int64_t min_tokens = 0;
  f.IntRange("min_tokens", 0, 1 << 30, &min_tokens);
  p.min_tokens = static_cast<int>(min_tokens);
  int64_t priority = 0;
  f.IntRange("priority", -kMaxAbsPriority, kMaxAbsPriority, &priority);
  common->priority = -priority;  // vLLM: lower is earlier; scheduler: larger is earlier
  f.String("user", &common->user);
  f.String("cache_salt", &common->cache_salt);
  f.Bool("stream", &out->stream);
  if (f.Has("logit_bias")) {
    if (absl::Status s = ParseLogitBias(body["logit_bias"], &p.logit_bias); !s.ok()) {
      f.Fail("logit_bias", std::string(s.message()));
    }
  }
  if (f.Has("stream_options")) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) {
      f.Fail("stream_options", "stream_options must be an object");
    } else if (!out->stream) {
      f.Fail("stream_options", "stream_options is only allowed when stream is true");
    } else {
      FieldReader sf(so, "stream_options.");
      sf.Bool("include_usage", &out->include_usage);
      if (!sf.status().ok()) return sf.status();
    }
  }
  if (!f.status().ok()) return f.status();
  if (best_of.has_value() && *best_of != common->n) {
    return InvalidParam("best_of", absl::StrCat("best_of (", *best_of,
                                                ") different from n is not supported; "
                                                "request n samples instead"));
  }
  if (absl::Status s = ValidateN(common->n, ctx.options.max_n); !s.ok()) return s;
  return ValidateStop(common->stop);
}

int VocabSize(const ServerContext& ctx) { return ctx.tokenizer->vocab_size(); }

// The prompts of a completions request, as sent.
absl::Status ParsePrompts(const Json& body, const ServerContext& ctx,
                          std::vector<PromptAsSent>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return InvalidParam("prompt",
                        "prompt is required: a string, an array of token ids, or an "
                        "array of either");
  }
  size_t text_bytes = 0;  // over all prompts of the request: each is tokenized
  auto add_text = [&](const std::string& s) -> absl::Status {
    if (s.empty()) return InvalidParam("prompt", "the prompt is empty; send some text");
    if (!IsValidUtf8(s)) return InvalidParam("prompt", "the prompt is not valid UTF-8");
    // Before tokenizing: a long text costs the tokenizer seconds of CPU.
    text_bytes += s.size();
    if (absl::Status st = CheckPromptBytes(s, ctx.options); !st.ok()) return st;
    if (absl::Status st = CheckPromptSize(static_cast<int64_t>(text_bytes), ctx.options);
        !st.ok()) {
      return st;
    }
    prompts->push_back(s);
    return absl::OkStatus();
  };
  auto add_ids = [&](const Json& arr) -> absl::Status {
    std::vector<int32_t> ids;
    if (absl::Status s = ReadTokenIds(arr, "prompt", &ids); !s.ok()) return s;
    if (absl::Status s = ValidatePromptTokens(ids, VocabSize(ctx)); !s.ok()) return s;
    prompts->push_back(std::move(ids));
    return absl::OkStatus();
  };
  const Json& p = *it;
  if (p.is_string()) return add_text(p.get<std::string>());
  if (!p.is_array()) {
    return InvalidParam(
        "prompt", absl::StrCat("prompt must be a string or an array, got ", Sv(JsonTypeName(p))));
  }
  if (p.empty()) return InvalidParam("prompt", "the prompt is empty");
  if (p[0].is_number()) return add_ids(p);
  if (p.size() > static_cast<size_t>(kMaxBatchPrompts)) {
    return InvalidParam("prompt", absl::StrCat("a batch may hold at most ", kMaxBatchPrompts,
                                               " prompts, got ", p.size()));
  }
  const bool strings = p[0].is_string();
  for (const Json& e : p) {
    if (strings && e.is_string()) {
      if (absl::Status s = add_text(e.get<std::string>()); !s.ok()) return s;
    } else if (!strings && e.is_array()) {
      if (e.empty()) return InvalidParam("prompt", "a prompt in the batch is empty");
      if (absl::Status s = add_ids(e); !s.ok()) return s;
    } else {
      return InvalidParam("prompt",
                          "prompt must be a string, an array of token ids, an array of strings "
                          "or an array of token-id arrays (no mixing)");
    }
  }
  return absl::OkStatus();
}

// Features the OpenAI API has and this server does not yet (the legacy functions), and
// vLLM's extensions that banyan lacks (guided decoding, beam search, ...): refused with a 400
// naming the field, never silently dropped (an agent loop that sent tools and got plain text
// back would go wrong without a word). What asks for nothing passes: an empty functions list,
// a vLLM extension at its default. On /v1/completions the tool fields are refused whatever their value:
// they belong to chat.
absl::Status CheckUnsupportedFeatures(const Json& body, Api api) {
  auto present = [&](const char* key) -> const Json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  // vLLM's extensions that would change the output and that banyan does not implement: each is
  // accepted only with vLLM's default value (it then changes nothing).
  struct Extension {
    const char* name;
    bool chat_only;
    bool (*is_default)(const Json&);
  };
  static constexpr auto kFalse = [](const Json& v) { return v.is_boolean() && !v.get<bool>(); };
  static constexpr auto kTrue = [](const Json& v) { return v.is_boolean() && v.get<bool>(); };
  static constexpr auto kEmpty = [](const Json& v) { return v.is_array() && v.empty(); };
  static constexpr auto kNever = [](const Json&) { return false; };
  static constexpr Extension kExtensions[] = {
      {"use_beam_search", false, kFalse},
      {"include_stop_str_in_output", false, kFalse},
      {"skip_special_tokens", false, kTrue},
      {"spaces_between_special_tokens", false, kTrue},
      {"return_tokens_as_token_ids", false, kFalse},
      {"truncate_prompt_tokens", false, kNever},
      {"allowed_token_ids", false, kNever},
      {"bad_words", false, kEmpty},
      {"prompt_logprobs", false, kNever},
      {"logits_processors", false, kNever},
      {"echo", true, kFalse},  // chat's echo (completions' is supported)
      {"continue_final_message", true, kFalse},
      {"chat_template", true, kNever},
      {"documents", true, kNever},
  };
  for (const Extension& e : kExtensions) {
    if (e.chat_only && api != Api::kChat) continue;
    if (const Json* v = present(e.name); v != nullptr && !e.is_default(*v)) {
      return InvalidParam(e.name, absl::StrCat(e.name,
                                               " (a vLLM extension) is not supported by this "
                                               "server; leave it out or send its default"));
    }
  }
  if (api != Api::kChat) {
    // Tool calling belongs to chat; on completions these would be dropped unseen.
    for (const char* name : {"tools", "tool_choice", "functions", "function_call"}) {
      if (present(name) != nullptr) {
        return InvalidParam(name, absl::StrCat(name, " is a chat field: /v1/completions takes no "
                                                     "tools; use /v1/chat/completions"));
      }
    }
    return absl::OkStatus();
  }
  // tools, tool_choice and parallel_tool_calls: ParseTools (server/common/tool_calling.h).
  if (const Json* fns = present("functions");
      fns != nullptr && (!fns->is_array() || !fns->empty())) {
    std::string fc = "auto";
    if (const Json* c = present("function_call"); c != nullptr && c->is_string()) {
      fc = c->get<std::string>();
    }
    if (fc != "none") {
      return InvalidParam("functions",
                          "function calling is not supported by this server yet; send the "
                          "request without functions");
    }
  }
  if (const Json* c = present("function_call");
      c != nullptr && !(c->is_string() && (c->get<std::string>() == "none" ||
                                           c->get<std::string>() == "auto"))) {
    return InvalidParam("function_call",
                        "function_call is not supported by this server yet (no function "
                        "calling)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModel(const Json& body, const ServerContext& ctx) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return InvalidParam("model",
                        absl::StrCat("model must be a string, got ", Sv(JsonTypeName(*it))));
  }
  const std::string model = it->get<std::string>();
  if (model != ctx.model_name) {
    absl::Status s = absl::NotFoundError(absl::StrCat(
        "The model `", model, "` does not exist. This server serves `", ctx.model_name, "`."));
    SetStatusParam(&s, "model");
    SetStatusCode(&s, "model_not_found");
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<text::ChatMessage>> ParseMessages(const Json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return InvalidParam("messages", "messages is required: an array of {role, content}");
  }
  if (!it->is_array()) {
    return InvalidParam("messages",
                        absl::StrCat("messages must be an array, got ", Sv(JsonTypeName(*it))));
  }
  if (it->empty()) return InvalidParam("messages", "messages must not be empty");
  std::vector<text::ChatMessage> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return InvalidParam(where, absl::StrCat(where, " must be an object"));
    FieldReader f(m, where + ".");
    text::ChatMessage msg;
    f.String("role", &msg.role);
    if (!f.status().ok()) return f.status();
    if (msg.role.empty()) return InvalidParam(where + ".role", where + ".role is required");
    if (msg.role == "developer") msg.role = "system";
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) {
        return InvalidParam(where + ".tool_calls", where + ".tool_calls must be an array");
      }
      if (msg.role != "assistant" && !tc->empty()) {
        return InvalidParam(where + ".tool_calls", "only assistant messages carry tool_calls");
      }
      msg.has_tool_calls = !tc->empty();
    }
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      if (msg.role != "assistant") {
        return InvalidParam(where + ".content", where + ".content is required");
      }
    } else if (c->is_string()) {
      msg.content = c->get<std::string>();
    } else if (c->is_array()) {
      std::vector<std::string> texts;
      for (const Json& part : *c) {
        const std::string pw = where + ".content";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return InvalidParam(pw, absl::StrCat(pw, " parts must be objects {type, ...}"));
        }
        if (part["type"] != "text") {
          return InvalidParam(
              pw, absl::StrCat("content parts of type '", part["type"].get<std::string>(),
                               "' are not supported; only 'text'"));
        }
        if (!part.contains("text") || !part["text"].is_string()) {
          return InvalidParam(pw, absl::StrCat(pw, " text parts need a string 'text'"));
        }
        texts.push_back(part["text"].get<std::string>());
      }
      // OpenAI and vLLM join text parts with newlines.
      msg.content = absl::StrJoin(texts, "\n");
    } else {
      return InvalidParam(
          where + ".content",
          absl::StrCat(where, ".content must be a string or an array of parts, got ",
                       Sv(JsonTypeName(*c))));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

namespace {

// Chat's messages, and the body in the order sent when the model's own template reads it.
absl::StatusOr<ChatPrompt> ReadChatPrompt(const Json& body, OrderedBody& ordered_body,
                                          const ServerContext& ctx) {
  absl::StatusOr<std::vector<text::ChatMessage>> messages = ParseMessages(body);
  if (!messages.ok()) return messages.status();
  for (const text::ChatMessage& m : *messages) {
    if (!IsValidUtf8(m.content)) return InvalidParam("messages", "a message is not valid UTF-8");
  }
  ChatPrompt out;
  out.messages = *std::move(messages);
  if (ctx.jinja_chat != nullptr) {
    absl::StatusOr<const nlohmann::ordered_json*> ordered = ordered_body.Get();
    if (!ordered.ok()) return ordered.status();
    out.ordered_body = **ordered;
  }
  return out;
}

absl::StatusOr<ParsedRequest> ParseCompletionFields(const Json& body, OrderedBody& ordered_body,
                                                    const ServerContext& ctx) {
  LogUnknownFields(body, Api::kCompletions);
  if (absl::Status s = CheckUnsupportedFeatures(body, Api::kCompletions); !s.ok()) return s;
  ParsedRequest parsed;
  ParsedGeneration& out = parsed.generation;
  GenerationInput& common = parsed.common;
  out.api = Api::kCompletions;
  out.default_max_tokens = 16;
  if (absl::Status s = ParseCommon(body, ctx, &common, &out); !s.ok()) return s;
  if (absl::Status s = ParseStructuredOutput(body, ordered_body, ctx, &common); !s.ok()) return s;

  FieldReader f(body);
  f.Int("max_tokens", &common.max_tokens);
  std::optional<int64_t> logprobs;
  f.Int("logprobs", &logprobs);
  f.Bool("echo", &parsed.echo);
  f.Bool("add_special_tokens", &parsed.add_special_tokens);
  std::string suffix;
  f.String("suffix", &suffix);
  if (!f.status().ok()) return f.status();
  if (!suffix.empty()) return InvalidParam("suffix", "suffix is not supported by this server");
  if (logprobs.has_value()) {
    if (*logprobs < 0 || *logprobs > kMaxCompletionLogprobs) {
      return InvalidParam("logprobs", absl::StrCat("logprobs must be between 0 and ",
                                                   kMaxCompletionLogprobs, ", got ", *logprobs));
    }
    out.logprobs = true;
    out.top_logprobs = static_cast<int>(*logprobs);
    common.params.logprobs = out.top_logprobs;
  }
  if (parsed.echo && out.logprobs) {
    return InvalidParam("echo",
                        "echo together with logprobs is not supported: this server "
                        "does not compute log-probabilities of prompt tokens");
  }
  if (absl::Status s = ParsePrompts(body, ctx, &parsed.prompts); !s.ok()) return s;
  return parsed;
}

absl::StatusOr<ParsedRequest> ParseChatFields(const Json& body, OrderedBody& ordered_body,
                                              const ServerContext& ctx) {
  LogUnknownFields(body, Api::kChat);
  if (absl::Status s = CheckUnsupportedFeatures(body, Api::kChat); !s.ok()) return s;
  ParsedRequest parsed;
  ParsedGeneration& out = parsed.generation;
  GenerationInput& common = parsed.common;
  out.api = Api::kChat;
  out.default_max_tokens = 0;
  common.prompt_field = "messages";
  if (absl::Status s = ParseCommon(body, ctx, &common, &out); !s.ok()) return s;
  if (absl::Status s = ParseStructuredOutput(body, ordered_body, ctx, &common); !s.ok()) return s;
  if (absl::Status s = ParseTools(body, ordered_body, ctx, &common, &out); !s.ok()) return s;

  FieldReader f(body);
  f.Int("max_tokens", &common.max_tokens);
  if (f.Has("max_completion_tokens")) {
    f.Int("max_completion_tokens", &common.max_tokens);
    common.max_tokens_field = "max_completion_tokens";
  }
  f.Bool("logprobs", &out.logprobs);
  int64_t top = 0;
  f.IntRange("top_logprobs", 0, engine::kMaxLogprobs, &top);
  if (!f.status().ok()) return f.status();
  if (top > 0 && !out.logprobs) {
    return InvalidParam("top_logprobs", "top_logprobs needs logprobs to be true");
  }
  out.top_logprobs = static_cast<int>(top);
  common.params.logprobs = out.logprobs ? out.top_logprobs : 0;

  absl::StatusOr<ChatPrompt> chat = ReadChatPrompt(body, ordered_body, ctx);
  if (!chat.ok()) return chat.status();
  parsed.chat = *std::move(chat);
  return parsed;
}

// Stages 1 to 3.
absl::StatusOr<ParsedGeneration> ParseRenderTokenize(Api api, const Json& body,
                                                     std::string_view raw_body,
                                                     const ServerContext& ctx) {
  absl::StatusOr<ParsedRequest> parsed = ParseGenerationRequest(api, body, raw_body, ctx);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::vector<RenderedPrompt>> rendered = RenderPrompts(*parsed, ctx);
  if (!rendered.ok()) return rendered.status();
  return TokenizePrompts(*std::move(parsed), *rendered, ctx);
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseGenerationRequest(Api api, const Json& body,
                                                     std::string_view raw_body,
                                                     const ServerContext& ctx) {
  OrderedBody ordered_body(body, raw_body);
  return api == Api::kChat ? ParseChatFields(body, ordered_body, ctx)
                           : ParseCompletionFields(body, ordered_body, ctx);
}

absl::StatusOr<ChatPrompt> ParseChatPrompt(const Json& body, std::string_view raw_body,
                                           const ServerContext& ctx) {
  OrderedBody ordered_body(body, raw_body);
  return ReadChatPrompt(body, ordered_body, ctx);
}

absl::StatusOr<ParsedGeneration> ParseCompletionRequest(const Json& body, const ServerContext& ctx,
                                                        std::string_view raw_body) {
  return ParseRenderTokenize(Api::kCompletions, body, raw_body, ctx);
}

absl::StatusOr<ParsedGeneration> ParseChatRequest(const Json& body, const ServerContext& ctx,
                                                  std::string_view raw_body) {
  return ParseRenderTokenize(Api::kChat, body, raw_body, ctx);
}

}  // namespace banyan::server::http
