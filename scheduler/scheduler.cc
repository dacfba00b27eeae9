#include "scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace banyan::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Scheduler::Scheduler(const model::ModelConfig& config, const text::Tokenizer* tokenizer,
                     std::unique_ptr<engine::Backend> backend, SchedulerOptions options)
    : options_(options),
      loop_(std::make_unique<EngineLoop>(
          config, tokenizer, std::move(backend),
          options.loop)) {
  absl::MutexLock lock(&mu_);
  metrics_ = loop_->metrics();
}

Scheduler::~Scheduler() {
  Stop();
  loop_.reset();  // cancels what never ran (Stop without Start), announcing on this thread
}

void Scheduler::Start() {
  loop_->set_announcer([this](std::vector<std::shared_ptr<RequestStream>> streams) {
    absl::MutexLock lock(&announce_mu_);
    if (to_announce_.empty()) {
      to_announce_ = std::move(streams);
    } else {
      to_announce_.insert(to_announce_.end(), streams.begin(), streams.end());
    }
    announce_cv_.Signal();
  });
  announce_thread_ = std::thread([this] { AnnounceLoop(); });
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::AnnounceLoop() {
  std::vector<std::shared_ptr<RequestStream>> batch;
  for (;;) {
    {
      absl::MutexLock lock(&announce_mu_);
      while (to_announce_.empty() && !announce_stop_) announce_cv_.Wait(&announce_mu_);
      if (to_announce_.empty()) return;  // stopping, and everything announced
      batch.swap(to_announce_);
      announcing_ = true;
    }
    for (const std::shared_ptr<RequestStream>& s : batch) s->Announce();
    batch.clear();
    absl::MutexLock lock(&announce_mu_);
    announcing_ = false;
    if (to_announce_.empty()) announce_idle_cv_.SignalAll();
  }
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Submit(Request r) {
  if (absl::Status s = loop_->Check(r); !s.ok()) return s;
  auto stream = std::make_shared<RequestStream>();
  absl::MutexLock lock(&mu_);
  if (draining_ || stop_) {
    ++metrics_.requests_rejected_total;
    return absl::UnavailableError("the server is shutting down");
  }
  if (metrics_.requests_waiting + static_cast<int32_t>(incoming_.size()) >=
      options_.queue_limit) {
    ++metrics_.requests_rejected_total;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request queue is full (", options_.queue_limit, " waiting); retry later"));
  }
  incoming_.push_back(Incoming{std::move(r), stream, Clock::now()});
  ++submitted_;
  work_cv_.Signal();
  return stream;
}

bool Scheduler::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

MetricsSnapshot Scheduler::Metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

bool Scheduler::Idle() const {
  // Counted, not read from the queues: a request the engine thread has taken from incoming_ but
  // not yet published as waiting or running must not look idle (a drain would return at once).
  return metrics_.requests_finished_total == submitted_;
}

void Scheduler::Drain(std::chrono::milliseconds timeout) {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    while (!Idle() && thread_.joinable()) {
      if (idle_cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
    }
    if (!Idle() && thread_.joinable()) {
      cancel_all_ = true;
      work_cv_.Signal();
      while (!Idle()) idle_cv_.Wait(&mu_);
    }
  }
  // Every stream's last events are pushed; their readers must be woken before the front ends
  // decide what is still undelivered.
  WaitAnnounced();
}

void Scheduler::WaitAnnounced() {
  absl::MutexLock lock(&announce_mu_);
  while ((!to_announce_.empty() || announcing_) && announce_thread_.joinable()) {
    announce_idle_cv_.Wait(&announce_mu_);
  }
}

void Scheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cancel_all_ = true;
    work_cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
  // The engine thread is gone: announce what it left, then stop the announcer.
  {
    absl::MutexLock lock(&announce_mu_);
    announce_stop_ = true;
    announce_cv_.Signal();
  }
  if (announce_thread_.joinable()) announce_thread_.join();
  loop_->set_announcer(nullptr);
}

bool Scheduler::TakeIncoming() {
  std::deque<Incoming> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(incoming_);
  }
  for (Incoming& in : taken) loop_->Add(std::move(in.request), std::move(in.stream), in.submitted);
  return !taken.empty();
}

void Scheduler::PublishMetrics() {
  absl::MutexLock lock(&mu_);
  const int64_t rejected = metrics_.requests_rejected_total;
  metrics_ = loop_->metrics();
  metrics_.requests_rejected_total = rejected;
  if (Idle()) idle_cv_.SignalAll();
}

absl::StatusOr<std::vector<kvcache::FullBlock>> Scheduler::KvBlocks(absl::Duration timeout) {
  auto q = std::make_shared<BlockQuery>();
  absl::MutexLock lock(&mu_);
  if (!running_) return absl::UnavailableError("the engine thread is not running");
  block_queries_.push_back(q);
  work_cv_.Signal();
  const absl::Time deadline = absl::Now() + timeout;
  while (!q->done && running_) {
    if (block_query_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (!q->done) return absl::UnavailableError("the engine thread did not answer in time");
  return std::move(q->blocks);
}

void Scheduler::AnswerBlockQueries() {
  std::vector<std::shared_ptr<BlockQuery>> queries;
  {
    absl::MutexLock lock(&mu_);
    if (block_queries_.empty()) return;
    queries.swap(block_queries_);
  }
  std::vector<kvcache::FullBlock> blocks = loop_->tree().FullBlocks();  // engine thread
  absl::MutexLock lock(&mu_);
  for (auto& q : queries) {
    q->blocks = blocks;
    q->done = true;
  }
  block_query_cv_.SignalAll();
}

void Scheduler::Loop() {
  {
    absl::MutexLock lock(&mu_);
    running_ = true;
  }
  while (true) {
    bool cancel_all;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ && incoming_.empty() && loop_->idle()) break;
      cancel_all = cancel_all_;
    }
    const bool took = TakeIncoming();
    const bool moved = loop_->Step(cancel_all);
    if (took || moved) PublishMetrics();
    AnswerBlockQueries();
    if (!moved) {
      absl::MutexLock lock(&mu_);
      // Nothing could move: sleep until a request arrives or is cancelled (cancellation is seen
      // within the timeout), or the server stops.
      if (incoming_.empty() && !stop_ && !cancel_all_ && block_queries_.empty()) {
        work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
      }
    }
  }
  PublishMetrics();
  absl::MutexLock lock(&mu_);
  running_ = false;
  block_query_cv_.SignalAll();
}

}  // namespace banyan::scheduler
