// HttpFrontEnd: the OpenAI-compatible HTTP API of banyand (endpoints.h), served by an
// event-driven HTTP/1.1 server (Boost.Beast over Asio) with a small fixed pool of threads.
//
// Connections cost no thread: each is a coroutine on its own strand. A generation request's
// connection sleeps on a timer that the scheduler's streams cancel when they push a token
// (RequestStream::SetListener), so output is written as soon as it exists, with no polling.
//
// HTTP behaviour:
//  - keep-alive and pipelining: requests on one connection are answered in order;
//  - limits: request head 16 KiB (431), body ctx->options.max_body_bytes before and after
//    Content-Encoding gzip/deflate (413), other encodings 415;
//  - malformed framing (a bad chunk size, a body cut short by the client's half-close) is a 400;
//  - after any refusal the connection answers with "Connection: close", shuts down its sending
//    side and reads and discards the rest of the request (bounded in bytes and by
//    `body_timeout`) before closing, so a client that writes its whole body before reading
//    still reads the answer rather than a reset;
//  - timeouts: a request head must arrive within `head_timeout` (also the keep-alive idle
//    limit), its body within `body_timeout`, each as a whole however slowly the bytes trickle
//    in; the connection is then closed without an answer. A response write that makes no
//    progress for `write_timeout` ends the connection (and cancels its request);
//  - every refusal is counted in ctx->rejections (server/common/rejections.h);
//  - "Expect: 100-continue" is answered; HEAD is served for the GET endpoints;
//  - the listening socket is exclusive (SO_REUSEADDR only, never SO_REUSEPORT): a second daemon
//    on the same port fails to start instead of splitting the traffic.
//
// Probes: GET/HEAD /health and /ready are answered on the I/O threads from an atomic flag,
// without a worker and without the engine; every other request is handed to the request
// workers. The I/O threads only read, write and route, so a pod whose workers are all busy
// (large prompts being tokenized, gzip bodies being inflated, a slow /metrics) still answers
// its probes at once, and Kubernetes does not restart it mid-stream.
//
// Draining: while *ctx->ready is false, every response closes its connection. WaitDelivered
// waits until every accepted generation answer has been written to its socket; Stop cuts what
// is left: a stream gets a final error event and [DONE], a whole answer finish_reason "abort".
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

struct HttpFrontEndOptions {
  int threads = 0;  // I/O threads; 0: between 2 and 4 by the machine's cores
  // Request workers: decoding bodies, parsing, tokenizing, submitting and /metrics run on
  // these, never on the I/O threads; 0: as many as I/O threads.
  int workers = 0;
  // Tests only: runs on a worker before each request it handles (to hold every worker busy).
  std::function<void()> on_worker;
  std::chrono::milliseconds head_timeout{60000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds write_timeout{60000};
  std::chrono::milliseconds keep_alive_interval{10000};  // SSE comment when nothing happens
  std::chrono::milliseconds stop_write_timeout{2000};    // writing the last event while stopping
};

class HttpFrontEnd {
 public:
  // `ctx` (and what it points to) must outlive the front end.
  explicit HttpFrontEnd(ServerContext* ctx, HttpFrontEndOptions options = {});
  ~HttpFrontEnd();  // Stop()
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  // Binds ctx->options.host:http_port (0: a free port), listens with
  // ctx->options.listen_backlog, and serves on its own threads. Unavailable when it can not bind.
  absl::Status Start();
  // The bound port; -1 before Start.
  int port() const;

  // Generation answers accepted and not yet completely written.
  int64_t responses_in_flight() const;
  // Waits until responses_in_flight() is 0 or `deadline` passes; true when it reached 0.
  bool WaitDelivered(std::chrono::steady_clock::time_point deadline);

  // Stops accepting, cuts the answers still running (see above), closes every connection and
  // joins the threads. Idempotent. For a graceful drain, set *ctx->ready false, drain the
  // scheduler and WaitDelivered first.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace banyan::server::http
