// ShutdownSignals: how banyand takes SIGTERM and SIGINT.
//
// Contract:
//   - The two signals are blocked in every thread of the process for its whole life. banyand
//     blocks them in an ELF .preinit_array function (server/main.cc), which runs before any
//     shared library's constructor, so the threads libraries start early (OpenBLAS starts its
//     workers in a constructor) inherit the mask too. Without that, the kernel delivers a
//     SIGTERM that the waiting thread is not ready for to a thread that leaves it unblocked, and
//     its default action kills the process (status -15).
//   - One thread, started here, takes them with sigwait; no work runs in a signal handler.
//   - During start-up (model loading, KV allocation, binding the ports: until Serving()) a
//     signal ends the process at once with exit status 0: nothing has been accepted yet, so
//     there is nothing to drain, and a large model need not finish loading first.
//   - The first signal after Serving() starts the drain: WaitForDrain() returns it.
//   - Every later signal, SIGINT or SIGTERM, is logged and ignored: the drain goes on until
//     the running requests end or drain_timeout_ms cuts them. (To stop at once, send SIGKILL.)
//   - What remains: a signal that comes while the dynamic loader is still mapping libraries,
//     before .preinit_array runs (the first few tens of milliseconds after exec), has its
//     default action. A supervisor that must close that window starts banyand with SIGTERM and
//     SIGINT blocked: the mask is inherited across exec, and nothing here unblocks them.
#pragma once

#include <signal.h>

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace banyan::server {

class ShutdownSignals {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread (again, for processes that have no
  // .preinit_array hook, such as tests) and starts the waiting thread.
  ShutdownSignals();
  ~ShutdownSignals();  // stops the waiting thread
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Start-up is over: from now on the first signal starts a drain.
  void Serving();
  // Blocks until the first signal after Serving(); returns its number.
  int WaitForDrain();

 private:
  enum class Phase { kStarting, kServing, kDraining, kStopping };
  void Loop();

  sigset_t set_;
  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kStarting;
  int drain_signal_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace banyan::server
