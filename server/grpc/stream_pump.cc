#include "server/grpc/stream_pump.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "common/check.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/grpc/grpc_log.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/grpc_translate.h"

namespace banyan::server {

GenerateCall::GenerateCall(StreamPump* pump, std::shared_ptr<scheduler::RequestStream> stream,
                           std::string request_id, bool with_logprobs, TenantSlot slot,
                           std::optional<std::chrono::steady_clock::time_point> deadline,
                           text::tool_calls::ToolFamily tool_family)
    : pump_(pump),
      stream_(std::move(stream)),
      request_id_(std::move(request_id)),
      with_logprobs_(with_logprobs),
      slot_(std::move(slot)),
      start_(std::chrono::steady_clock::now()),
      deadline_(deadline) {
  if (tool_family != text::tool_calls::ToolFamily::kNone) tool_calls_.emplace(tool_family);
}

void GenerateCall::OnWriteDone(bool ok) {
  if (!ok) {
    // The client is gone (its cancellation may not have been reported yet).
    cancelled_.store(true);
    stream_->Cancel();
  }
  pump_->WriteDone(this);
}

void GenerateCall::OnCancel() {
  cancelled_.store(true);
  stream_->Cancel();
  pump_->Wake();
}

void GenerateCall::OnDone() {
  stream_->SetListener({});  // returns once no call of the listener is running
  pump_->Remove(this);
  delete this;
}

void GenerateCall::Serialize() {
  buffer_.Clear();  // the previous write is done with it; Serialize wants an empty buffer
  bool own_buffer = false;
  grpc::Status s =
      grpc::SerializationTraits<v1::GenerateResponse>::Serialize(response_, &buffer_, &own_buffer);
  BANYAN_CHECK(s.ok()) << "serializing a GenerateResponse: " << s.error_message();
}

double GenerateCall::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool GenerateCall::Step() {
  if (cancelled_.load()) {
    stream_->Cancel();
    GrpcLog().info("req={} cancelled by the client after {:.3f}s", request_id_, ElapsedSeconds());
    pump_->SetPhase(this, Phase::kDone);
    // The client sees CANCELLED or DEADLINE_EXCEEDED whatever is sent here.
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
    return true;
  }
  events_.clear();
  const bool more = stream_->Read(&events_, std::chrono::milliseconds(0));
  if (!events_.empty()) {
    response_.Clear();
    response_.set_request_id(request_id_);
    AppendEvents(events_, with_logprobs_, &response_);
    if (tool_calls_.has_value()) tool_calls_->Apply(&response_);
    Serialize();
    StartWrite(&buffer_);  // stays kBusy until OnWriteDone
    return true;
  }
  if (more) {
    pump_->SetPhase(this, Phase::kIdle);
    return false;
  }
  // The stream is finished and fully read.
  const absl::Status status = stream_->status();
  const scheduler::Usage usage = stream_->usage();
  pump_->SetPhase(this, Phase::kDone);
  if (!status.ok()) {
    GrpcLog().warn("req={} failed after {:.3f}s: {}", request_id_, ElapsedSeconds(),
                   status.ToString());
    Finish(ToGrpcStatus(status));
    return true;
  }
  if (deadline_.has_value() && std::chrono::steady_clock::now() >= *deadline_) {
    // The scheduler ended it at the call's deadline (or it ended just after): the client's
    // timer says DEADLINE_EXCEEDED, and so does this, whichever arrives first.
    GrpcLog().info("req={} reached its deadline after {:.3f}s", request_id_, ElapsedSeconds());
    Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the call's deadline passed"));
    return true;
  }
  GrpcLog().info("req={} done in {:.3f}s: prompt {} tokens ({} cached), completion {} tokens",
                 request_id_, ElapsedSeconds(), usage.prompt_tokens, usage.cached_prompt_tokens,
                 usage.completion_tokens);
  response_.Clear();
  response_.set_request_id(request_id_);
  ToProto(usage, response_.mutable_usage());
  Serialize();
  StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  return true;
}

StreamPump::StreamPump(std::function<void()> tick) : tick_(std::move(tick)) {
  thread_ = std::thread([this] { Loop(); });
}

StreamPump::~StreamPump() { Stop(); }

void StreamPump::Add(GenerateCall* call) {
  // Pushes wake the pump from here on; pending_ starts set, so what came before is read too.
  call->stream_->SetListener([this, pending = call->pending_] {
    pending->store(true);
    Wake();
  });
  absl::MutexLock l(&mu_);
  BANYAN_CHECK(!stop_) << "a Generate call arrived after the pump was stopped";
  calls_.push_back(call);
  woken_ = true;
  cv_.Signal();
}

void StreamPump::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

int StreamPump::open_calls() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(calls_.size());
}

void StreamPump::Wake() {
  absl::MutexLock l(&mu_);
  woken_ = true;
  cv_.Signal();
}

void StreamPump::SetPhase(GenerateCall* call, GenerateCall::Phase phase) {
  absl::MutexLock l(&mu_);
  call->phase_ = phase;
}

void StreamPump::WriteDone(GenerateCall* call) {
  absl::MutexLock l(&mu_);
  // After StartWriteAndFinish the call is kDone and stays so.
  if (call->phase_ == GenerateCall::Phase::kBusy) call->phase_ = GenerateCall::Phase::kIdle;
  // Read again after every write: the finish (or events) announced while the write was in
  // flight may have been announced before the read that started it, and not since.
  call->pending_->store(true);
  woken_ = true;
  cv_.Signal();
}

void StreamPump::Remove(GenerateCall* call) {
  absl::MutexLock l(&mu_);
  auto it = std::find(calls_.begin(), calls_.end(), call);
  BANYAN_CHECK(it != calls_.end()) << "OnDone of a call the pump does not know";
  calls_.erase(it);
  woken_ = true;
  cv_.Signal();
}

void StreamPump::Loop() {
  std::vector<GenerateCall*> ready;
  bool progress = false;
  auto last_tick = std::chrono::steady_clock::now() - kTickInterval;  // tick on the first pass
  for (;;) {
    ready.clear();
    {
      absl::MutexLock l(&mu_);
      if (!progress && !woken_) cv_.WaitWithTimeout(&mu_, absl::FromChrono(kTickInterval));
      woken_ = false;
      if (stop_ && calls_.empty()) return;
      for (GenerateCall* c : calls_) {
        // Only calls with something new: a push or finish of their stream, or a cancellation.
        if (c->phase_ == GenerateCall::Phase::kIdle &&
            (c->cancelled_.load() || c->pending_->exchange(false))) {
          c->phase_ = GenerateCall::Phase::kBusy;
          ready.push_back(c);
        }
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (tick_ && now - last_tick >= kTickInterval) {
      tick_();
      last_tick = now;
    }
    progress = false;
    for (GenerateCall* c : ready) progress |= c->Step();
  }
}

}  // namespace banyan::server
