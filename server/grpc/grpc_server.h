// GrpcFrontEnd: the daemon's gRPC listener. It serves banyan.v1.Generation
// (generation_service.h) and the standard grpc.health.v1.Health service.
//
// Health: the server as a whole ("") and "banyan.v1.Generation" are SERVING while ctx->ready is
// true and the scheduler is not draining, NOT_SERVING otherwise; the status follows within
// StreamPump::kTickInterval, or at once through UpdateHealth. Health needs no API key.
//
// Threads: Start, UpdateHealth and Shutdown may be called from any thread, Start once, before
// Shutdown. Handlers run on gRPC's callback threads; one StreamPump thread feeds the streams.
#pragma once

#include <chrono>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"
#include "server/common/server_context.h"

namespace banyan::server {

class GenerationService;
class StreamPump;

class GrpcFrontEnd {
 public:
  // `ctx` (and what it points to) must outlive the front end.
  explicit GrpcFrontEnd(ServerContext* ctx);
  ~GrpcFrontEnd();  // Shutdown(now) when still running
  GrpcFrontEnd(const GrpcFrontEnd&) = delete;
  GrpcFrontEnd& operator=(const GrpcFrontEnd&) = delete;

  // Listens on ctx->options.host : ctx->options.grpc_port (port 0: a free port, see port()).
  // Unavailable when the address can not be bound (in use, bad host).
  absl::Status Start();
  // The port listened on; 0 before Start.
  int port() const { return port_; }

  // Sets the health status from ctx->ready and the scheduler's draining flag now.
  void UpdateHealth();

  // Stops: health goes NOT_SERVING, new calls are refused, open calls may finish until
  // `deadline`, then those left are cancelled (their scheduler requests too). Returns once
  // every call is done. Idempotent.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  ServerContext* const ctx_;
  std::unique_ptr<StreamPump> pump_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  absl::Mutex health_mu_;
  bool shut_down_ ABSL_GUARDED_BY(health_mu_) = false;
  int serving_ ABSL_GUARDED_BY(health_mu_) = -1;  // last status set: 1 serving, 0 not, -1 none
};

}  // namespace banyan::server
