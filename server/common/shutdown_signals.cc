#include "server/common/shutdown_signals.h"

#include <pthread.h>
#include <unistd.h>

#include "spdlog/spdlog.h"

namespace banyan::server {

ShutdownSignals::ShutdownSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread([this] { Loop(); });
}

ShutdownSignals::~ShutdownSignals() {
  {
    absl::MutexLock l(&mu_);
    phase_ = Phase::kStopping;
  }
  // Wakes the sigwait; the thread sees kStopping and returns. (An outside signal that comes
  // first does the same.)
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

void ShutdownSignals::Serving() {
  absl::MutexLock l(&mu_);
  if (phase_ == Phase::kStarting) phase_ = Phase::kServing;
}

int ShutdownSignals::WaitForDrain() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](Phase* p) { return *p == Phase::kDraining || *p == Phase::kStopping; }, &phase_));
  return drain_signal_;
}

void ShutdownSignals::Loop() {
  for (;;) {
    int sig = 0;
    if (sigwait(&set_, &sig) != 0) continue;
    absl::MutexLock l(&mu_);
    switch (phase_) {
      case Phase::kStarting:
        // Nothing accepted yet: no drain to run, no destructor worth waiting for.
        spdlog::info("signal {} during start-up: exiting (status 0) without serving", sig);
        spdlog::default_logger()->flush();
        _exit(0);
      case Phase::kServing:
        phase_ = Phase::kDraining;
        drain_signal_ = sig;
        break;
      case Phase::kDraining:
        spdlog::warn(
            "signal {} while draining: ignored; the drain goes on until the running requests end "
            "or drain_timeout_ms cuts them (SIGKILL stops at once)",
            sig);
        break;
      case Phase::kStopping:
        return;
    }
  }
}

}  // namespace banyan::server
