// POST /v1/completions and /v1/chat/completions. StartGeneration takes a request through its
// stages in one direction, each with its own output type:
//   1. parse     body -> ParsedRequest: every field decoded and checked on its own, the prompts
//                as sent (openai_request.h)
//   2. render    -> RenderedPrompt per prompt: chat messages through the chat template (prompt.h)
//   3. tokenize  -> ParsedGeneration: one GenerationInput (token ids) per prompt (prompt.h)
//   4. validate  -> scheduler::Request per prompt, checked against the model's limits
//                (server/common/validation.h; the context length needs the token count)
//   5. submit    to the scheduler
// Then a GenerationJob turns the scheduler's token events into the answer, driven by the
// connection that owns it (http_connection.h) without a thread of its own.
//
// Streaming: each event is "data: {json}\n\n", the last one "data: [DONE]\n\n". A request that
// fails after streaming began ends with one "data: {"error": {...}}" event and then [DONE], as
// vLLM does; so does a stream the server cuts (drain timeout, shutdown). When the client goes
// away the connection calls Cancel, and the scheduler frees the request's KV before its next
// iteration.
//
// Non-streaming requests are answered when every sample has finished; a cut request is answered
// with what it has, finish_reason "abort".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/request_stream.h"
#include "server/common/auth.h"
#include "server/http/http_log.h"
#include "server/http/http_types.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

// The scheduler streams of one HTTP request, one per prompt, read as one: choice index
// prompt * n + sample.
class StreamGroup {
 public:
  explicit StreamGroup(int n) : n_(n) {}
  void Add(std::shared_ptr<scheduler::RequestStream> stream);

  // Sets (or, with an empty function, removes) the listener of every stream.
  void SetListener(const std::function<void()>& listener);
  // Appends the (choice, event) pairs ready now, without waiting. Returns false once every
  // stream has finished and every event has been returned.
  bool Poll(std::vector<std::pair<int, scheduler::TokenEvent>>* out);
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
    bool done = false;  // Poll saw its end
  };
  int n_;
  std::vector<Entry> entries_;
};

// One accepted generation request. Not thread-safe: one connection drives it, except that the
// waker set by SetWaker runs on the engine thread.
class GenerationJob {
 public:
  GenerationJob(int n, ResponseBuilder builder, std::shared_ptr<AccessRecord> record,
                bool stream, bool include_usage);
  ~GenerationJob();  // cancels what still runs and writes the access-log line

  bool streaming() const { return stream_; }
  void Add(std::shared_ptr<scheduler::RequestStream> s, int64_t prompt_tokens);
  // The tenant's slot this request holds until its answer is complete.
  void Hold(TenantSlot slot) { slot_ = std::move(slot); }
  // `wake` is called from the engine thread whenever new output may be ready.
  void SetWaker(std::function<void()> wake);

  // Streaming: appends the SSE bytes ready now to *out. Returns true once the stream is complete
  // (the bytes end with "data: [DONE]").
  bool PumpStream(std::string* out);
  // Non-streaming: folds the events ready now. Returns true, with the answer in *res, once
  // every sample has finished.
  bool PumpWhole(HttpResponse* res);

  // The client went away: cancel, note it in the access log.
  void ClientGone();
  // The server cuts the request (drain timeout, shutdown): cancel; a stream then ends with an
  // error event saying so before [DONE], a whole answer carries finish_reason "abort".
  void Cut(std::string_view why);
  // Every byte of the answer reached the socket.
  void Delivered() { delivered_ = true; }

 private:
  StreamGroup group_;
  ResponseBuilder builder_;
  std::shared_ptr<AccessRecord> record_;
  bool stream_;
  bool include_usage_;
  int64_t prompt_tokens_ = 0;  // over all prompts
  int64_t tokens_seen_ = 0;    // generated tokens read so far
  bool started_ = false;
  bool complete_ = false;
  bool delivered_ = false;
  std::string cut_;  // why the server cut the request; "" when it did not
  TenantSlot slot_;
};

// Takes one generation request (`api` says which endpoint) through the stages above. Returns the
// job that produces the answer, or nullptr with the error response in *res. Fills `record` for the
// access log; a job owns the record and logs it when it ends.
// `tenant` is the authenticated caller: its name is the prefix-cache namespace and the request
// holds one of its slots (max_concurrent_requests) until its answer is complete.
std::shared_ptr<GenerationJob> StartGeneration(ServerContext* ctx, Api api, const Tenant& tenant,
                                               const HttpRequest& req, HttpResponse* res,
                                               std::shared_ptr<AccessRecord> record);

}  // namespace banyan::server::http
