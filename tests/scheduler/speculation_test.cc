// Speculative decoding in the engine loop, on the bundled model: candidate chains from its
// trained Hydra heads (and from prompt lookup) verified through the prefix tree must leave every
// greedy output exactly as it is without speculation (tokens, text, finish reasons, usage), with
// and without the CPU a step ahead, with shared prefixes, n > 1, stop strings and preemption;
// and the candidates must actually be accepted (not a loop that silently never speculates).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "gtest/gtest.h"
#include "scheduler/generate.h"
#include "tests/scheduler/speculation_util.h"

namespace banyan::scheduler {
namespace {

const std::string kDir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K";

class SpeculationTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    auto b = engine::LoadModelBundle(kDir + "/stories260K.bin");
    ASSERT_TRUE(b.ok()) << b.status();
    bundle_ = new engine::ModelBundle(std::move(*b));
    auto h = engine::DraftHeads::Load(kDir + "/hydra/config.json", bundle_->weights);
    ASSERT_TRUE(h.ok()) << h.status();
    heads_ = new engine::DraftHeads(std::move(*h));
  }
  static void TearDownTestSuite() {
    delete heads_;
    delete bundle_;
  }

  Request Make(const std::string& text, int max_tokens) {
    Request r;
    r.id = absl::StrCat("s", ++ids_);
    r.prompt = bundle_->tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    return r;
  }

  std::vector<Request> Mix() {
    std::vector<Request> reqs;
    const char* texts[] = {"Once upon a time", "The little dog", "Lily and her mom went to",
                           "One day, a big red ball", "Tom had a toy car. He liked to"};
    for (int i = 0; i < 12; ++i) {
      Request r = Make(texts[i % 5], 12 + 7 * i);
      if (i % 5 == 2) r.n = 2;                     // greedy samples sharing everything
      if (i % 4 == 3) r.stop = {"the", "Max"};     // stop strings inside accepted chains
      if (i == 9) r.params.ignore_eos = true;
      if (i % 6 == 5) {                            // sampled: never speculates, shares the steps
        r.params.temperature = 0.8f;
        r.params.seed = 7 + i;
        r.params.has_seed = true;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  absl::StatusOr<std::vector<GenerationResult>> Run(const std::vector<Request>& reqs,
                                                    LoopOptions o, int chunks,
                                                    MetricsSnapshot* metrics = nullptr) {
    return testing::RunOnCpu(bundle_->weights, bundle_->tokenizer.get(), reqs, o, chunks, metrics);
  }

  static engine::ModelBundle* bundle_;
  static engine::DraftHeads* heads_;
  int ids_ = 0;
};
engine::ModelBundle* SpeculationTest::bundle_ = nullptr;
engine::DraftHeads* SpeculationTest::heads_ = nullptr;

TEST_F(SpeculationTest, HydraHeadsKeepGreedyOutputExactly) {
  const std::vector<Request> reqs = Mix();
  for (int overlap : {0, 1}) {
    for (int chunks : {512, 48}) {  // 48 chunks of 16: preemption with chains in the tree
      LoopOptions off{.max_running_sequences = 16, .prefill_token_budget = 64,
                      .overlap = overlap};
      auto plain = Run(reqs, off, chunks);
      ASSERT_TRUE(plain.ok()) << plain.status();
      LoopOptions on = off;
      on.speculation = LoopOptions::Speculation::kHeads;
      on.draft_heads = heads_;
      on.draft_tokens = 3;
      on.speculation_max_rows = 64;
      MetricsSnapshot m;
      auto spec = Run(reqs, on, chunks, &m);
      ASSERT_TRUE(spec.ok()) << spec.status();
      const std::string what = absl::StrCat("overlap ", overlap, " chunks ", chunks);
      testing::ExpectSameResults(*plain, *spec, what);
      EXPECT_GT(m.spec_drafts_total, 0) << what;
      EXPECT_GT(m.spec_accepted_tokens_total, 0) << what;
      EXPECT_LE(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
      EXPECT_LE(m.spec_accepted_per_position[1], m.spec_accepted_per_position[0]);
      int32_t drafted = 0, accepted = 0;
      for (const GenerationResult& g : *spec) {
        drafted += g.usage.draft_tokens;
        accepted += g.usage.accepted_draft_tokens;
      }
      EXPECT_EQ(drafted, m.spec_draft_tokens_total);
      EXPECT_EQ(accepted, m.spec_accepted_tokens_total);
      std::printf("[%s] %s\n", what.c_str(), testing::SpecSummary(m).c_str());
    }
  }
}

// Prompt lookup drafts a repeated request's own earlier continuation: the second run of the same
// greedy requests accepts every candidate, and the outputs stay the same.
TEST_F(SpeculationTest, LookupAcceptsARepeatedRequestWhole) {
  std::vector<Request> reqs;
  for (const char* t : {"Once upon a time", "The little dog ran"}) {
    Request r = Make(t, 40);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  auto backend = engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 256, .chunk_size = 16});
  ASSERT_TRUE(backend.ok());
  LoopOptions o{.max_running_sequences = 16, .prefill_token_budget = 64};
  o.speculation = LoopOptions::Speculation::kLookup;
  o.draft_tokens = 4;
  EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend), o);
  auto first = GenerateAll(loop, reqs);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(loop.metrics().spec_drafts_total, 0);  // nothing to look up yet
  auto second = GenerateAll(loop, reqs);
  ASSERT_TRUE(second.ok()) << second.status();
  testing::ExpectSameResults(*first, *second, "lookup");
  const MetricsSnapshot& m = loop.metrics();
  EXPECT_GT(m.spec_draft_tokens_total, 0);
  EXPECT_EQ(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
  // 40 tokens in chains of 1 + 4: about 8 steps per request instead of 40.
  EXPECT_LE(m.spec_drafts_total, 2 * 9);
  EXPECT_TRUE(loop.tree().CheckInvariants().ok()) << loop.tree().CheckInvariants();
}

}  // namespace
}  // namespace banyan::scheduler
