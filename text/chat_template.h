// How a conversation becomes prompt token ids.
//
// The model's own template (JinjaChat; the server's ServerContext::jinja_chat): the Jinja text of its
// tokenizer_config.json / GGUF metadata, or of --chat-template FILE, rendered as transformers'
// apply_chat_template does, with the variables
//   messages               the request's messages as sent (every field: tool_calls,
//                          tool_call_id, name, ...), "developer" read as "system", content parts
//                          joined into one string, a null content as ""
//   add_generation_prompt  the request's add_generation_prompt (default true)
//   bos_token, eos_token   the model's special-token texts
//   tools                  the request's tools, when it has some (tool_choice "none")
// plus the keys of the request's chat_template_kwargs (e.g. enable_thinking). The rendered text
// is tokenized with no BOS added: the template writes it, as with transformers, so it is never
// doubled. Special-token texts in it (the tokenizer's control pieces: "<s>", "</s>", ...) become
// their ids; the text between them is encoded as ordinary text. A template that fails (a
// raise_exception, an undefined call, ...) is a 400 naming the template's message and line.
//
// The built-in templates, for models with no template of their own (--chat-template):
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
// "system". Other roles (tool, function) and assistant tool_calls are rejected with
// InvalidArgument (param "messages"): only a model's own template can render them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "text/jinja/template.h"
#include "text/tool_calls/tool_syntax.h"

namespace banyan::text {

// How a chat conversation becomes a prompt. kModel (the default): the model's own Jinja
// template (or --chat-template FILE), else kPlain. A named built-in replaces the model's.
enum class ChatTemplate {
  kModel,
  kLlama2,  // "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ..."
  kChatML,  // "<|im_start|>{role}\n{content}<|im_end|>\n" ... "<|im_start|>assistant\n"
  kPlain,   // "{role}: {content}\n" ... "assistant:" -- for small story models with no chat tuning
};


struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (after mapping "developer"), "tool", ...
  std::string content;
  bool has_tool_calls = false;  // an assistant message with tool_calls
};

// A model's own chat template, ready to render.
struct JinjaChat {
  std::shared_ptr<const text::jinja::Template> tmpl;
  std::string source;  // where it came from (a file, or the GGUF key), for logs
  std::string bos_token;
  std::string eos_token;
  // Texts that encode to one id (the tokenizer's control and unknown pieces), longest first.
  std::vector<std::pair<std::string, int32_t>> special_tokens;
  // How the template writes tool calls (read from its text); kNone: no tool calling.
  tool_calls::ToolFamily tool_family = tool_calls::ToolFamily::kNone;
};

// Parses `text` (InvalidArgument "chat template <source>: line N: ..." on a syntax error).
absl::StatusOr<std::shared_ptr<const JinjaChat>> MakeJinjaChat(const std::string& text,
                                                               std::string source,
                                                               std::string bos_token,
                                                               std::string eos_token,
                                                               const Tokenizer& tokenizer);

// The prompt text of a chat request rendered by `chat` (see above). `body` is the request with
// its keys in the order sent; `messages` its parsed messages (ParseMessages).
absl::StatusOr<std::string> RenderJinjaChat(const JinjaChat& chat, const nlohmann::ordered_json& body,
                                            const std::vector<ChatMessage>& messages);

// Token ids of rendered text: special-token texts become their ids, no BOS is added.
std::vector<int32_t> EncodeRendered(const JinjaChat& chat, std::string_view text,
                                    const Tokenizer& tokenizer);

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
                                const Tokenizer& tokenizer);

// "model", "plain", "chatml", "llama2": the names --chat-template takes besides a Jinja file.
std::string_view ChatTemplateName(ChatTemplate tmpl);
// The template of one of those names; nullopt for any other text (a file name).
std::optional<ChatTemplate> ChatTemplateFromName(std::string_view name);

}  // namespace banyan::text
