// Fuzzes the OpenAI HTTP request decoding: a body goes through ParseBody (UTF-8, JSON, object),
// then ParseCompletionRequest and ParseChatRequest (once per chat template), and every decoded
// input through BuildRequest, as the HTTP front end does. Any status is fine; crashes,
// sanitizer reports and a decoded request that BuildRequest accepts but breaks the model's
// limits are not.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "server/common/server_context.h"
#include "server/common/validation.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::server {
namespace {

// Chat prompts are rendered with each built-in template in turn.
constexpr text::ChatTemplate kTemplates[] = {text::ChatTemplate::kPlain, text::ChatTemplate::kLlama2,
                                       text::ChatTemplate::kChatML};

struct Fixture {
  std::unique_ptr<text::Tokenizer> tokenizer;
  model::ModelConfig config;
  ServerContext ctx[std::size(kTemplates)];  // ctx[i] renders chat with kTemplates[i]
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    auto t = text::Tokenizer::FromFile(fuzz::BundledTokenizerPath());
    FUZZ_CHECK(t.ok());
    f->tokenizer = std::move(*t);
    f->config.max_seq_len = 512;
    f->config.vocab_size = f->tokenizer->vocab_size();
    for (size_t i = 0; i < std::size(kTemplates); ++i) {
      f->ctx[i].model_name = "stories260K";
      f->ctx[i].model_config = &f->config;
      f->ctx[i].tokenizer = f->tokenizer.get();
      f->ctx[i].options.chat_template = kTemplates[i];
    }
    return f;
  }();
  return *fixture;
}

void BuildAll(const absl::StatusOr<http::ParsedGeneration>& parsed, const Fixture& f) {
  if (!parsed.ok()) return;
  const ModelLimits limits{.context_tokens = f.config.max_seq_len,
                           .vocab_size = f.config.vocab_size,
                           .max_n = f.ctx[0].options.max_n};
  for (const GenerationInput& input : parsed->inputs) {
    absl::StatusOr<scheduler::Request> r =
        BuildRequest(input, limits, parsed->default_max_tokens, "fuzz");
    if (!r.ok()) continue;
    FUZZ_CHECK(!r->prompt.empty());
    FUZZ_CHECK(r->n >= 1 && r->n <= limits.max_n);
    FUZZ_CHECK(r->params.max_tokens >= 1);
    FUZZ_CHECK(static_cast<int64_t>(r->prompt.size()) + r->params.max_tokens <=
               limits.context_tokens);
    for (int32_t id : r->prompt) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  }
}

}  // namespace
}  // namespace banyan::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::server;
  const Fixture& f = GetFixture();
  absl::StatusOr<http::Json> body =
      http::ParseBody(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body.ok()) return 0;
  BuildAll(http::ParseCompletionRequest(*body, f.ctx[0]), f);
  for (const ServerContext& ctx : f.ctx) BuildAll(http::ParseChatRequest(*body, ctx), f);
  return 0;
}
