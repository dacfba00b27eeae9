// Splits a Server-Sent Events byte stream into events. Bytes arrive in arbitrary pieces (an event
// may straddle reads, one read may hold many events); Feed returns the `data` of each event that
// the bytes so far complete. Multiple data lines of one event are joined with '\n' (the SSE
// rule); comment lines (": keep-alive") and other fields are skipped; "\r\n" ends lines too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace banyan::bench::serve {

class SseReader {
 public:
  // Appends the data of each completed event to *events (events without data lines are dropped).
  void Feed(std::string_view bytes, std::vector<std::string>* events);

  // Bytes received that do not yet form a complete line.
  size_t pending_bytes() const { return line_.size(); }

 private:
  void EndLine(std::vector<std::string>* events);

  std::string line_;   // the current, unfinished line
  std::string data_;   // the data lines of the current event so far
  bool has_data_ = false;
  bool last_cr_ = false;  // the previous byte was '\r' (a following '\n' belongs to it)
};

}  // namespace banyan::bench::serve
