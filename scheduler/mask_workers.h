// MaskWorkers: the threads that classify grammar positions for the engine loop, so that the
// engine thread never walks a vocabulary.
//
// A constrained sample's mask is a copy of cached bits once every position (rule, state) of its
// matcher is classified (text/grammar/token_mask.h); classifying one walks the whole vocabulary,
// milliseconds on a 128K vocabulary, which would stall every other request's step. The loop
// asks Request for a sample whose next mask is not cached and lets that sample sit out the step
// (no row, no token: its sampling state does not move, so its tokens stay those it would have
// drawn); the workers classify meanwhile, into the masker's own cache, where the next step finds
// it. Wait is for a step that would otherwise run nothing at all.
//
// Prefetch queues a whole grammar behind every Request: when the workers have nothing asked of
// them, they classify its positions, each class's nearest first (TokenMasker::PrefetchOrder),
// so that a schema in steady use stops costing sit-outs and waits.
//
// Thread-safe. Each position is queued once while it is queued or being classified. The workers
// keep the maskers they work on alive; queued work is dropped at destruction.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_mask.h"

namespace banyan::scheduler {

class MaskWorkers {
 public:
  explicit MaskWorkers(int threads);
  ~MaskWorkers();
  MaskWorkers(const MaskWorkers&) = delete;
  MaskWorkers& operator=(const MaskWorkers&) = delete;

  // Queues the positions of matcher.tops() that `masker` has not classified. Returns whether
  // there were none (the mask can be filled now without a walk).
  bool Request(const std::shared_ptr<text::grammar::TokenMasker>& masker,
               const text::grammar::Matcher& matcher);
  // Blocks until every position of matcher.tops() is classified (queuing what is missing).
  void Wait(const std::shared_ptr<text::grammar::TokenMasker>& masker,
            const text::grammar::Matcher& matcher);

  // Classifies up to `limit` positions of masker's grammar ahead of need, after any Request.
  void Prefetch(std::shared_ptr<text::grammar::TokenMasker> masker, size_t limit);

  // Blocks until nothing is queued, being classified or waiting to be prefetched.
  void WaitIdle();

  struct Stats {
    int64_t walks = 0;           // vocabulary walks the workers ran, asked for or ahead
    int64_t prefetch_walks = 0;  // of them, ahead of need
    int64_t prefetches = 0;      // Prefetch calls (grammars)
  };
  Stats stats() const;

 private:
  struct Job {
    std::shared_ptr<text::grammar::TokenMasker> masker;
    int32_t rule;
    int32_t state;
  };
  using Key = std::pair<const text::grammar::TokenMasker*, int64_t>;
  static Key KeyOf(const text::grammar::TokenMasker* masker, int32_t rule, int32_t state) {
    return {masker, (static_cast<int64_t>(rule) << 32) | static_cast<uint32_t>(state)};
  }
  void Run();
  // The next job (with mu_ held): one asked for, else one ahead of need (*ahead); false at stop.
  bool NextJob(Job* job, bool* ahead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // a job was queued, or stop_
  absl::CondVar done_cv_;  // a job finished
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);     // asked for: first
  std::deque<Job> prefetch_ ABSL_GUARDED_BY(mu_);  // ahead of need: when queue_ is empty
  // Grammars to prefetch, turned into prefetch_ jobs by a worker (a search over the automaton,
  // kept off the caller's thread) with their limits.
  std::deque<std::pair<std::shared_ptr<text::grammar::TokenMasker>, size_t>> grammars_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Key> pending_ ABSL_GUARDED_BY(mu_);  // queued or being classified
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int busy_ ABSL_GUARDED_BY(mu_) = 0;  // workers classifying or listing a grammar's positions
  int64_t walks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefetch_walks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefetches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace banyan::scheduler
