#include "server/grpc/generation_service.h"

#include <chrono>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/grpc/grpc_log.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/grpc_translate.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

// A Generate call that ends before it starts (bad request, refused by the scheduler).
class FinishedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FinishedWriter(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// Ends a unary call; an error is counted as a refusal of `tenant` (null: not authenticated).
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* call,
                                      const absl::Status& status, const ServerContext& ctx,
                                      const Tenant* tenant = nullptr) {
  if (!status.ok()) {
    ctx.rejections->Add(RejectReasonForStatus(status), tenant != nullptr ? tenant->name() : "");
  }
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  out.reserve(buffer.Length());
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// gRPC's deadline as a steady-clock time point; nullopt for "no deadline" (gRPC reports its
// infinite deadline as a time point centuries ahead).
std::optional<std::chrono::steady_clock::time_point> SteadyDeadline(
    std::chrono::system_clock::time_point deadline) {
  const auto left = deadline - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return std::nullopt;
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

}  // namespace

GenerationService::GenerationService(const ServerContext* ctx, StreamPump* pump)
    : ctx_(ctx), pump_(pump) {}

absl::StatusOr<const Tenant*> GenerationService::Authenticate(
    const grpc::CallbackServerContext& call) const {
  const auto [begin, end] = call.client_metadata().equal_range("authorization");
  std::optional<std::string_view> value;
  if (begin != end) {
    if (std::next(begin) != end && ctx_->auth.keys_required()) {
      return absl::UnauthenticatedError(
          "more than one 'authorization' metadata entry; send exactly one 'Bearer <key>'");
    }
    value = std::string_view(begin->second.data(), begin->second.size());
  }
  return ctx_->auth.Authenticate(value);
}

absl::StatusOr<GenerateCall*> GenerationService::StartGenerate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer& request, const Tenant** who,
    std::optional<RejectReason>* reason) {
  absl::StatusOr<const Tenant*> tenant = Authenticate(*call);
  if (!tenant.ok()) return tenant.status();
  *who = *tenant;
  v1::GenerateRequest req;
  if (absl::Status s = ParseRequest(Flatten(request), &req); !s.ok()) return s;
  if (ctx_->ready != nullptr && !ctx_->ready->load()) {
    return absl::UnavailableError("the server is not ready (loading or draining); retry later");
  }
  absl::StatusOr<std::string> id = ResolveRequestId(req.request_id());
  if (!id.ok()) return id.status();
  // Before tokenizing: a tenant at its limit costs nothing more.
  absl::StatusOr<TenantSlot> slot = TenantSlot::Acquire(**tenant);
  if (!slot.ok()) {
    *reason = RejectReason::kTenantConcurrency;
    return slot.status();
  }
  text::tool_calls::ToolFamily tool_family = text::tool_calls::ToolFamily::kNone;
  absl::StatusOr<scheduler::Request> r =
      ToSchedulerRequest(req, *ctx_, *id, (*tenant)->name(), &tool_family);
  if (!r.ok()) return r.status();
  r->deadline = SteadyDeadline(call->deadline());
  const std::optional<std::chrono::steady_clock::time_point> deadline = r->deadline;
  r->tenant = (*tenant)->name();
  r->tenant_kv_chunks = (*tenant)->max_kv_chunks();
  const size_t prompt_tokens = r->prompt.size();
  const int n = r->n;
  const int max_tokens = r->params.max_tokens;
  absl::StatusOr<std::shared_ptr<scheduler::RequestStream>> stream =
      ctx_->scheduler->Submit(*std::move(r));
  if (!stream.ok()) return stream.status();
  GrpcLog().info("req={} admitted from {} (tenant {}): prompt {} tokens, n={}, max_tokens={}",
                 *id, call->peer(), (*tenant)->name(), prompt_tokens, n, max_tokens);
  return new GenerateCall(pump_, *std::move(stream), *id, req.sampling().has_logprobs(),
                          *std::move(slot), deadline, tool_family);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  const Tenant* tenant = nullptr;
  std::optional<RejectReason> reason;
  absl::StatusOr<GenerateCall*> started = StartGenerate(call, *request, &tenant, &reason);
  if (!started.ok()) {
    ctx_->rejections->Add(reason.value_or(RejectReasonForStatus(started.status())),
                          tenant != nullptr ? tenant->name() : "");
    GrpcLog().info("Generate from {} refused: {}", call->peer(), started.status().ToString());
    return new FinishedWriter(ToGrpcStatus(started.status()));
  }
  pump_->Add(*started);
  return *started;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* call,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  absl::StatusOr<const Tenant*> t = Authenticate(*call);
  if (!t.ok()) return FinishUnary(call, t.status(), *ctx_);
  v1::TokenizeRequest req;
  if (absl::Status s = ParseRequest(Flatten(*request), &req); !s.ok()) {
    return FinishUnary(call, s, *ctx_, *t);
  }
  if (absl::Status s = CheckModel(req.model(), *ctx_); !s.ok()) {
    return FinishUnary(call, s, *ctx_, *t);
  }
  if (absl::Status s = CheckPromptBytes(req.text(), ctx_->options, "text"); !s.ok()) {
    return FinishUnary(call, s, *ctx_, *t);
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeText(req.text(), !req.has_add_bos() || req.add_bos(), *ctx_->tokenizer);
  if (!ids.ok()) return FinishUnary(call, ids.status(), *ctx_, *t);
  v1::TokenizeResponse resp;
  for (int32_t id : *ids) {
    resp.add_token_ids(id);
    const std::string_view piece = ctx_->tokenizer->Piece(id);
    resp.add_pieces(piece.data(), piece.size());
  }
  resp.set_max_context_length(ctx_->model_config->max_seq_len);
  bool own_buffer = false;
  grpc::Status s =
      grpc::SerializationTraits<v1::TokenizeResponse>::Serialize(resp, response, &own_buffer);
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* call,
                                                        const v1::DetokenizeRequest* request,
                                                        v1::DetokenizeResponse* response) {
  absl::StatusOr<const Tenant*> t = Authenticate(*call);
  if (!t.ok()) return FinishUnary(call, t.status(), *ctx_);
  if (absl::Status s = CheckModel(request->model(), *ctx_); !s.ok()) {
    return FinishUnary(call, s, *ctx_, *t);
  }
  const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  if (!ids.empty()) {
    if (absl::Status s = ValidatePromptTokens(ids, ctx_->model_config->vocab_size, "token_ids");
        !s.ok()) {
      return FinishUnary(call, s, *ctx_, *t);
    }
  }
  response->set_text(ctx_->tokenizer->Decode(ids));
  return FinishUnary(call, absl::OkStatus(), *ctx_);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* call,
                                                        const v1::ListModelsRequest* /*request*/,
                                                        v1::ListModelsResponse* response) {
  absl::StatusOr<const Tenant*> t = Authenticate(*call);
  if (!t.ok()) return FinishUnary(call, t.status(), *ctx_);
  v1::Model* m = response->add_models();
  m->set_id(ctx_->model_name);
  m->set_max_context_length(ctx_->model_config->max_seq_len);
  m->set_vocab_size(ctx_->model_config->vocab_size);
  m->set_bos_token_id(ctx_->tokenizer->bos_id());
  m->set_eos_token_id(ctx_->tokenizer->eos_id());
  m->set_owned_by("banyan");
  return FinishUnary(call, absl::OkStatus(), *ctx_);
}

}  // namespace banyan::server
