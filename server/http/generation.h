// POST /v1/completions and /v1/chat/completions: parse, validate, submit to the scheduler, then
// either wait for the whole answer or stream it as server-sent events.
//
// Streaming: each event is "data: {json}\n\n", the last one "data: [DONE]\n\n"; while nothing
// happens for kKeepAliveInterval an SSE comment line keeps proxies from timing out. When a write
// fails (the client went away) or the response is torn down before the stream ends (the client
// never read it, or the server stops), every unfinished scheduler stream is cancelled, so the
// scheduler frees its KV before its next iteration. A request that fails after streaming began
// ends with one "data: {"error": {...}}" event and then [DONE], as vLLM does.
//
// Non-streaming requests are answered when every sample has finished. httplib 0.11 offers no way
// to notice a disconnected client while a handler waits, so such a request runs to its end
// (bounded by max_tokens) even if nobody reads the answer.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "httplib.h"
#include "scheduler/request_stream.h"
#include "server/http/http_log.h"
#include "server/http/openai_request.h"
#include "server/server_context.h"

namespace banyan::server::http {

inline constexpr std::chrono::seconds kKeepAliveInterval{10};

// The scheduler streams of one HTTP request, one per prompt, read as one: choice index
// prompt * n + sample.
class StreamGroup {
 public:
  explicit StreamGroup(int n) : n_(n) {}
  void Add(std::shared_ptr<scheduler::RequestStream> stream);

  // Appends (choice, event) pairs, waiting up to `timeout` when none are ready. Returns false
  // once every stream has finished and every event has been returned.
  bool Read(std::vector<std::pair<int, scheduler::TokenEvent>>* out,
            std::chrono::milliseconds timeout);
  // Cancels every stream not yet finished. Safe to call more than once.
  void CancelUnfinished();
  bool all_done() const;
  // The first failure among the finished streams; OK when none failed.
  absl::Status status() const;
  // Summed over the streams (meaningful for finished ones).
  scheduler::Usage usage() const;

 private:
  struct Entry {
    std::shared_ptr<scheduler::RequestStream> stream;
    bool done = false;  // Read returned false
  };
  int n_;
  std::vector<Entry> entries_;
};

// Handles one generation request (`api` says which endpoint) and fills `record` for the access
// log; for a stream it sets record->deferred and logs when the stream ends. When `*stopping`
// becomes true a non-streaming request still running is cancelled and answered with what it
// has (finish_reason "abort"); streams end through httplib's shutdown.
void HandleGeneration(ServerContext* ctx, Api api, const httplib::Request& req,
                      httplib::Response& res, std::shared_ptr<AccessRecord> record,
                      const std::atomic<bool>* stopping = nullptr);

}  // namespace banyan::server::http
