#include "text/reasoning.h"

#include <algorithm>

namespace banyan::text {
namespace {

constexpr std::string_view kSpace = " \t\r\n";

// The length of the longest suffix of `text` that is a proper prefix of `marker`: the bytes that
// may still become the marker.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::optional<ReasoningParser> ReasoningParserFromName(std::string_view name) {
  if (name == "qwen3") return ReasoningParser::kQwen3;
  if (name == "deepseek_r1") return ReasoningParser::kDeepSeekR1;
  return std::nullopt;
}

std::string_view ReasoningParserNames() { return "qwen3, deepseek_r1"; }

ReasoningParts ReasoningSplitter::Feed(std::string_view piece) {
  ReasoningParts out;
  held_.append(piece);
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const size_t text_at = held_.find_first_not_of(kSpace);
        if (text_at == std::string::npos) return out;  // only whitespace so far
        const std::string_view rest = std::string_view(held_).substr(text_at);
        if (rest.starts_with(kThinkStart)) {
          held_.erase(0, text_at + kThinkStart.size());
        } else if (kThinkStart.starts_with(rest)) {
          return out;  // "<thi": the marker may still come
        }
        // No opening marker: the output started inside the thinking (the whitespace is its).
        state_ = State::kReasoning;
        continue;
      }
      case State::kReasoning: {
        const size_t end_at = held_.find(kThinkEnd);
        if (end_at != std::string::npos) {
          out.reasoning.append(held_, 0, end_at);
          out.content.append(held_, end_at + kThinkEnd.size());
          held_.clear();
          state_ = State::kContent;
          return out;
        }
        const size_t keep = PartialMarkerSuffix(held_, kThinkEnd);
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kContent:
        out.content.append(held_);
        held_.clear();
        return out;
    }
  }
}

ReasoningParts ReasoningSplitter::Finish() {
  ReasoningParts out;
  if (state_ == State::kContent) {
    out.content = std::move(held_);
  } else {
    out.reasoning = std::move(held_);
  }
  held_.clear();
  return out;
}

ReasoningParts SplitReasoning(std::string_view text) {
  ReasoningSplitter splitter;
  ReasoningParts out = splitter.Feed(text);
  ReasoningParts rest = splitter.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

bool PromptClosesThinking(std::string_view prompt) {
  const size_t end_at = prompt.rfind(kThinkEnd);
  if (end_at == std::string_view::npos) return false;
  const size_t start_at = prompt.rfind(kThinkStart);
  if (start_at != std::string_view::npos && start_at > end_at) return false;
  return prompt.find_first_not_of(kSpace, end_at + kThinkEnd.size()) == std::string_view::npos;
}

}  // namespace banyan::text
