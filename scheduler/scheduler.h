// Scheduler: the daemon's engine thread around the one engine loop (engine_loop.h), with a
// bounded queue of incoming requests and the drain.
//
// Threads: Submit / Drain / Metrics may be called from any thread. One engine thread, owned by
// the scheduler, moves incoming requests into the loop and runs EngineLoop::Step. A second one,
// the announcer, wakes the readers of the streams each step pushed to (their listeners post to
// the front ends' I/O threads), so that this per-stream work, which grows with the streams, is
// off the engine thread (docs/benchmarks.md, section 7).
//
// Guarantees (beyond the loop's):
//  - a full waiting queue refuses new requests at once (ResourceExhausted);
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
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "scheduler/engine_loop.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/request_stream.h"

namespace banyan::scheduler {

struct SchedulerOptions {
  LoopOptions loop = {};  // the engine loop's (batch, budgets, attention, speculation)
  int queue_limit = 256;  // waiting requests; more are refused
};

class Scheduler {
 public:
  // `config` and `tokenizer` must outlive the scheduler; the loop owns the backend and sizes its
  // KV pool and prefix tree from it.
  Scheduler(const model::ModelConfig& config, const text::Tokenizer* tokenizer,
            std::unique_ptr<engine::Backend> backend, SchedulerOptions options);
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
  int32_t kv_chunks_total() const { return loop_->kv_chunks_total(); }
  // KV events: forwards to EngineLoop::set_kv_event_sink. Before Start.
  void set_kv_event_sink(kvcache::KvEventSink* sink) { loop_->set_kv_event_sink(sink); }
  // The prefix tree's full blocks as the engine thread sees them between two steps (after a
  // step's events were flushed): PrefixTree::FullBlocks, recomputed from the tokens. For the
  // debug view that checks the KV event stream. Unavailable when the engine thread is not
  // running or does not answer within `timeout`.
  absl::StatusOr<std::vector<kvcache::FullBlock>> KvBlocks(absl::Duration timeout);

  // The loop, for tests that inspect its tree: only while the engine thread is not running
  // (before Start or after Stop).
  EngineLoop& loop() { return *loop_; }

 private:
  struct Incoming {
    Request request;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point submitted;
  };
  void Loop();
  // Moves incoming requests into the loop; true when there were any.
  bool TakeIncoming();
  void PublishMetrics();
  void AnswerBlockQueries();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnnounceLoop();
  // Returns once every stream the engine pushed to has been announced.
  void WaitAnnounced();

  SchedulerOptions options_;
  std::unique_ptr<EngineLoop> loop_;  // engine thread only, after Start

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  absl::CondVar idle_cv_;
  std::deque<Incoming> incoming_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_all_ ABSL_GUARDED_BY(mu_) = false;  // drain timed out / stopping
  MetricsSnapshot metrics_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  struct BlockQuery {
    bool done = false;
    std::vector<kvcache::FullBlock> blocks;
  };
  std::vector<std::shared_ptr<BlockQuery>> block_queries_ ABSL_GUARDED_BY(mu_);
  absl::CondVar block_query_cv_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // the engine thread is in Loop()  // accepted by Submit; idle when all finished
  std::thread thread_;

  absl::Mutex announce_mu_;
  absl::CondVar announce_cv_;
  std::vector<std::shared_ptr<RequestStream>> to_announce_ ABSL_GUARDED_BY(announce_mu_);
  bool announce_stop_ ABSL_GUARDED_BY(announce_mu_) = false;
  bool announcing_ ABSL_GUARDED_BY(announce_mu_) = false;  // a batch is being announced
  absl::CondVar announce_idle_cv_;
  std::thread announce_thread_;
};

}  // namespace banyan::scheduler
