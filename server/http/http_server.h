// HttpFrontEnd: the OpenAI-compatible HTTP API of banyand (cpp-httplib), a thin translation
// layer over the scheduler.
//
// Endpoints:
//   POST /v1/completions, POST /v1/chat/completions   generation (generation.h), SSE streaming
//   GET  /v1/models, GET /v1/models/{id}              the one served model
//   POST /tokenize   {prompt | messages, add_special_tokens, add_generation_prompt, model}
//                    -> {tokens, count, max_model_len}
//   POST /detokenize {tokens, model} -> {prompt}
//   GET  /health     200 while the process runs
//   GET  /ready      200 when *ctx->ready, else 503 (loading or draining)
//   GET  /metrics    Prometheus text 0.0.4 (server/metrics_text.h, docs/metrics.md)
//
// Auth: with ctx->options.api_keys non-empty, every endpoint except /health and /ready (which
// orchestrators probe without credentials) needs "Authorization: Bearer <key>"; otherwise 401
// with code "invalid_api_key". /metrics is protected too: Prometheus sends a bearer token with
// `authorization: {credentials: ...}` in its scrape config.
//
// Errors are always OpenAI JSON {"error":{"message","type","param","code"}}: unknown path 404,
// known path with the wrong method 405 (with an Allow header), body over
// ctx->options.max_body_bytes 413, and the mapping in openai_json.h for everything else.
//
// Every request gets an id (cmpl-/chatcmpl- for generation, req- otherwise), returned in the
// X-Request-Id header, and one info line in the "http" log when it completes.
//
// Threads: httplib serves each connection on a pool thread; a streaming response holds its
// thread until it ends, so `threads` bounds the number of concurrent streams.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "server/server_context.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace banyan::server::http {

struct HttpFrontEndOptions {
  int threads = 64;  // connection-serving threads
};

class HttpFrontEnd {
 public:
  // `ctx` (and what it points to) must outlive the front end.
  explicit HttpFrontEnd(ServerContext* ctx, HttpFrontEndOptions options = {});
  ~HttpFrontEnd();  // Stop()
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  // Binds ctx->options.host:http_port (0: a free port) and serves on its own threads.
  // Returns once the socket listens; Unavailable when it can not bind.
  absl::Status Start();
  // The bound port; -1 before Start.
  int port() const { return port_; }
  // Stops accepting, ends open streams and cuts running non-streaming requests (cancelling
  // them in the scheduler), then joins the threads. Idempotent. For a graceful drain, set
  // *ctx->ready false and Drain the scheduler first.
  void Stop();

 private:
  void RegisterRoutes();

  ServerContext* ctx_;
  HttpFrontEndOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  int port_ = -1;
};

}  // namespace banyan::server::http
