#include "server/http/prompt.h"

#include <utility>

#include "server/common/structured_outputs.h"
#include "server/common/validation.h"
#include "text/reasoning.h"

namespace banyan::server::http {

absl::StatusOr<RenderedPrompt> RenderChatPrompt(const ChatPrompt& chat, const ServerContext& ctx) {
  using Form = RenderedPrompt::Form;
  if (ctx.jinja_chat != nullptr) {
    absl::StatusOr<std::string> text =
        text::RenderJinjaChat(*ctx.jinja_chat, *chat.ordered_body, chat.messages);
    if (!text.ok()) return text.status();
    if (absl::Status st =
            CheckPromptSize(static_cast<int64_t>(text->size()), ctx.options, "messages");
        !st.ok()) {
      return st;
    }
    RenderedPrompt out;
    out.form = Form::kTemplateText;
    out.text = *std::move(text);
    return out;
  }
  absl::StatusOr<std::vector<text::ChatSegment>> segments =
      text::RenderChat(ctx.options.chat_template, chat.messages);
  if (!segments.ok()) return segments.status();
  int64_t text_bytes = 0;
  for (const text::ChatSegment& seg : *segments) text_bytes += static_cast<int64_t>(seg.text.size());
  if (absl::Status st = CheckPromptSize(text_bytes, ctx.options, "messages"); !st.ok()) return st;
  RenderedPrompt out;
  out.form = Form::kSegments;
  out.segments = *std::move(segments);
  return out;
}

absl::StatusOr<std::vector<RenderedPrompt>> RenderPrompts(const ParsedRequest& parsed,
                                                          const ServerContext& ctx) {
  using Form = RenderedPrompt::Form;
  std::vector<RenderedPrompt> out;
  if (parsed.generation.api == Api::kChat) {
    absl::StatusOr<RenderedPrompt> chat = RenderChatPrompt(parsed.chat, ctx);
    if (!chat.ok()) return chat.status();
    out.push_back(*std::move(chat));
    return out;
  }
  for (const PromptAsSent& p : parsed.prompts) {
    RenderedPrompt& r = out.emplace_back();
    if (const auto* text = std::get_if<std::string>(&p)) {
      r.form = Form::kText;
      r.text = *text;
      r.add_bos = parsed.add_special_tokens;
    } else {
      r.form = Form::kTokenIds;
      r.ids = std::get<std::vector<int32_t>>(p);
    }
  }
  return out;
}

std::vector<int32_t> TokenizePrompt(const RenderedPrompt& prompt, const ServerContext& ctx) {
  const text::Tokenizer& tok = *ctx.tokenizer;
  switch (prompt.form) {
    case RenderedPrompt::Form::kText:
      return tok.Encode(prompt.text, prompt.add_bos);
    case RenderedPrompt::Form::kTemplateText:
      return text::EncodeRendered(*ctx.jinja_chat, prompt.text, tok);
    case RenderedPrompt::Form::kSegments:
      return text::EncodeChat(prompt.segments, tok);
    case RenderedPrompt::Form::kTokenIds:
      return prompt.ids;
  }
  return {};
}

namespace {

// The text of a rendered chat prompt (a built-in template's segments joined; their BOS / EOS
// tokens carry no text).
std::string PromptText(const RenderedPrompt& p) {
  if (p.form != RenderedPrompt::Form::kSegments) return p.text;
  std::string text;
  for (const text::ChatSegment& seg : p.segments) text += seg.text;
  return text;
}

}  // namespace

ParsedGeneration TokenizePrompts(ParsedRequest parsed, const std::vector<RenderedPrompt>& prompts,
                                 const ServerContext& ctx) {
  ParsedGeneration out = std::move(parsed.generation);
  // A reasoning model thinks first, unless its template closed the thinking in the prompt
  // (Qwen 3 with enable_thinking false): then the output is all answer, constrained throughout.
  if (out.api == Api::kChat && ctx.options.reasoning_parser != text::ReasoningParser::kNone &&
      prompts.size() == 1) {
    if (text::PromptClosesThinking(PromptText(prompts.front()))) {
      out.reasoning = ParsedGeneration::Reasoning::kClosed;
    } else {
      out.reasoning = ParsedGeneration::Reasoning::kThinksFirst;
      parsed.common.constraint = AfterThinking(std::move(parsed.common.constraint));
    }
  }
  for (const RenderedPrompt& p : prompts) {
    GenerationInput in = parsed.common;
    in.prompt = TokenizePrompt(p, ctx);
    if (parsed.echo) {
      out.echo_texts.push_back(
          p.form == RenderedPrompt::Form::kTokenIds ? ctx.tokenizer->Decode(p.ids) : p.text);
    }
    out.inputs.push_back(std::move(in));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const Json& body, std::string_view raw_body,
                                                   const ServerContext& ctx) {
  absl::StatusOr<ChatPrompt> chat = ParseChatPrompt(body, raw_body, ctx);
  if (!chat.ok()) return chat.status();
  absl::StatusOr<RenderedPrompt> rendered = RenderChatPrompt(*chat, ctx);
  if (!rendered.ok()) return rendered.status();
  return TokenizePrompt(*rendered, ctx);
}

}  // namespace banyan::server::http
