// The machinery behind HttpFrontEnd (http_server.h): the Asio io_context and its threads, the
// listening socket, and one coroutine per connection that reads requests with Beast, hands them
// to Dispatch (endpoints.h) and writes the answers, waking on its generation job's streams.
// Internal to the HTTP front end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/thread_pool.hpp"
#include "server/http/http_server.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

class Connection;

struct HttpFrontEnd::Impl {
  Impl(ServerContext* ctx, HttpFrontEndOptions options);
  ~Impl();

  absl::Status Start();
  void Stop();
  int64_t jobs_in_flight() const;
  bool WaitJobs(std::chrono::steady_clock::time_point deadline);

  // Connection bookkeeping (any thread).
  void Register(const std::shared_ptr<Connection>& c);
  void Unregister(const std::shared_ptr<Connection>& c);
  void JobStarted();
  void JobEnded();

  ServerContext* ctx;
  HttpFrontEndOptions options;
  // Both are created by Start and destroyed by Stop, the io_context last: destroying it destroys
  // the suspended connection coroutines (and their jobs, which cancel their requests).
  std::unique_ptr<boost::asio::io_context> ioc;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  // Request workers (HttpFrontEndOptions::workers); created by Start, joined by Stop after the
  // I/O threads and before the io_context is destroyed.
  std::unique_ptr<boost::asio::thread_pool> workers;
  bool started = false;
  std::atomic<int> port{-1};
  std::atomic<bool> cutting{false};  // Stop: cut running answers, accept nothing

 private:
  void AcceptLoop();

  mutable absl::Mutex mu_;
  std::set<std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  int64_t jobs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace banyan::server::http
