#include "server/grpc/grpc_server.h"

#include <algorithm>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/grpc/generation_service.h"
#include "server/grpc/grpc_log.h"
#include "server/grpc/stream_pump.h"

namespace banyan::server {
namespace {

constexpr char kServiceName[] = "banyan.v1.Generation";

// "host:port", with an IPv6 literal in brackets.
std::string ListenAddress(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

GrpcFrontEnd::GrpcFrontEnd(ServerContext* ctx) : ctx_(ctx) {}

GrpcFrontEnd::~GrpcFrontEnd() { Shutdown(std::chrono::system_clock::now()); }

absl::Status GrpcFrontEnd::Start() {
  if (server_ != nullptr) return absl::FailedPreconditionError("the gRPC server already started");
  if (ctx_->options.grpc_port < 0 || ctx_->options.grpc_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc_port must be in [0, 65535], got ", ctx_->options.grpc_port));
  }
  if (!ctx_->options.api_keys.empty() && !ctx_->auth.keys_required()) {
    // The keys are enforced through ctx->auth; options alone would leave the server open.
    return absl::FailedPreconditionError(
        "API keys are configured but ServerContext::auth has none: build it with Auth::Create");
  }
  const std::string address = ListenAddress(ctx_->options.host, ctx_->options.grpc_port);
  pump_ = std::make_unique<StreamPump>([this] { UpdateHealth(); });
  service_ = std::make_unique<GenerationService>(ctx_, pump_.get());

  // Process-wide switch, read by BuildAndStart: gRPC's built-in grpc.health.v1.Health.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected_port);
  builder.RegisterService(service_.get());
  // gRPC sets SO_REUSEPORT by default, which lets a second daemon bind the same port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The same request size limit as the HTTP front end's body limit.
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::clamp<int64_t>(ctx_->options.max_body_bytes, 1, std::numeric_limits<int>::max())));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    server_.reset();
    pump_->Stop();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", address, " (address in use or invalid)"));
  }
  port_ = selected_port;
  UpdateHealth();
  GrpcLog().info("gRPC listening on {} (banyan.v1.Generation, grpc.health.v1.Health){}",
                 ListenAddress(ctx_->options.host, port_),
                 ctx_->auth.keys_required() ? ", API keys required" : "");
  return absl::OkStatus();
}

void GrpcFrontEnd::UpdateHealth() {
  const bool serving = (ctx_->ready == nullptr || ctx_->ready->load()) &&
                       (ctx_->scheduler == nullptr || !ctx_->scheduler->draining());
  absl::MutexLock l(&health_mu_);
  if (shut_down_ || server_ == nullptr || serving_ == static_cast<int>(serving)) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(kServiceName, serving);
  health->SetServingStatus(serving);  // every service, and "" (the server as a whole)
  serving_ = serving;
  GrpcLog().info("health: {}", serving ? "SERVING" : "NOT_SERVING");
}

void GrpcFrontEnd::Shutdown(std::chrono::system_clock::time_point deadline) {
  {
    absl::MutexLock l(&health_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
      // NOT_SERVING for every service, and no later change.
      server_->GetHealthCheckService()->Shutdown();
    }
  }
  if (server_ == nullptr) return;
  GrpcLog().info("gRPC shutting down; open calls: {}", pump_->open_calls());
  // Open Generate calls get until `deadline` to finish and reach their clients (a shutdown
  // path, so a short poll is fine). Then the server refuses new calls and gives whatever else
  // is open (a health Watch, an idle stream) a short grace before cancelling it; reactors
  // finish through the pump, so it must keep running until this returns.
  while (pump_->open_calls() > 0 && std::chrono::system_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server_->Shutdown(std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(2)));
  server_->Wait();
  pump_->Stop();
  GrpcLog().info("gRPC stopped");
}

}  // namespace banyan::server
