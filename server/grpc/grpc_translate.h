// Translation between banyan.v1 messages and the scheduler's types, for the gRPC front end.
// No I/O and no gRPC calls, so it is tested without a server. Validation itself is shared with
// the HTTP front end (server/common/validation.h); this file only maps fields and applies the defaults
// documented in proto/banyan/v1/generation.proto.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "banyan/v1/generation.pb.h"
#include "google/protobuf/message.h"
#include "scheduler/request.h"
#include "server/common/server_context.h"
#include "text/tool_calls/tool_call_parser.h"

namespace banyan::server {

// Parses a request message from its wire bytes. protobuf refuses a message whose `string` field
// is not UTF-8 (before any handler could see it, as INTERNAL, were the method not raw), so the
// failure is explained here: InvalidArgument naming the field ("sampling.stop is not valid
// UTF-8 ...") or, for other damage, saying the bytes are no such message.
absl::Status ParseRequest(std::string_view wire, google::protobuf::Message* msg);

// Defaults of unset GenerateRequest fields (see the .proto).
inline constexpr int kGrpcDefaultMaxTokens = 16;
inline constexpr size_t kMaxTenantFieldBytes = 256;  // user, cache_salt
inline constexpr size_t kMaxRequestIdChars = 64;

// GenerateRequest.request_id when it is well formed (at most 64 of [A-Za-z0-9._:-]), a fresh
// "grpc-..." id when it is empty, InvalidArgument otherwise.
absl::StatusOr<std::string> ResolveRequestId(std::string_view client_id);

// A request's `model` field against the served model: "" and ctx.model_name pass, anything
// else is NotFound naming both.
absl::Status CheckModel(std::string_view requested, const ServerContext& ctx);

// The validated scheduler request for `req` from the authenticated `tenant` (its name is the
// prefix-cache namespace; req.user / cache_salt only narrow it): text is checked against
// max_prompt_bytes, then tokenized (with BOS unless add_bos is false), unset fields take their
// defaults, every field is checked against the model's limits, and a structured-output field
// (json_schema, regex, choice, json_object; at most one) is compiled into the constraint on
// this thread. InvalidArgument names the field. The caller sets the deadline.
// Tools (tools, tool_choice, parallel_tool_calls) are read by the HTTP chat path's
// ParseToolFields (server/common/tool_calling.h) from their JSON equivalent, so the checks and
// the field names in errors are the same, and their constraint is added as HTTP adds it
// (AddToolConstraint). `*tool_family` (when given) is the syntax to read calls in
// (ToolCallReader), kNone where nothing is parsed.
absl::StatusOr<scheduler::Request> ToSchedulerRequest(
    const v1::GenerateRequest& req, const ServerContext& ctx, std::string id,
    std::string_view tenant, text::tool_calls::ToolFamily* tool_family = nullptr);

// The token ids `text` becomes; InvalidArgument when it is not UTF-8.
absl::StatusOr<std::vector<int32_t>> TokenizeText(std::string_view text, bool add_bos,
                                                  const text::Tokenizer& tokenizer);

// Reads a request's tool calls out of its choices' text as the stream goes (the HTTP path's
// parser, text/tool_calls/tool_call_parser.h): Apply rewrites a message AppendEvents filled, so
// that each choice's `text` is only the text outside calls and each call that completed is a
// ToolCall; a choice that made calls and ended with STOP ends with TOOL_CALLS. One per call,
// fed every message in order.
class ToolCallReader {
 public:
  explicit ToolCallReader(text::tool_calls::ToolFamily family) : family_(family) {}
  void Apply(v1::GenerateResponse* out);

 private:
  struct PerChoice {
    text::tool_calls::ToolCallParser parser;
    size_t content_sent = 0;  // bytes of parser.content() sent
    size_t calls_sent = 0;    // complete calls sent
    bool made_calls = false;
  };
  text::tool_calls::ToolFamily family_;
  std::vector<std::unique_ptr<PerChoice>> choices_;  // by choice index, grown on first sight
};

v1::FinishReason ToProto(scheduler::FinishReason reason);
void ToProto(const scheduler::Usage& usage, v1::Usage* out);

// Appends `events` (in stream order) to `out`: one Choice per sample, created on the sample's
// first event in this message, its tokens, text and finish reason accumulated in order.
// Logprobs are filled only when `with_logprobs` (the request set sampling.logprobs).
void AppendEvents(std::span<const scheduler::TokenEvent> events, bool with_logprobs,
                  v1::GenerateResponse* out);

}  // namespace banyan::server
