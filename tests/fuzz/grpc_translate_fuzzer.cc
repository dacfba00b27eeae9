// Fuzzes the gRPC front end's translation: the fuzz bytes are a wire-format banyan.v1
// GenerateRequest (and TokenizeRequest), decoded with ParseRequest (ParseFromArray, plus the
// UTF-8 failure explanation that walks the raw bytes), then ResolveRequestId, CheckModel and
// ToSchedulerRequest, as GenerationService does. A request that ToSchedulerRequest accepts must
// respect the model's limits.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "banyan/v1/generation.pb.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "google/protobuf/stubs/logging.h"
#include "server/grpc/grpc_translate.h"
#include "server/common/server_context.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::server {
namespace {

struct Fixture {
  std::unique_ptr<text::Tokenizer> tokenizer;
  model::ModelConfig config;
  ServerContext ctx;
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    auto t = text::Tokenizer::FromFile(fuzz::BundledTokenizerPath());
    FUZZ_CHECK(t.ok());
    f->tokenizer = std::move(*t);
    f->config.max_seq_len = 512;
    f->config.vocab_size = f->tokenizer->vocab_size();
    f->ctx.model_name = "stories260K";
    f->ctx.model_config = &f->config;
    f->ctx.tokenizer = f->tokenizer.get();
    return f;
  }();
  return *fixture;
}

void FuzzGenerate(std::string_view wire, const Fixture& f) {
  v1::GenerateRequest req;
  if (!ParseRequest(wire, &req).ok()) return;
  absl::StatusOr<std::string> id = ResolveRequestId(req.request_id());
  if (!id.ok()) return;
  if (!CheckModel(req.model(), f.ctx).ok()) return;
  absl::StatusOr<scheduler::Request> r = ToSchedulerRequest(req, f.ctx, *id, "default");
  if (!r.ok()) return;
  FUZZ_CHECK(!r->prompt.empty());
  FUZZ_CHECK(r->n >= 1 && r->n <= f.ctx.options.max_n);
  FUZZ_CHECK(r->params.max_tokens >= 1);
  FUZZ_CHECK(static_cast<int64_t>(r->prompt.size()) + r->params.max_tokens <=
             f.config.max_seq_len);
  for (int32_t t : r->prompt) FUZZ_CHECK(t >= 0 && t < f.config.vocab_size);
}

void FuzzTokenize(std::string_view wire, const Fixture& f) {
  v1::TokenizeRequest req;
  if (!ParseRequest(wire, &req).ok()) return;
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeText(req.text(), !req.has_add_bos() || req.add_bos(), *f.tokenizer);
  if (!ids.ok()) return;
  for (int32_t t : *ids) FUZZ_CHECK(t >= 0 && t < f.config.vocab_size);
}

}  // namespace
}  // namespace banyan::server

// protobuf logs every string field that is not UTF-8 at ERROR level; per input that would bury
// libFuzzer's own output and slow it down. ParseRequest reports those fields itself.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::server;
  const Fixture& f = GetFixture();
  const std::string_view wire(reinterpret_cast<const char*>(data), size);
  FuzzGenerate(wire, f);
  FuzzTokenize(wire, f);
  return 0;
}
