// The gRPC front end's spdlog logger ("grpc"), created on first use.
#pragma once

#include "spdlog/spdlog.h"

namespace banyan::server {

spdlog::logger& GrpcLog();

}  // namespace banyan::server
