#include "scheduler/mask_workers.h"

#include <algorithm>

namespace banyan::scheduler {

MaskWorkers::MaskWorkers(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

MaskWorkers::~MaskWorkers() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
    work_cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

bool MaskWorkers::Request(const std::shared_ptr<text::grammar::TokenMasker>& masker,
                          const text::grammar::Matcher& matcher) {
  if (masker->Ready(matcher)) return true;
  absl::MutexLock lock(&mu_);
  for (const text::grammar::Top& top : matcher.tops()) {
    // Classified positions are queued too (Ready does not say which): the worker finds them
    // cached at once.
    if (!pending_.insert(KeyOf(masker.get(), top.rule, top.state)).second) continue;
    queue_.push_back({masker, top.rule, top.state});
    work_cv_.Signal();
  }
  return false;
}

void MaskWorkers::Wait(const std::shared_ptr<text::grammar::TokenMasker>& masker,
                       const text::grammar::Matcher& matcher) {
  if (Request(masker, matcher)) return;
  absl::MutexLock lock(&mu_);
  auto queued = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const text::grammar::Top& top : matcher.tops()) {
      if (pending_.contains(KeyOf(masker.get(), top.rule, top.state))) return true;
    }
    return false;
  };
  // What is not pending was classified: Request queued every position that was not.
  while (queued()) done_cv_.Wait(&mu_);
}

int64_t MaskWorkers::classified() const {
  absl::MutexLock lock(&mu_);
  return classified_;
}

void MaskWorkers::Run() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) work_cv_.Wait(&mu_);
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.masker->Prepare(job.rule, job.state);
    absl::MutexLock lock(&mu_);
    pending_.erase(KeyOf(job.masker.get(), job.rule, job.state));
    ++classified_;
    done_cv_.SignalAll();
  }
}

}  // namespace banyan::scheduler
