// GenerateCall and StreamPump: how Generate streams reach the network without a thread each.
//
// Why the callback API: a sync gRPC server parks one thread per open stream for the whole
// generation (seconds to minutes), so a few hundred concurrent streams mean a few hundred
// threads mostly asleep. With grpc::CallbackService each stream is a GenerateCall reactor that
// holds no thread while it waits.
//
// Why a pump: gRPC allows one write in flight per call, and a reactor's operations must not
// race, so one StreamPump thread starts every call's writes. It sleeps until something happens:
// each call's RequestStream announces its pushes (RequestStream::SetListener) by marking the call
// pending and waking the pump, which then reads only the pending calls. Nothing polls; the pump
// wakes on its own only every kTickInterval, for `tick`. A call with a write in flight is
// skipped, which is the backpressure: events of a slow client pile up in its RequestStream
// (bounded by max_tokens), never in gRPC; once its write is done the call is read again.
//
// Call lifecycle (phase_, guarded by the pump's mutex):
//   kIdle  --pump takes it-->  kBusy  --StartWrite--> (OnWriteDone) --> kIdle
//                               kBusy  --nothing new--> kIdle
//                               kBusy  --Finish / StartWriteAndFinish--> kDone --> OnDone: deleted
// Only the pump starts operations on a call, one at a time, and never touches a call after
// Finish (OnDone may run, and delete it, at once). OnCancel (client cancel, deadline, server
// shutdown) and a failed write cancel the RequestStream at once, so the scheduler frees the KV
// before its next iteration; the pump then finishes the call.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "banyan/v1/generation.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "scheduler/request_stream.h"
#include "server/common/auth.h"
#include "server/grpc/grpc_translate.h"

namespace banyan::server {

class StreamPump;

// One Generate call. Created by the service once the request was admitted; deletes itself in
// OnDone. Messages are serialized here, as the service uses raw (ByteBuffer) methods.
class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `slot`: the tenant's in-flight slot, held until the call is done (OnDone).
  // `deadline`: the call's (steady clock); a stream that ends after it ends the call with
  // DEADLINE_EXCEEDED, as the client's own timer does, whichever comes first.
  // `tool_family`: a request with tools, whose calls are read out of the text in that syntax
  // (ToolCallReader); kNone: the text as it is.
  GenerateCall(StreamPump* pump, std::shared_ptr<scheduler::RequestStream> stream,
               std::string request_id, bool with_logprobs, TenantSlot slot = {},
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
               text::tool_calls::ToolFamily tool_family = text::tool_calls::ToolFamily::kNone);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  friend class StreamPump;
  enum class Phase { kIdle, kBusy, kDone };

  // Pump thread, phase kBusy: reads what the stream has and writes it, or finishes the call, or
  // (nothing new) goes back to kIdle. Returns whether it started a write or finished.
  bool Step();
  // Serializes response_ into buffer_.
  void Serialize();
  double ElapsedSeconds() const;

  StreamPump* const pump_;
  const std::shared_ptr<scheduler::RequestStream> stream_;
  const std::string request_id_;
  const bool with_logprobs_;
  const TenantSlot slot_;
  const std::chrono::steady_clock::time_point start_;
  const std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::optional<ToolCallReader> tool_calls_;  // pump thread only
  std::atomic<bool> cancelled_{false};
  // Set by the stream's listener on every push and finish, cleared by the pump before it reads.
  // Shared with the listener, which may still run (on the engine thread) after the call is gone.
  const std::shared_ptr<std::atomic<bool>> pending_ = std::make_shared<std::atomic<bool>>(true);
  Phase phase_ = Phase::kIdle;  // guarded by pump_->mu_
  // Pump thread only; alive until the write that sends them is done.
  std::vector<scheduler::TokenEvent> events_;
  v1::GenerateResponse response_;
  grpc::ByteBuffer buffer_;
};

class StreamPump {
 public:
  // How often `tick` runs when nothing else wakes the pump.
  static constexpr std::chrono::milliseconds kTickInterval{100};

  // `tick` runs on the pump thread on every pass, at least every kTickInterval (the front end
  // keeps the health status in step with readiness there).
  explicit StreamPump(std::function<void()> tick);
  ~StreamPump();  // Stop()
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  void Add(GenerateCall* call);
  // Stops the thread once no call is left. The gRPC server must be shut down first (its
  // Shutdown cancels the calls still open, which then finish through the pump).
  void Stop();
  int open_calls() const;

 private:
  friend class GenerateCall;
  void Loop();
  void Wake();
  void SetPhase(GenerateCall* call, GenerateCall::Phase phase);
  void WriteDone(GenerateCall* call);
  void Remove(GenerateCall* call);

  const std::function<void()> tick_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<GenerateCall*> calls_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace banyan::server
