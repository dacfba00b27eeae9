#include "text/chat_template.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/param_status.h"

namespace banyan::text {
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
    case ChatTemplate::kModel:
      return "model";
  }
  return "plain";
}

std::optional<ChatTemplate> ChatTemplateFromName(std::string_view name) {
  for (ChatTemplate t : {ChatTemplate::kModel, ChatTemplate::kPlain, ChatTemplate::kLlama2,
                         ChatTemplate::kChatML}) {
    if (ChatTemplateName(t) == name) return t;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<ChatSegment>> RenderChat(ChatTemplate tmpl,
                                                    const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return Bad("messages must contain at least one message");
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return Bad(absl::StrCat("unsupported message role '", m.role,
                              "': this model has no chat template of its own that could render "
                              "it; use system, user or assistant"));
    }
    if (m.has_tool_calls) {
      return Bad(
          "an assistant message with tool_calls needs the model's own chat template, and this "
          "model has none");
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
    case ChatTemplate::kModel:
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
                                const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const ChatSegment& s : segments) {
    std::vector<int32_t> part = tokenizer.Encode(s.text, s.bos);
    ids.insert(ids.end(), part.begin(), part.end());
    if (s.eos && tokenizer.eos_id() >= 0) ids.push_back(tokenizer.eos_id());
  }
  return ids;
}

absl::StatusOr<std::shared_ptr<const JinjaChat>> MakeJinjaChat(const std::string& text,
                                                               std::string source,
                                                               std::string bos_token,
                                                               std::string eos_token,
                                                               const Tokenizer& tokenizer) {
  absl::StatusOr<text::jinja::Template> t = text::jinja::Template::Parse(text);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template ", source, ": ", t.status().message()));
  }
  auto chat = std::make_shared<JinjaChat>();
  chat->tmpl = std::make_shared<const text::jinja::Template>(*std::move(t));
  chat->source = std::move(source);
  chat->bos_token = std::move(bos_token);
  chat->eos_token = std::move(eos_token);
  chat->special_tokens = tokenizer.SpecialTokens();
  chat->tool_family = tool_calls::DetectToolFamily(text);
  std::stable_sort(chat->special_tokens.begin(), chat->special_tokens.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return std::shared_ptr<const JinjaChat>(std::move(chat));
}

absl::StatusOr<std::string> RenderJinjaChat(const JinjaChat& chat,
                                            const nlohmann::ordered_json& body,
                                            const std::vector<ChatMessage>& messages) {
  using OJson = nlohmann::ordered_json;
  OJson ctx = OJson::object();
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) {
      return InvalidParam("chat_template_kwargs", "chat_template_kwargs must be an object");
    }
    for (const auto& [k, v] : kw->items()) ctx[k] = v;
  }
  OJson msgs = OJson::array();
  const OJson& raw = body.at("messages");
  for (size_t i = 0; i < messages.size() && i < raw.size(); ++i) {
    OJson m = raw[i];
    m["role"] = messages[i].role;
    m["content"] = messages[i].content;
    msgs.push_back(std::move(m));
  }
  ctx["messages"] = std::move(msgs);
  bool add_generation_prompt = true;
  if (auto it = body.find("add_generation_prompt"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidParam("add_generation_prompt", "add_generation_prompt must be a boolean");
    }
    add_generation_prompt = it->get<bool>();
  }
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = chat.bos_token;
  ctx["eos_token"] = chat.eos_token;
  if (auto it = body.find("tools"); it != body.end() && it->is_array() && !it->empty()) {
    ctx["tools"] = *it;
  }
  absl::StatusOr<std::string> text = chat.tmpl->Render(ctx);
  if (!text.ok()) {
    return Bad(absl::StrCat("the model's chat template failed (", chat.source, ", ",
                            text.status().message(), ")"));
  }
  return text;
}

std::vector<int32_t> EncodeRendered(const JinjaChat& chat, std::string_view text,
                                    const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  size_t start = 0;  // of the ordinary text not yet encoded
  auto flush = [&](size_t end) {
    if (end > start) {
      std::vector<int32_t> part = tokenizer.Encode(text.substr(start, end - start), false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  std::array<bool, 256> first_bytes{};  // bytes a special-token text starts with
  for (const auto& sp : chat.special_tokens) first_bytes[static_cast<unsigned char>(sp.first[0])] = true;
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    if (first_bytes[static_cast<unsigned char>(text[i])]) {
      for (const auto& sp : chat.special_tokens) {
        if (text.substr(i).starts_with(sp.first)) {
          hit = &sp;
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    flush(i);
    ids.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  flush(text.size());
  return ids;
}

}  // namespace banyan::text
