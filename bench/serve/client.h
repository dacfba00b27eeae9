// The HTTP/1.1 client side of the bench: Asio coroutines over Boost.Beast, all on one io_context
// thread. Every request opens its own connection and closes it at the end (no keep-alive reuse),
// so the number of requests in flight is the number of open sockets.
//
// GCC 12 can destroy temporaries inside a co_await expression twice: every awaited call here
// takes named locals as arguments, never temporaries with destructors.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "bench/serve/stats.h"
#include "bench/serve/workload.h"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"

namespace banyan::bench::serve {

using Clock = std::chrono::steady_clock;

struct Target {
  boost::asio::ip::tcp::endpoint endpoint;
  std::string host_header;  // "host:port"
  std::string api_key;      // empty: no Authorization header
  std::string model;        // empty: the request names none
  double timeout_s = 0;     // per request, whole exchange; 0: none
};

// Resolves host:port (numeric addresses or names). Returns an empty string on success.
std::string ResolveTarget(const std::string& host, int port, Target* out);

struct HttpReply {
  int status = 0;        // 0: no answer (see error)
  std::string body;
  std::string error;     // transport failure
  double latency_s = 0;  // connect + send + whole answer
};

// One request on a fresh connection, the whole answer read. `body` empty: no body.
boost::asio::awaitable<HttpReply> SimpleRequest(const Target& t, std::string method,
                                                std::string path, std::string body);

// The JSON body of one streaming completions request for `spec`.
std::string CompletionBody(const Target& t, const Options& o, const RequestSpec& spec,
                           bool stream);

// A barrier of the streams of one run (--connect-first): each stream, once its connection is
// made (or failed), waits here until every one of `expected` has arrived.
class ConnectGate {
 public:
  ConnectGate(const boost::asio::any_io_executor& ex, size_t expected);
  boost::asio::awaitable<void> Arrive();

 private:
  boost::asio::steady_timer open_;  // never expires: cancelled when the last stream arrives
  size_t expected_, arrived_ = 0;
};

// Sends `body` (from CompletionBody, stream true) and follows the SSE answer, filling *r as
// events arrive (r->text_events grows live; r->done is set last). `t0` is the run's start.
// With a gate, the request is sent only once every stream of the gate is connected.
boost::asio::awaitable<void> RunStreaming(const Target& t, const std::string& body,
                                          Clock::time_point t0, RequestResult* r,
                                          ConnectGate* gate = nullptr);

}  // namespace banyan::bench::serve
