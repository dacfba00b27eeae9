#include "scheduler/request_stream.h"

namespace banyan::scheduler {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "";
}

bool RequestStream::Read(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !events_.empty() || finished_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
  const bool had_events = !events_.empty();
  for (TokenEvent& e : events_) out->push_back(std::move(e));
  events_.clear();
  return had_events || !finished_;
}

void RequestStream::Cancel() {
  absl::MutexLock lock(&mu_);
  cancel_.store(true, std::memory_order_relaxed);
}

absl::Status RequestStream::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

Usage RequestStream::usage() const {
  absl::MutexLock lock(&mu_);
  return usage_;
}

void RequestStream::SetListener(std::function<void()> listener) {
  absl::MutexLock lock(&call_mu_);  // waits for a call in progress
  listener_ = std::move(listener);
}

void RequestStream::Notify() {
  absl::MutexLock lock(&call_mu_);
  if (listener_) listener_();
}

void RequestStream::Push(TokenEvent event, bool announce) {
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  if (announce) Notify();
}

void RequestStream::Finish(absl::Status status, Usage usage, bool announce) {
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    status_ = std::move(status);
    usage_ = usage;
  }
  if (announce) Notify();
}

void RequestStream::Announce() { Notify(); }

bool RequestStream::cancel_requested() const { return cancel_.load(std::memory_order_relaxed); }

bool RequestStream::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

}  // namespace banyan::scheduler
