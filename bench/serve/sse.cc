#include "bench/serve/sse.h"

namespace banyan::bench::serve {

void SseReader::Feed(std::string_view bytes, std::vector<std::string>* events) {
  for (char c : bytes) {
    if (c == '\n' && last_cr_) {
      last_cr_ = false;
      continue;
    }
    last_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      EndLine(events);
    } else {
      line_.push_back(c);
    }
  }
}

void SseReader::EndLine(std::vector<std::string>* events) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  std::string_view l = line_;
  if (l.substr(0, 5) == "data:") {
    l.remove_prefix(5);
    if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
    if (has_data_) data_.push_back('\n');
    data_.append(l);
    has_data_ = true;
  }
  line_.clear();
}

}  // namespace banyan::bench::serve
