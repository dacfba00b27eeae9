// The built-in chat templates: how a conversation becomes prompt token ids when the model
// carries no template of its own. Chosen by ServerOptions::chat_template.
//
// A rendered conversation is a list of segments, each encoded on its own (SentencePiece adds
// its dummy-prefix space at the start of each) with BOS before and/or EOS after it as token ids,
// never as text, so "<s>" typed by a user stays text. BOS is added only when the model has one.
// Every template ends with the cue for the assistant's turn (OpenAI's add_generation_prompt).
//
// kPlain (default; for small story models with no chat tuning). One segment, BOS first:
//     "{role}: {content}\n" for each message, then "assistant:"
//   e.g. [system "Be brief.", user "Hi"] -> BOS "system: Be brief.\nuser: Hi\nassistant:"
//
// kChatML. One segment, BOS first:
//     "<|im_start|>{role}\n{content}<|im_end|>\n" for each message, then
//     "<|im_start|>assistant\n"
//
// kLlama2 (Meta's reference `chat_completion`, which the Hugging Face template reproduces):
//   an optional leading system message is folded into the first user message as
//     "<<SYS>>\n{system}\n<</SYS>>\n\n{user}";
//   the rest must alternate user, assistant, user, ... and end with a user message;
//   each answered turn is the segment BOS "[INST] {user} [/INST] {assistant} " EOS and the last
//   one BOS "[INST] {user} [/INST]", with user and assistant contents stripped of surrounding
//   whitespace.
//
// Roles: "system", "user", "assistant"; "developer" (OpenAI's newer name) is treated as
// "system". Other roles (tool, function) are rejected with InvalidArgument (param "messages").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/server_context.h"

namespace banyan::server::http {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (after mapping "developer")
  std::string content;
};

struct ChatSegment {
  bool bos = false;  // BOS token before the text
  std::string text;
  bool eos = false;  // EOS token after the text
};

// Renders `messages` (non-empty) with `tmpl`. InvalidArgument (param "messages") for an empty
// conversation or one the template can not express.
absl::StatusOr<std::vector<ChatSegment>> RenderChat(ChatTemplate tmpl,
                                                    const std::vector<ChatMessage>& messages);

// The token ids of rendered segments.
std::vector<int32_t> EncodeChat(const std::vector<ChatSegment>& segments,
                                const engine::Tokenizer& tokenizer);

// "plain", "chatml", "llama2".
std::string_view ChatTemplateName(ChatTemplate tmpl);

}  // namespace banyan::server::http
