#include "scheduler/fork_join.h"

namespace banyan::scheduler {

ForkJoin::ForkJoin(int threads) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Work(); });
}

ForkJoin::~ForkJoin() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    start_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void ForkJoin::Take() {
  for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i);
}

void ForkJoin::Work() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && generation_ == seen) start_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
    }
    Take();
    absl::MutexLock lock(&mu_);
    if (--busy_ == 0) done_.Signal();
  }
}

void ForkJoin::Run(size_t n, absl::FunctionRef<void(size_t)> fn) {
  if (threads_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  n_ = n;
  next_.store(0);
  {
    absl::MutexLock lock(&mu_);
    busy_ = static_cast<int>(threads_.size());
    ++generation_;
    start_.SignalAll();
  }
  Take();
  absl::MutexLock lock(&mu_);
  while (busy_ > 0) done_.Wait(&mu_);
  fn_ = nullptr;
}

}  // namespace banyan::scheduler
