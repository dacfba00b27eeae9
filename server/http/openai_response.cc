#include "server/http/openai_response.h"

#include <cstdio>
#include <random>

#include "absl/strings/str_replace.h"
#include "server/common/tool_calling.h"
#include "server/common/validation.h"

namespace banyan::server::http {
namespace {

int64_t CountCodePoints(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

TokenRepr DescribeToken(const text::Tokenizer& tokenizer, int32_t id) {
  TokenRepr r;
  if (id < 0 || id >= tokenizer.vocab_size()) return r;
  const std::string bytes = tokenizer.TokenBytes(id);
  r.bytes.assign(bytes.begin(), bytes.end());
  if (IsValidUtf8(bytes)) {
    r.text = bytes;
    return r;
  }
  // Part of a character (a byte piece, or a byte-level piece that splits a character).
  r.text = "bytes:";
  for (const char c : bytes) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<uint8_t>(c));
    r.text += buf;
  }
  return r;
}

std::string_view FinishReasonString(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kNone:
      return "";
    case scheduler::FinishReason::kStop:
      return "stop";
    case scheduler::FinishReason::kLength:
      return "length";
    case scheduler::FinishReason::kCancelled:
      return "abort";
    case scheduler::FinishReason::kError:
      return "error";
  }
  return "";
}

Json UsageJson(const scheduler::Usage& u) {
  Json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
  if (u.draft_tokens > 0) {
    // Speculative candidates, in the fields OpenAI uses for predicted outputs.
    j["completion_tokens_details"] = {
        {"accepted_prediction_tokens", u.accepted_draft_tokens},
        {"rejected_prediction_tokens", u.draft_tokens - u.accepted_draft_tokens}};
  }
  return j;
}

ResponseBuilder::ResponseBuilder(const ParsedGeneration& parsed, std::string id, int64_t created,
                                 std::string model, const text::Tokenizer* tokenizer, int n)
    : api_(parsed.api),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      tokenizer_(tokenizer),
      logprobs_(parsed.logprobs),
      include_usage_(parsed.include_usage),
      echo_texts_(parsed.echo_texts),
      tool_family_(parsed.api == Api::kChat ? parsed.tool_family
                                            : text::tool_calls::ToolFamily::kNone),
      reasoning_field_(parsed.api == Api::kChat &&
                       parsed.reasoning != ParsedGeneration::Reasoning::kOff),
      reasoning_(parsed.api == Api::kChat &&
                 parsed.reasoning == ParsedGeneration::Reasoning::kThinksFirst),
      n_(n),
      choices_(parsed.inputs.size() * static_cast<size_t>(n)) {
  if (!echo_texts_.empty()) {
    for (size_t i = 0; i < choices_.size(); ++i) AppendText(&choices_[i], echo_texts_[i / n_]);
  }
  if (tool_family_ != text::tool_calls::ToolFamily::kNone) {
    for (Choice& c : choices_) c.tool_parser.emplace(tool_family_);
  }
  if (reasoning_) {
    for (Choice& c : choices_) c.reasoning.emplace();
  }
}

Json ResponseBuilder::MessageContent(const std::string& answer) const {
  return reasoning_ && answer.empty() ? Json(nullptr) : Json(answer);
}

std::string ResponseBuilder::ToolFinishReason(const std::string& reason, bool made_calls) const {
  return made_calls && reason == "stop" ? "tool_calls" : reason;
}

Json ResponseBuilder::ToolDelta(Choice* c, const std::string& text, bool finished) {
  text::tool_calls::ToolCallParser& p = *c->tool_parser;
  p.Feed(text);
  if (finished) p.Finish();
  Json delta = Json::object();
  if (p.content().size() > c->content_sent) {
    delta["content"] = p.content().substr(c->content_sent);
    c->content_sent = p.content().size();
  }
  Json calls = Json::array();
  for (size_t k = 0; k < p.calls().size(); ++k) {
    const text::tool_calls::ParsedToolCall& call = p.calls()[k];
    if (k >= c->call_ids.size()) {
      if (call.name.empty()) break;  // announced in order, once named
      c->call_ids.push_back(NewToolCallId());
      c->args_sent.push_back(0);
      calls.push_back({{"index", k},
                       {"id", c->call_ids[k]},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", ""}}}});
    }
    if (call.arguments.size() > c->args_sent[k]) {
      calls.push_back(
          {{"index", k}, {"function", {{"arguments", call.arguments.substr(c->args_sent[k])}}}});
      c->args_sent[k] = call.arguments.size();
    }
  }
  if (!calls.empty()) delta["tool_calls"] = std::move(calls);
  return delta;
}

void ResponseBuilder::AppendText(Choice* c, const std::string& text) {
  c->text += text;
  c->code_points += CountCodePoints(text);
}

Json ResponseBuilder::TokenEntry(int32_t id, float logprob) const {
  TokenRepr r = DescribeToken(*tokenizer_, id);
  return Json{{"token", r.text}, {"logprob", logprob}, {"bytes", r.bytes}};
}

Json ResponseBuilder::FoldLogprobs(Choice* c, const scheduler::TokenEvent& ev) {
  if (!logprobs_ || ev.token < 0) return nullptr;
  if (api_ == Api::kChat) {
    Json entry = TokenEntry(ev.token, ev.logprob);
    Json top = Json::array();
    for (const auto& [id, lp] : ev.top_logprobs) top.push_back(TokenEntry(id, lp));
    entry["top_logprobs"] = std::move(top);
    c->content.push_back(entry);
    return Json{{"content", Json::array({entry})}};
  }
  const std::string token = DescribeToken(*tokenizer_, ev.token).text;
  Json top = Json::object();
  for (const auto& [id, lp] : ev.top_logprobs) top[DescribeToken(*tokenizer_, id).text] = lp;
  c->tokens.push_back(token);
  c->token_logprobs.push_back(ev.logprob);
  c->top_logprobs.push_back(top);
  c->text_offset.push_back(c->code_points);
  return Json{{"tokens", {token}},
              {"token_logprobs", {ev.logprob}},
              {"top_logprobs", Json::array({top})},
              {"text_offset", {c->code_points}}};
}

void ResponseBuilder::Add(int choice, const scheduler::TokenEvent& ev) {
  Choice& c = choices_[choice];
  FoldLogprobs(&c, ev);
  AppendText(&c, ev.text);
  if (ev.finish != scheduler::FinishReason::kNone) {
    c.finish_reason = std::string(FinishReasonString(ev.finish));
  }
}

Json ResponseBuilder::Final(const scheduler::Usage& usage) const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json finish = c.finish_reason.empty() ? Json(nullptr) : Json(c.finish_reason);
    Json ch = {{"index", i}};
    // With a reasoning parser, the answer is the text after the thinking.
    text::ReasoningParts parts;
    if (reasoning_) parts = text::SplitReasoning(c.text);
    const std::string& answer = reasoning_ ? parts.content : c.text;
    if (api_ == Api::kChat && c.tool_parser.has_value()) {
      text::tool_calls::ToolCallParser parser(tool_family_);
      parser.Feed(answer);
      parser.Finish();
      Json calls = Json::array();
      for (const text::tool_calls::ParsedToolCall& call : parser.calls()) {
        calls.push_back({{"id", NewToolCallId()},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      const bool made_calls = !calls.empty();
      Json content = !made_calls                  ? MessageContent(answer)
                     : parser.content().empty() ? Json(nullptr)
                                                : Json(parser.content());
      ch["message"] = {{"role", "assistant"}, {"content", std::move(content)}};
      if (made_calls) ch["message"]["tool_calls"] = std::move(calls);
      ch["logprobs"] = logprobs_ ? Json{{"content", c.content}} : Json(nullptr);
      if (!c.finish_reason.empty()) finish = ToolFinishReason(c.finish_reason, made_calls);
    } else if (api_ == Api::kChat) {
      ch["message"] = {{"role", "assistant"}, {"content", MessageContent(answer)}};
      ch["logprobs"] = logprobs_ ? Json{{"content", c.content}} : Json(nullptr);
    } else {
      ch["text"] = c.text;
      ch["logprobs"] = logprobs_ ? Json{{"tokens", c.tokens},
                                        {"token_logprobs", c.token_logprobs},
                                        {"top_logprobs", c.top_logprobs},
                                        {"text_offset", c.text_offset}}
                                 : Json(nullptr);
    }
    if (reasoning_field_) {
      ch["message"]["reasoning_content"] =
          parts.reasoning.empty() ? Json(nullptr) : Json(parts.reasoning);
    }
    ch["finish_reason"] = finish;
    choices.push_back(std::move(ch));
  }
  return Json{{"id", id_},
              {"object", api_ == Api::kChat ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", std::move(choices)},
              {"usage", UsageJson(usage)}};
}

Json ResponseBuilder::ChunkEnvelope() const {
  Json j = {{"id", id_},
            {"object", api_ == Api::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_}};
  if (include_usage_) j["usage"] = nullptr;
  return j;
}

std::vector<Json> ResponseBuilder::StartChunks() {
  std::vector<Json> out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Json ch = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (api_ == Api::kChat) {
      ch["delta"] = {{"role", "assistant"}, {"content", ""}};
    } else if (!echo_texts_.empty()) {
      ch["text"] = choices_[i].text;  // the echoed prompt, already folded in
    } else {
      continue;
    }
    Json j = ChunkEnvelope();
    j["choices"] = Json::array({std::move(ch)});
    out.push_back(std::move(j));
  }
  return out;
}

Json ResponseBuilder::Chunk(int choice, const scheduler::TokenEvent& ev) {
  Choice& c = choices_[choice];
  Json logprobs = FoldLogprobs(&c, ev);
  AppendText(&c, ev.text);
  const bool finished = ev.finish != scheduler::FinishReason::kNone;
  if (finished) c.finish_reason = std::string(FinishReasonString(ev.finish));
  if (api_ != Api::kChat) {
    if (ev.text.empty() && logprobs.is_null() && !finished) return nullptr;
    Json ch = {{"index", choice},
               {"text", ev.text},
               {"logprobs", std::move(logprobs)},
               {"finish_reason", finished ? Json(c.finish_reason) : Json(nullptr)}};
    Json j = ChunkEnvelope();
    j["choices"] = Json::array({std::move(ch)});
    return j;
  }
  // Chat: the thinking first (with a reasoning parser), then the answer, read for calls.
  text::ReasoningParts parts;
  if (c.reasoning.has_value()) {
    parts = c.reasoning->Feed(ev.text);
    if (finished) {
      text::ReasoningParts rest = c.reasoning->Finish();
      parts.reasoning += rest.reasoning;
      parts.content += rest.content;
    }
  } else {
    parts.content = ev.text;
  }
  Json delta = Json::object();
  if (c.tool_parser.has_value()) {
    delta = ToolDelta(&c, parts.content, finished);
    if (finished) c.finish_reason = ToolFinishReason(c.finish_reason, !c.call_ids.empty());
  } else if (!parts.content.empty()) {
    delta["content"] = parts.content;
  }
  if (!parts.reasoning.empty()) delta["reasoning_content"] = parts.reasoning;
  if (delta.empty() && logprobs.is_null() && !finished) return nullptr;
  Json ch = {{"index", choice},
             {"delta", std::move(delta)},
             {"logprobs", std::move(logprobs)},
             {"finish_reason", finished ? Json(c.finish_reason) : Json(nullptr)}};
  Json j = ChunkEnvelope();
  j["choices"] = Json::array({std::move(ch)});
  return j;
}

Json ResponseBuilder::UsageChunk(const scheduler::Usage& usage) const {
  Json j = ChunkEnvelope();
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usage);
  return j;
}

}  // namespace banyan::server::http
