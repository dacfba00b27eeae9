// GenerationService: the banyan.v1.Generation handlers on gRPC's callback API (see
// stream_pump.h for why callbacks). Handlers never block: they authenticate, translate the
// request (grpc_translate.h), submit it, and return a reactor.
//
// Generate and Tokenize are registered as raw (ByteBuffer) methods so that a request whose
// string field is not UTF-8 gets INVALID_ARGUMENT naming the field, instead of the INTERNAL
// "failed to parse" that gRPC's own deserialization answers before any handler runs.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "banyan/v1/generation.grpc.pb.h"
#include "server/grpc/stream_pump.h"
#include "server/common/server_context.h"

namespace banyan::server {

using GenerationServiceBase = v1::Generation::WithRawCallbackMethod_Generate<
    v1::Generation::WithRawCallbackMethod_Tokenize<v1::Generation::WithCallbackMethod_Detokenize<
        v1::Generation::WithCallbackMethod_ListModels<v1::Generation::Service>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  // Both must outlive the service.
  GenerationService(const ServerContext* ctx, StreamPump* pump);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* call,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

 private:
  // The caller's tenant, from the metadata `authorization` under the rules of server/common/auth.h
  // (the same as HTTP's, on the raw value). With keys configured, more than one
  // `authorization` entry is refused. Unauthenticated otherwise.
  absl::StatusOr<const Tenant*> Authenticate(const grpc::CallbackServerContext& call) const;
  // Generate minus the reactor: the admitted request's stream, or why not. Sets *who once the
  // caller is authenticated, and *reason where the status alone does not tell it (the tenant's
  // concurrency limit), for the refusal counters.
  absl::StatusOr<GenerateCall*> StartGenerate(grpc::CallbackServerContext* call,
                                              const grpc::ByteBuffer& request, const Tenant** who,
                                              std::optional<RejectReason>* reason);

  const ServerContext* ctx_;
  StreamPump* pump_;
};

}  // namespace banyan::server
