// A real banyan gRPC server for tests: the bundled stories260K model on the CPU backend, a real
// Scheduler (structured outputs compiled for the model's tokenizer) and a GrpcFrontEnd on a free
// loopback port; plus small client helpers on the
// generated stubs.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "banyan/v1/generation.grpc.pb.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "grpcpp/grpcpp.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/scheduler.h"
#include "server/grpc/grpc_server.h"
#include "server/common/server_context.h"
#include "text/chat_template.h"

namespace banyan::server::testing {

inline constexpr char kModelName[] = "stories260K";

// The bundled model, loaded once per test binary.
const model::ModelBundle& Bundle();

struct TestServerOptions {
  int32_t num_chunks = 512;
  int32_t chunk_size = 16;
  scheduler::SchedulerOptions scheduler;
  std::vector<std::string> api_keys;  // the tenant "default"'s
  std::vector<TenantSpec> tenants;     // more tenants (server/common/auth.h)
  int64_t max_prompt_bytes = int64_t{1} << 20;
  // The model's own chat template: the tool-call syntax gRPC's tools are read in. Null: none
  // (tools refused but with tool_choice "none").
  std::shared_ptr<const text::JinjaChat> jinja_chat;
};

class TestServer {
 public:
  explicit TestServer(TestServerOptions options = {});
  ~TestServer();  // Shutdown(now), then the scheduler stops

  std::string address() const { return "127.0.0.1:" + std::to_string(front_end_->port()); }
  std::shared_ptr<grpc::Channel> NewChannel() const;
  GrpcFrontEnd& front_end() { return *front_end_; }
  scheduler::Scheduler& scheduler() { return *scheduler_; }
  std::atomic<bool>& ready() { return ready_; }
  const ServerContext& context() const { return ctx_; }

  // Polls the scheduler's metrics until `pred` holds or `timeout` passes; returns whether it
  // held.
  bool WaitForMetrics(const std::function<bool(const scheduler::MetricsSnapshot&)>& pred,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::atomic<bool> ready_{true};
  ServerContext ctx_;
  std::unique_ptr<GrpcFrontEnd> front_end_;
};

// What a Generate call returned, put together.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<v1::StepLogprobs> logprobs;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int messages = 0;  // messages that carried this choice
  std::vector<v1::ToolCall> tool_calls;  // a request with tools: the calls, in order
  int messages_with_calls = 0;           // messages that carried some of them
};
struct GenerateResult {
  grpc::Status status;
  std::map<int, ChoiceResult> choices;
  std::optional<v1::Usage> usage;
  int messages = 0;
  bool usage_last = true;  // usage came only in the last message, which had no choices
  std::string request_id;
};

// Runs one Generate call to its end. `setup` may add metadata or a deadline.
GenerateResult Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                        const std::function<void(grpc::ClientContext*)>& setup = {});

// A request for `text` with greedy decoding and `max_tokens`.
v1::GenerateRequest GreedyText(const std::string& text, int max_tokens);

// The engine loop's own answer, driven directly on a private KV pool (scheduler::GenerateAll):
// the oracle the server's output is compared with (what the front end adds must not change it).
std::vector<std::vector<int32_t>> EngineTokens(const std::vector<int32_t>& prompt,
                                               const engine::SamplingParams& params, int n = 1);

}  // namespace banyan::server::testing
