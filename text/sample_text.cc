#include "text/sample_text.h"

#include <algorithm>

namespace banyan::text {

SampleText::SampleText(const text::Tokenizer& tokenizer, std::vector<std::string> stop,
                       std::span<const int32_t> context)
    : detok_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (int32_t id : context) detok_.Push(id);
  detok_.Flush();  // an incomplete byte sequence at the prompt's end is not continued
}

std::string SampleText::Push(int32_t token, bool* stopped, bool match_stops) {
  *stopped = false;
  if (stopped_) return "";
  held_ += detok_.Push(token);
  // Earliest complete stop string.
  size_t cut = std::string::npos;
  if (match_stops) {
    for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    *stopped = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string SampleText::Finish() {
  if (stopped_) return "";
  held_ += detok_.Flush();
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  std::string out = held_.substr(0, cut);
  held_.clear();
  stopped_ = true;
  return out;
}

}  // namespace banyan::text
