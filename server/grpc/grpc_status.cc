#include "server/grpc/grpc_status.h"

#include <string>

namespace banyan::server {

// The numbering ToGrpcStatus relies on.
static_assert(static_cast<int>(absl::StatusCode::kCancelled) == grpc::StatusCode::CANCELLED);
static_assert(static_cast<int>(absl::StatusCode::kInvalidArgument) ==
              grpc::StatusCode::INVALID_ARGUMENT);
static_assert(static_cast<int>(absl::StatusCode::kDeadlineExceeded) ==
              grpc::StatusCode::DEADLINE_EXCEEDED);
static_assert(static_cast<int>(absl::StatusCode::kNotFound) == grpc::StatusCode::NOT_FOUND);
static_assert(static_cast<int>(absl::StatusCode::kResourceExhausted) ==
              grpc::StatusCode::RESOURCE_EXHAUSTED);
static_assert(static_cast<int>(absl::StatusCode::kUnavailable) == grpc::StatusCode::UNAVAILABLE);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              grpc::StatusCode::UNAUTHENTICATED);

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  // Codes outside the canonical space (none exist today) must not pass as a valid gRPC code.
  const grpc::StatusCode grpc_code = code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace banyan::server
