// Prefix groups on the real bundled model: a burst of requests sharing an uncached prompt is
// admitted together, the shared part computed once, and each gets the tokens it gets alone.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "scheduler/engine_loop.h"
#include "scheduler/generate.h"
#include "tests/testing/bundled_model.h"

namespace banyan::scheduler {
namespace {

constexpr int kChunk = 16;

class PrefixGroupsTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { bundle_ = &banyan::testing::BundledModel(); }

  // Lockstep (no overlap, no fed steps): one Step is one whole iteration, so its first tokens
  // are in the streams when it returns. Row-invariant paged attention: a request gets the same
  // bits in any batch as alone.
  std::unique_ptr<EngineLoop> Make(int budget) {
    auto cpu = engine::CpuBackend::Create(
        &bundle_->weights, {.num_chunks = 256, .chunk_size = kChunk,
                            .attention = engine::AttentionMode::kPaged, .row_invariant = true});
    EXPECT_TRUE(cpu.ok());
    return std::make_unique<EngineLoop>(
        bundle_->weights.config, bundle_->tokenizer.get(), std::move(*cpu),
        LoopOptions{.max_running_sequences = 16, .prefill_token_budget = budget,
                    .attention = engine::AttentionMode::kPaged, .overlap = 0, .feed = 0});
  }
  Request Greedy(const std::string& text) {
    Request r;
    r.id = "r" + std::to_string(++ids_);
    r.prompt = bundle_->tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = 6;
    return r;
  }

  static const model::ModelBundle* bundle_;
  int ids_ = 0;
};
const model::ModelBundle* PrefixGroupsTest::bundle_ = nullptr;

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST_F(PrefixGroupsTest, ABurstSharingAnUncachedPromptGetsItsFirstTokensInOneStep) {
  const std::string system =
      "Once upon a time, there was a little dog named Max. Max liked to run in the big green "
      "park with his friend, a small bird. The bird could sing very well and Max loved to "
      "listen. Every morning they met by the old tree near the pond.";
  const char* tails[] = {" One day", " The bird", " Max was", " In the park"};
  std::vector<Request> reqs;
  for (const char* t : tails) reqs.push_back(Greedy(system + t));
  // The budget covers the first prompt plus what each other one adds past the chunks it shares
  // with the first, and is well short of two whole prompts: charged in full, the burst would
  // take at least one more step.
  int budget = static_cast<int>(reqs[0].prompt.size());
  for (size_t i = 1; i < reqs.size(); ++i) {
    const size_t shared = CommonPrefix(reqs[0].prompt, reqs[i].prompt) / kChunk * kChunk;
    ASSERT_GE(shared, 3u * kChunk) << "the system prompt should span several chunks";
    budget += static_cast<int>(reqs[i].prompt.size() - shared);
  }
  ASSERT_LT(budget, 2 * static_cast<int>(reqs[0].prompt.size()));

  auto loop = Make(budget);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) {
    streams.push_back(std::make_shared<RequestStream>());
    loop->Add(r, streams.back(), std::chrono::steady_clock::now());
  }
  ASSERT_TRUE(loop->Step());
  std::vector<std::vector<int32_t>> got(reqs.size());
  auto drain = [&] {
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<TokenEvent> ev;
      streams[i]->Read(&ev, std::chrono::milliseconds(0));
      for (const TokenEvent& e : ev) {
        if (e.token >= 0 && e.finish != FinishReason::kStop) got[i].push_back(e.token);
      }
    }
  };
  drain();
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i].size(), 1u) << "request " << i << " has no first token after one step";
  }
  while (loop->Step()) drain();
  drain();

  for (size_t i = 0; i < reqs.size(); ++i) {
    auto solo_loop = Make(budget);
    auto solo = GenerateAll(*solo_loop, std::span<const Request>(&reqs[i], 1));
    ASSERT_TRUE(solo.ok()) << solo.status();
    EXPECT_EQ(got[i], (*solo)[0].samples[0].tokens) << "request " << i;
  }
  // The system prompt was computed once: all the prompt tokens computed fit the budget, which
  // is short of two copies of it.
  EXPECT_LE(loop->stats().prefill_tokens, budget);
  EXPECT_EQ(loop->tree().Stats().chunks_live, 0);
}

}  // namespace
}  // namespace banyan::scheduler
