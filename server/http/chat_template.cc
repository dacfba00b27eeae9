#include "server/http/chat_template.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/validation.h"

namespace banyan::server::http {
namespace {

std::string Strip(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(absl::string_view(s)));
}

absl::Status Bad(std::string_view message) { return InvalidParam("messages", message); }

absl::StatusOr<std::vector<ChatSegment>> RenderLlama2(const std::vector<ChatMessage>& in) {
  std::vector<ChatMessage> msgs = in;
  if (msgs[0].role == "system") {
    if (msgs.size() < 2 || msgs[1].role != "user") {
      return Bad("the llama2 chat template needs a user message right after the system message");
    }
    msgs[1].content = absl::StrCat("<<SYS>>\n", msgs[0].content, "\n<</SYS>>\n\n", msgs[1].content);
    msgs.erase(msgs.begin());
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const char* want = i % 2 == 0 ? "user" : "assistant";
    if (msgs[i].role != want) {
      return Bad(
          absl::StrCat("the llama2 chat template needs the messages after an optional "
                       "first system message to alternate user/assistant/user/...; "
                       "message ",
                       i, " is ", msgs[i].role));
    }
  }
  if (msgs.back().role != "user") {
    return Bad("the llama2 chat template needs the last message to be from the user");
  }
  std::vector<ChatSegment> out;
  for (size_t i = 0; i + 1 < msgs.size(); i += 2) {
    out.push_back({true,
                   absl::StrCat("[INST] ", Strip(msgs[i].content), " [/INST] ",
                                Strip(msgs[i + 1].content), " "),
                   true});
  }
  out.push_back({true, absl::StrCat("[INST] ", Strip(msgs.back().content), " [/INST]"), false});
  return out;
}

}  // namespace

std::string_view ChatTemplateName(ChatTemplate tmpl) {
  switch (tmpl) {
    case ChatTemplate::kLlama2:
      return "llama2";
    case ChatTemplate::kChatML:
      return "chatml";
    case ChatTemplate::kPlain:
      return "plain";
  }
  return "plain";
}

absl::StatusOr<std::vector<ChatSegment>> RenderChat(ChatTemplate tmpl,
                                                    const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return Bad("messages must contain at least one message");
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return Bad(
          absl::StrCat("unsupported message role '", m.role, "'; use system, user or assistant"));
    }
  }
  switch (tmpl) {
    case ChatTemplate::kLlama2:
      return RenderLlama2(messages);
    case ChatTemplate::kChatML: {
      ChatSegment s{true, "", false};
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&s.text, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      }
      absl::StrAppend(&s.text, "<|im_start|>assistant\n");
      return std::vector<ChatSegment>{s};
    }
    case ChatTemplate::kPlain: {
      ChatSegment s{true, "", false};
      for (const ChatMessage& m : messages) absl::StrAppend(&s.text, m.role, ": ", m.content, "\n");
      absl::StrAppend(&s.text, "assistant:");
      return std::vector<ChatSegment>{s};
    }
  }
  return Bad("unknown chat template");
}

std::vector<int32_t> EncodeChat(const std::vector<ChatSegment>& segments,
                                const engine::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const ChatSegment& s : segments) {
    std::vector<int32_t> part = tokenizer.Encode(s.text, s.bos);
    ids.insert(ids.end(), part.begin(), part.end());
    if (s.eos && tokenizer.eos_id() >= 0) ids.push_back(tokenizer.eos_id());
  }
  return ids;
}

}  // namespace banyan::server::http
