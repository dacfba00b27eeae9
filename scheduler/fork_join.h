// ForkJoin: a fixed set of threads that run the independent pieces of one call's host work beside
// the calling thread and return when every piece is done. The engine loop fills the token masks
// of a step's constrained rows with it (each sample's mask depends on its own matcher only): with
// every row of a 256-row step constrained, one thread's fills took longer than the device's step.
//
// Hand-written (about 50 lines) because the scheduler links no Boost (the daemon's front end does)
// and absl has no public thread pool. Threads sleep on a condition between calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace banyan::scheduler {

class ForkJoin {
 public:
  explicit ForkJoin(int threads);  // threads beside the caller; 0: Run calls fn inline
  ~ForkJoin();
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;

  // Calls fn(i) once for every i in [0, n), on the pool's threads and the calling thread, which
  // take indices from one counter; returns when every call has returned. One Run at a time.
  void Run(size_t n, absl::FunctionRef<void(size_t)> fn);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();
  void Take();  // calls fn for indices from the counter until none are left

  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // one per Run
  int busy_ ABSL_GUARDED_BY(mu_) = 0;             // pool threads still in this Run
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar start_;  // a new generation, or stop
  absl::CondVar done_;   // busy_ reached 0
  const absl::FunctionRef<void(size_t)>* fn_ = nullptr;  // set before a generation starts
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> threads_;
};

}  // namespace banyan::scheduler
