// The one place where the gRPC front end turns an absl::Status into a grpc::Status.
//
// absl::StatusCode and grpc::StatusCode both number the canonical google.rpc.Code space, so the
// code carries over unchanged: InvalidArgument -> INVALID_ARGUMENT, ResourceExhausted (queue
// full) -> RESOURCE_EXHAUSTED, Unavailable (draining) -> UNAVAILABLE, NotFound (unknown model)
// -> NOT_FOUND, Unauthenticated -> UNAUTHENTICATED. The message is kept as it is: it was written
// for the user.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace banyan::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace banyan::server
