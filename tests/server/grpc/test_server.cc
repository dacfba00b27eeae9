#include "tests/server/grpc/test_server.h"

#include <thread>
#include <utility>

#include "common/check.h"
#include "scheduler/generate.h"
#include "server/common/tool_calling.h"
#include "tests/testing/bundled_model.h"

namespace banyan::server::testing {

const model::ModelBundle& Bundle() { return banyan::testing::BundledModel(); }

TestServer::TestServer(TestServerOptions options) {
  const model::ModelBundle& b = Bundle();
  auto backend = engine::CpuBackend::Create(
      &b.weights, {.num_chunks = options.num_chunks, .chunk_size = options.chunk_size});
  BANYAN_CHECK(backend.ok()) << backend.status().ToString();
  scheduler_ = std::make_unique<scheduler::Scheduler>(b.weights.config, b.tokenizer.get(),
                                                      *std::move(backend), options.scheduler);
  scheduler_->Start();
  ctx_.model_name = kModelName;
  ctx_.model_config = &b.weights.config;
  ctx_.tokenizer = b.tokenizer.get();
  ctx_.scheduler = scheduler_.get();
  ctx_.structured_outputs = std::make_shared<StructuredOutputs>(b.tokenizer.get());
  ctx_.tool_calling = std::make_shared<ToolCalling>(b.tokenizer.get());
  ctx_.jinja_chat = options.jinja_chat;
  ctx_.options.host = "127.0.0.1";
  ctx_.options.grpc_port = 0;
  ctx_.options.max_prompt_bytes = options.max_prompt_bytes;
  std::vector<TenantSpec> tenants = options.tenants;
  if (!options.api_keys.empty()) {
    TenantSpec plain;
    plain.name = kDefaultTenant;
    plain.keys = options.api_keys;
    tenants.push_back(std::move(plain));
  }
  for (const TenantSpec& t : tenants) {
    ctx_.options.api_keys.insert(ctx_.options.api_keys.end(), t.keys.begin(), t.keys.end());
  }
  absl::StatusOr<Auth> auth = Auth::Create(tenants);
  BANYAN_CHECK(auth.ok()) << auth.status().ToString();
  ctx_.auth = *std::move(auth);
  ctx_.ready = &ready_;
  front_end_ = std::make_unique<GrpcFrontEnd>(&ctx_);
  absl::Status s = front_end_->Start();
  BANYAN_CHECK(s.ok()) << s.ToString();
}

TestServer::~TestServer() {
  front_end_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  scheduler_->Stop();
}

std::shared_ptr<grpc::Channel> TestServer::NewChannel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

bool TestServer::WaitForMetrics(const std::function<bool(const scheduler::MetricsSnapshot&)>& pred,
                                std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred(scheduler_->Metrics())) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

GenerateResult Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                        const std::function<void(grpc::ClientContext*)>& setup) {
  grpc::ClientContext ctx;
  if (setup) setup(&ctx);
  GenerateResult r;
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    ++r.messages;
    r.request_id = msg.request_id();
    if (r.usage.has_value()) r.usage_last = false;  // something came after the usage
    if (msg.has_usage()) {
      r.usage = msg.usage();
      if (msg.choices_size() > 0) r.usage_last = false;
    }
    for (const v1::Choice& c : msg.choices()) {
      ChoiceResult& out = r.choices[c.index()];
      ++out.messages;
      out.text += c.text();
      out.token_ids.insert(out.token_ids.end(), c.token_ids().begin(), c.token_ids().end());
      out.logprobs.insert(out.logprobs.end(), c.logprobs().begin(), c.logprobs().end());
      out.tool_calls.insert(out.tool_calls.end(), c.tool_calls().begin(), c.tool_calls().end());
      out.messages_with_calls += c.tool_calls_size() > 0;
      if (c.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.finish = c.finish_reason();
    }
  }
  r.status = reader->Finish();
  return r;
}

v1::GenerateRequest GreedyText(const std::string& text, int max_tokens) {
  v1::GenerateRequest req;
  req.set_text(text);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  return req;
}

std::vector<std::vector<int32_t>> EngineTokens(const std::vector<int32_t>& prompt,
                                               const engine::SamplingParams& params, int n) {
  const model::ModelBundle& b = Bundle();
  constexpr int32_t kChunks = 512, kChunkSize = 16;
  scheduler::EngineLoop loop(
      b.weights.config, b.tokenizer.get(),
      *engine::CpuBackend::Create(&b.weights, {.num_chunks = kChunks, .chunk_size = kChunkSize}),
      {});
  scheduler::Request r;
  r.prompt = prompt;
  r.params = params;
  r.n = n;
  auto out = scheduler::GenerateAll(loop, std::span(&r, 1));
  BANYAN_CHECK(out.ok()) << out.status().ToString();
  std::vector<std::vector<int32_t>> tokens;
  for (const scheduler::SampleOutput& s : (*out)[0].samples) tokens.push_back(s.tokens);
  return tokens;
}

}  // namespace banyan::server::testing
