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
    prefetch_.clear();
    grammars_.clear();
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

void MaskWorkers::Prefetch(std::shared_ptr<text::grammar::TokenMasker> masker, size_t limit) {
  absl::MutexLock lock(&mu_);
  grammars_.emplace_back(std::move(masker), limit);
  ++prefetches_;
  work_cv_.Signal();
}

MaskWorkers::Stats MaskWorkers::stats() const {
  absl::MutexLock lock(&mu_);
  return {.walks = walks_, .prefetch_walks = prefetch_walks_, .prefetches = prefetches_};
}

void MaskWorkers::WaitIdle() {
  absl::MutexLock lock(&mu_);
  while (!queue_.empty() || !prefetch_.empty() || !grammars_.empty() || busy_ > 0) {
    done_cv_.Wait(&mu_);
  }
}

bool MaskWorkers::NextJob(Job* job, bool* ahead) {
  for (;;) {
    while (queue_.empty() && prefetch_.empty() && grammars_.empty() && !stop_) {
      work_cv_.Wait(&mu_);
    }
    if (stop_) return false;
    if (!queue_.empty()) {  // asked for: first
      *job = std::move(queue_.front());
      queue_.pop_front();
      *ahead = false;
      return true;
    }
    if (!grammars_.empty()) {  // a grammar to prefetch: list its positions, off the lock
      auto [masker, limit] = std::move(grammars_.front());
      grammars_.pop_front();
      ++busy_;
      mu_.Unlock();
      const auto positions = masker->PrefetchOrder(limit);
      mu_.Lock();
      --busy_;
      for (const auto& [rule, state] : positions) prefetch_.push_back({masker, rule, state});
      done_cv_.SignalAll();
      continue;
    }
    *job = std::move(prefetch_.front());
    prefetch_.pop_front();
    // Ahead of need only into three quarters of the caches (never evict what samples use), and
    // not what was asked for meanwhile (queued or being classified: that job does it).
    const bool room = job->masker->classified() < job->masker->max_cached() / 4 * 3 &&
                      job->masker->long_classified() < job->masker->max_long_cached() / 4 * 3;
    if (!room || !pending_.insert(KeyOf(job->masker.get(), job->rule, job->state)).second) {
      done_cv_.SignalAll();  // WaitIdle may be waiting for prefetch_ to empty
      continue;
    }
    *ahead = true;
    return true;
  }
}

void MaskWorkers::Run() {
  for (;;) {
    Job job;
    bool ahead = false;
    {
      absl::MutexLock lock(&mu_);
      if (!NextJob(&job, &ahead)) return;
      ++busy_;
    }
    const bool walked = job.masker->Prepare(job.rule, job.state);
    absl::MutexLock lock(&mu_);
    pending_.erase(KeyOf(job.masker.get(), job.rule, job.state));
    --busy_;
    walks_ += walked;
    prefetch_walks_ += walked && ahead;
    done_cv_.SignalAll();
  }
}

}  // namespace banyan::scheduler
