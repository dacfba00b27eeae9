#include "server/grpc/grpc_log.h"

#include "spdlog/sinks/stdout_color_sinks.h"

namespace banyan::server {

spdlog::logger& GrpcLog() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> l = spdlog::get("grpc");
    return l != nullptr ? l : spdlog::stderr_color_mt("grpc");
  }();
  return *logger;
}

}  // namespace banyan::server
