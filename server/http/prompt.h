// Stages 2 and 3 of a generation request (the stages: generation.h, StartGeneration): render
// the prompts a ParsedRequest holds as sent (openai_request.h) into what the tokenizer reads,
// then tokenize them into one GenerationInput per prompt.
//
// Render: a chat conversation goes through the model's own template (text in which
// special-token texts stand for their ids) or a built-in one (segments with BOS / EOS as ids),
// as chat_template.h says; the rendered size is then checked against max_prompt_bytes, before
// a long conversation costs the tokenizer seconds of CPU. A completions prompt is already text
// or token ids (checked when parsed) and passes through.
// Tokenize: cannot fail; token ids as sent are used exactly as given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/chat_template.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

// One prompt, ready for the tokenizer.
struct RenderedPrompt {
  enum class Form {
    kText,          // text: encoded with BOS when add_bos
    kTemplateText,  // ctx.jinja_chat's output: special-token texts become their ids, no BOS
    kSegments,      // a built-in template's output
    kTokenIds,      // token ids as sent
  };
  Form form = Form::kText;
  std::string text;                   // kText, kTemplateText
  bool add_bos = false;               // kText
  std::vector<text::ChatSegment> segments;  // kSegments
  std::vector<int32_t> ids;           // kTokenIds
};

// Stage 2: one RenderedPrompt per prompt (chat: exactly one). InvalidArgument (param
// "messages") when a template refuses the conversation or its text is too long.
absl::StatusOr<std::vector<RenderedPrompt>> RenderPrompts(const ParsedRequest& parsed,
                                                          const ServerContext& ctx);
absl::StatusOr<RenderedPrompt> RenderChatPrompt(const ChatPrompt& chat, const ServerContext& ctx);

// Stage 3: the token ids of one prompt.
std::vector<int32_t> TokenizePrompt(const RenderedPrompt& prompt, const ServerContext& ctx);
// Stage 3 for a whole request: parsed.generation with one input per prompt (and, with echo,
// each prompt's text).
ParsedGeneration TokenizePrompts(ParsedRequest parsed, const std::vector<RenderedPrompt>& prompts,
                                 const ServerContext& ctx);

// The prompt token ids of a chat body's messages (parse, render, tokenize), for /tokenize.
absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const Json& body, std::string_view raw_body,
                                                   const ServerContext& ctx);

}  // namespace banyan::server::http
