// Stage 1 of a generation request (the stages: generation.h, StartGeneration): decoding of
// OpenAI /v1/completions and /v1/chat/completions request bodies into a ParsedRequest, every
// field decoded and checked on its own, the prompts still as sent. Stages 2 and 3 (prompt.h)
// render and tokenize them into wire-independent GenerationInputs (server/common/validation.h), one
// per prompt.
//
// Accepted as OpenAI / vLLM do:
//  - `model` may be absent (the one served model); when present it must name it (404
//    model_not_found otherwise).
//  - Unknown fields are ignored (logged at debug level), as OpenAI does. Known fields that would
//    change the output and that banyan can not honour are rejected with 400 rather than silently
//    ignored: `suffix`, `best_of` != n, non-text content parts.
//  - Completions `prompt`: a string, an array of token ids, or a batch: an array of strings or
//    an array of token-id arrays (at most kMaxBatchPrompts). Choice i*n + j is sample j of
//    prompt i, as in OpenAI's API. Strings get BOS unless `add_special_tokens` is false; token
//    ids are used exactly as given.
//  - `priority`: vLLM's meaning, lower is served first (default 0); it is negated for the
//    scheduler, where larger is more important.
//  - `user` and the vLLM extension `cache_salt` select the prefix-cache namespace.
//  - `logit_bias`: token ids to biases in [-100, 100], added to the logits before the penalties
//    (engine/sampler/sampler.h, step 3). A key is the id in decimal digits only ("50256"); " 5",
//    "+5", "5.0" and "-1" are refused with a 400 naming logit_bias.
//  - `tools`, `tool_choice`, `functions`, `function_call` on /v1/completions: 400 naming the
//    field (they are chat fields, and would otherwise be dropped unseen). On chat, tools as
//    server/common/tool_calling.h says; the legacy `functions` are refused.
//  - vLLM extensions also accepted: top_k, min_p, repetition_penalty, ignore_eos,
//    stop_token_ids, min_tokens, add_special_tokens. Its other extensions that would change the
//    output are refused unless they carry vLLM's default.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "text/chat_template.h"
#include "server/http/openai_json.h"
#include "server/common/server_context.h"
#include "server/common/validation.h"

namespace banyan::server::http {

inline constexpr int kMaxBatchPrompts = 64;
inline constexpr int kMaxCompletionLogprobs = 5;  // OpenAI's limit for /v1/completions

enum class Api { kCompletions, kChat };

struct ParsedGeneration {
  Api api = Api::kCompletions;
  std::vector<GenerationInput> inputs;  // one per prompt (chat: exactly one)
  std::vector<std::string> echo_texts;  // completions with echo: the text of each prompt
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  bool logprobs = false;        // return log-probabilities of the sampled tokens
  int top_logprobs = 0;         // and this many alternatives per token
  int default_max_tokens = 16;  // <= 0: the rest of the context
  // Chat with tools (tool_choice not "none"): each choice's text is read for calls in this
  // family's syntax (text/tool_calls/tool_call_parser.h); kNone: plain text.
  text::tool_calls::ToolFamily tool_family = text::tool_calls::ToolFamily::kNone;
  bool tools_forced = false;  // tool_choice required / named: the grammar forces the calls
  // Chat with --reasoning-parser (text/reasoning.h); set by TokenizePrompts, which sees the
  // rendered prompt.
  enum class Reasoning {
    kOff,          // no parser: no reasoning_content field
    kClosed,       // the prompt closed the thinking (text::PromptClosesThinking): all content
    kThinksFirst,  // split into reasoning_content and content; a constraint holds only after
                   // "</think>" (AfterThinking)
  };
  Reasoning reasoning = Reasoning::kOff;
};

// A chat request's conversation, as the chat template reads it.
struct ChatPrompt {
  std::vector<text::ChatMessage> messages;  // valid UTF-8 contents
  // The body with its keys in the order sent (Json sorts them): templates print tool schemas
  // with tojson, and the model learned them in the client's order. Set when the model has its
  // own template (ctx.jinja_chat).
  std::optional<nlohmann::ordered_json> ordered_body;
};

// A completions prompt as sent: text (valid UTF-8, within max_prompt_bytes) or token ids (within
// the vocabulary).
using PromptAsSent = std::variant<std::string, std::vector<int32_t>>;

// Stage 1's output: everything in the body but the token ids.
struct ParsedRequest {
  ParsedGeneration generation;  // every field; `inputs` stays empty until stage 3
  GenerationInput common;       // what each prompt's input shares (prompt empty)
  // Completions:
  std::vector<PromptAsSent> prompts;
  bool add_special_tokens = true;  // BOS before a text prompt
  bool echo = false;               // answer with each prompt's text before its completion
  // Chat:
  ChatPrompt chat;
};

// Stage 1. `body` is the parsed request body (ParseBody); `raw_body` its text, where schemas,
// tools and the chat template's view of the body are read with their keys in the order sent
// (empty: body's own order, keys sorted).
absl::StatusOr<ParsedRequest> ParseGenerationRequest(Api api, const Json& body,
                                                     std::string_view raw_body,
                                                     const ServerContext& ctx);

// body["messages"] as a ChatPrompt (param "messages" in errors): what /tokenize and chat share.
absl::StatusOr<ChatPrompt> ParseChatPrompt(const Json& body, std::string_view raw_body,
                                           const ServerContext& ctx);

// 404 model_not_found when body["model"] is present and is not ctx.model_name.
absl::Status CheckModel(const Json& body, const ServerContext& ctx);

// body["messages"] as ChatMessages (param "messages" in errors).
absl::StatusOr<std::vector<text::ChatMessage>> ParseMessages(const Json& body);

// Stages 1 to 3 at once (parse, render, tokenize; prompt.h), for callers that want the
// GenerationInputs of a body: tests and fuzzers. `raw_body` as for ParseGenerationRequest.
absl::StatusOr<ParsedGeneration> ParseCompletionRequest(const Json& body, const ServerContext& ctx,
                                                        std::string_view raw_body = {});
absl::StatusOr<ParsedGeneration> ParseChatRequest(const Json& body, const ServerContext& ctx,
                                                  std::string_view raw_body = {});

}  // namespace banyan::server::http
