// Scheduler: the iteration-level (continuous batching) engine loop.
//
// Threads: Submit / Drain / Metrics may be called from any thread. One engine thread, owned by
// the scheduler, runs iterations: each one asks the pure policy (policy.h) for an IterationPlan,
// carries it out on the prefix tree and the backend, samples, and pushes TokenEvents.
//
// Guarantees:
//  - a request's samples are independent of what else runs (per-sample seeded streams,
//    exact attention), including after preemption by recompute;
//  - a full waiting queue refuses new requests at once (ResourceExhausted);
//  - a cancelled request (client, deadline, shutdown) has its KV released before the next
//    iteration;
//  - Drain stops admission, lets running requests finish until the timeout, cancels the rest.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/request_stream.h"

namespace banyan::scheduler {

struct SchedulerOptions {
  int max_running_sequences = 256;  // decode rows per iteration
  int prefill_token_budget = 1024;  // prompt tokens prefilled per iteration (chunked prefill)
  int queue_limit = 256;            // waiting requests; more are refused
  engine::AttentionMode attention = engine::AttentionMode::kTpp;
};

class Scheduler {
 public:
  // All pointers must outlive the scheduler. The tree must use the backend's chunk pool.
  Scheduler(const engine::ModelConfig& config, const engine::Tokenizer* tokenizer,
            engine::Backend* backend, kvcache::PrefixTree* tree, SchedulerOptions options);
  ~Scheduler();  // Stop()

  void Start();

  // Validates and queues a request. InvalidArgument for a bad request (message names the
  // problem), ResourceExhausted when the waiting queue is full, Unavailable while draining.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request);

  // Stops admitting; waits up to `timeout` for running and queued requests to finish, then
  // cancels what is left. Returns once nothing runs.
  void Drain(std::chrono::milliseconds timeout);
  // Cancels everything and joins the engine thread.
  void Stop();

  bool draining() const;
  MetricsSnapshot Metrics() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Live;  // engine-thread state of one request
  void Loop();
  bool Iterate();  // one iteration; false when there was nothing to do

  const engine::ModelConfig& config_;
  const engine::Tokenizer* tokenizer_;
  engine::Backend* backend_;
  kvcache::PrefixTree* tree_;
  SchedulerOptions options_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  std::deque<std::unique_ptr<Live>> incoming_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  MetricsSnapshot metrics_ ABSL_GUARDED_BY(mu_);

  // Engine-thread only.
  std::vector<std::unique_ptr<Live>> waiting_;
  std::vector<std::unique_ptr<Live>> running_;
  uint64_t arrival_counter_ = 0;
  std::thread thread_;
};

}  // namespace banyan::scheduler
