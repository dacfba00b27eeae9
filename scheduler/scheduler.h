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
#include <span>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/sampler/sampler.h"
#include "engine/step_runner.h"
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
  using LivePtr = std::unique_ptr<Live>;
  void Loop();
  bool Iterate();  // one iteration; false when there was nothing to do

  // Engine-thread helpers of Iterate.
  bool TakeIncoming();
  void CancelDue(bool cancel_all);
  void Preempt(Live& live);
  // Places up to `tokens` prompt tokens (or the whole recompute of a resumed request).
  absl::Status PlacePrefill(Live& live, int32_t tokens, std::vector<kvcache::ChunkCopy>* copies,
                            std::vector<engine::PrefillItem>* items,
                            std::vector<Live*>* logit_owners);
  // Turns a prefilled prompt into n samples and samples their first tokens.
  void StartSamples(Live& live, std::span<const float> logits);
  void SampleNext(Live& live, size_t sample, std::span<const float> logits);
  // Ends a sample (its KV is released) / the whole request.
  void EndSample(Live& live, size_t sample, FinishReason reason, std::string text);
  void Finish(Live& live, absl::Status status, FinishReason reason);
  void ReleaseAll(Live& live);
  void PublishMetrics();

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
  bool cancel_all_ ABSL_GUARDED_BY(mu_) = false;  // drain timed out / stopping
  MetricsSnapshot metrics_ ABSL_GUARDED_BY(mu_);

  // Engine-thread only.
  std::vector<LivePtr> waiting_;
  std::vector<LivePtr> running_;
  uint64_t arrival_counter_ = 0;
  std::unique_ptr<engine::StepRunner> runner_;
  engine::SamplerScratch scratch_;
  // Metrics as the engine thread keeps them; copied to metrics_ at the end of each iteration
  // (requests_rejected_total is counted by Submit directly in metrics_).
  MetricsSnapshot engine_metrics_;
  std::thread thread_;
};

}  // namespace banyan::scheduler
