// Probes answer whatever the load (server/http/http_server.h): /health and /ready are served on
// the I/O threads, so a pod whose request workers are all busy still passes its liveness and
// readiness probes instead of being restarted mid-stream.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "tests/server/http/http_test_util.h"

namespace banyan::server::http {
namespace {

using namespace http_test;

// Holds every request worker that enters the hook until Release.
class WorkerGate {
 public:
  void Enter() {
    absl::MutexLock lock(&mu_);
    ++inside_;
    mu_.Await(absl::Condition(&open_));
    --inside_;
  }
  bool WaitInside(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inside_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  absl::Mutex mu_;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(ProbeTest, HealthAndReadyAnswerWhileEveryWorkerIsBusy) {
  constexpr int kWorkers = 2;
  WorkerGate gate;
  HttpFrontEndOptions hopts;
  hopts.threads = 2;
  hopts.workers = kWorkers;
  hopts.on_worker = [&gate] { gate.Enter(); };
  Stack stack({}, {}, 1024, 16, nullptr, hopts);

  // Fill every worker (and queue one more request behind them): completions, a tokenize and a
  // metrics scrape, each on its own connection.
  std::vector<std::thread> clients;
  std::vector<int> statuses(kWorkers + 1, 0);
  for (int i = 0; i < kWorkers + 1; ++i) {
    clients.emplace_back([&, i] {
      Reply r = i == 1 ? Send(stack.port(), "GET", "/metrics", "")
                       : Post(stack.port(), "/v1/completions",
                              {{"prompt", kStoryPrompt}, {"max_tokens", 4}, {"temperature", 0}});
      statuses[i] = r.status;
    });
  }
  ASSERT_TRUE(gate.WaitInside(kWorkers, absl::Seconds(30))) << "the workers never got the requests";

  // Every worker is held: the probes are answered anyway, quickly, again and again.
  for (int round = 0; round < 5; ++round) {
    for (const char* path : {"/health", "/ready"}) {
      const auto start = std::chrono::steady_clock::now();
      Reply r = Send(stack.port(), "GET", path, "");
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      EXPECT_EQ(r.status, 200) << path << ": " << r.body;
      EXPECT_LT(ms, 2000) << path << " took " << ms << " ms with every worker busy";
    }
  }
  // Draining: /ready turns 503 at once, still without a worker.
  stack.ready = false;
  EXPECT_EQ(Send(stack.port(), "GET", "/ready", "").status, 503);
  stack.ready = true;

  // The held requests were only delayed: released, they complete.
  gate.Release();
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kWorkers + 1; ++i) EXPECT_EQ(statuses[i], 200) << "request " << i;
}

}  // namespace
}  // namespace banyan::server::http
