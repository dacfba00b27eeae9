// Speculative decoding on random-weight Hugging Face models of every architecture banyan loads
// (issue 12: greedy output with speculation on is identical to speculation off, on the CPU,
// alone and in shared-prefix batches). Per architecture, Llama 3.x (GQA 4:1, llama3 RoPE
// scaling, several stop ids, tied), Qwen 2.5 (q/k/v biases, tied), Qwen 3 (q/k norms, head_dim
// 32 != dim / heads, untied) and Mistral (untied):
//  - random weights written as a Hugging Face folder (WriteHfFolder) with the bundled tok512 as
//    its tokenizer.model, loaded as banyand loads a folder (LoadModelBundle);
//  - a random Hydra head set written in the draft-head format (docs/hydra.md) and accepted by
//    DraftHeads::Load;
//  - greedy requests, a shared-prefix batch (a long common prompt, distinct suffixes, one n = 2
//    request: one sequence, its tokens sent to both choices) and one request alone, decoded without speculation, with the heads (CPU a step
//    ahead off and on), and with prompt lookup (each load twice): token for token the same.
//    (With a KV cache small enough to preempt, the heads abort the loop: see the disabled
//    test's comment.)
// Random heads rarely agree with a random model, so the heads runs check that every request
// drafted; lookup on a repeated load accepts every candidate, so the accept path (placing
// cached candidates, multi-token takes) runs on every architecture too.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/dummy_weights.h"
#include "model/model_io.h"
#include "model/safetensors_file.h"
#include "model/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "engine/speculative/random_heads.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/generate.h"
#include "tests/model/test_util.h"
#include "tests/scheduler/speculation_util.h"

namespace banyan::scheduler {
namespace {

using model::ModelConfig;
using model::ModelWeights;
using engine::WriteRandomHydraHeads;

// Its 512 pieces fix the models' vocabulary.
const std::string kTokenizer = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/tok512.model";

// The architectures, by the names the test instances carry.
ModelConfig ArchConfig(const std::string& name) {
  ModelConfig c = model::testing::SmallArchConfig(name == "llama3" ? "llama" : name);
  c.vocab_size = 512;
  c.max_seq_len = 256;
  if (name == "llama3") {
    c.n_heads = 8;  // head_dim 8, 4 query heads per KV head
    c.rope_theta = 500000.0f;
    // Wavelengths on both sides of the blend band, and inside it.
    c.rope_scaling.type = model::RopeScalingType::kLlama3;
    c.rope_scaling.factor = 8.0f;  // low / high_freq_factor 1 / 4 and 8192: Llama 3.1's
    c.stop_ids = {2, 7};
  }
  c.tie_embeddings = name == "llama3" || name == "qwen2";
  return c;
}

// Uniform in [-scale, scale), from mt19937 (whose sequence the standard fixes, unlike the
// distributions').

class SpeculationArchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const ModelConfig config = ArchConfig(GetParam());
    const std::string model_dir = dir_.File("model");
    ASSERT_TRUE(model::WriteHfFolder(model::MakeDummyWeights(config, 11), model_dir).ok());
    std::filesystem::copy_file(kTokenizer, model_dir + "/tokenizer.model");
    auto bundle = model::LoadModelBundle(model_dir);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = std::move(*bundle);
    // The architecture's features survived the round trip through config.json.
    const ModelConfig& got = bundle_.weights.config;
    EXPECT_EQ(got.arch, config.arch);
    EXPECT_EQ(got.qkv_bias, config.qkv_bias);
    EXPECT_EQ(got.qk_norm, config.qk_norm);
    EXPECT_EQ(got.head_dim(), config.head_dim());
    EXPECT_EQ(got.n_kv_heads, config.n_kv_heads);
    EXPECT_EQ(got.tie_embeddings, config.tie_embeddings);
    EXPECT_EQ(got.rope_scaling.type, config.rope_scaling.type);
    EXPECT_EQ(got.stop_ids, config.stop_ids);

    auto heads_config = WriteRandomHydraHeads(bundle_.weights, dir_.File("hydra"), /*num_heads=*/3,
                                              /*mlp_hidden=*/48, /*seed=*/5);
    ASSERT_TRUE(heads_config.ok()) << heads_config.status();
    auto heads = engine::DraftHeads::Load(*heads_config, bundle_.weights);
    ASSERT_TRUE(heads.ok()) << heads.status();
    EXPECT_EQ(heads->kind(), engine::DraftHeadKind::kHydra);
    EXPECT_EQ(heads->num_heads(), 3);
    heads_.emplace(std::move(*heads));
  }

  Request Make(const std::string& text, int max_tokens, int n = 1) {
    Request r;
    r.id = absl::StrCat("a", ++ids_);
    r.prompt = bundle_.tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.n = n;
    return r;
  }

  // Four requests behind one long prompt prefix (several KV chunks), one of them n = 2; half
  // ignore EOS so that they run to max_tokens whatever the random model emits.
  std::vector<Request> SharedPrefixBatch() {
    const std::string prefix =
        "Once upon a time, in a little house by the sea, there lived a girl named Lily who "
        "loved to read books about the stars and the moon. Every night she looked at the sky and";
    const char* suffixes[] = {" made a wish.", " saw a big bird fly by.",
                              " sang a song to her cat.", " counted the stars with her dad."};
    std::vector<Request> reqs;
    for (int i = 0; i < 4; ++i) {
      Request r = Make(prefix + suffixes[i], 18 + 7 * i, i == 3 ? 2 : 1);
      r.params.ignore_eos = i % 2 == 0;
      reqs.push_back(r);
    }
    EXPECT_GT(reqs[0].prompt.size(), 48u);  // the shared part spans several 16-token chunks
    return reqs;
  }

  std::vector<Request> Alone() {
    Request r = Make("Tom had a toy car. He liked to", 40);
    r.params.ignore_eos = true;
    return {r};
  }

  static LoopOptions Options(int overlap) {
    return LoopOptions{.max_running_sequences = 16,
                       .prefill_token_budget = 64,
                       .overlap = overlap,
                       .speculation_max_rows = 64,
                       .speculation_adaptive = false};
  }

  model::testing::TempDir dir_;
  model::ModelBundle bundle_;
  std::optional<engine::DraftHeads> heads_;
  int ids_ = 0;
};

// Plain and Hydra decoding of `reqs` on a fresh loop each, token for token the same; every
// request drafted. Returns the speculating run's counters.
MetricsSnapshot ExpectHeadsKeepOutput(const model::ModelBundle& bundle,
                                      const engine::DraftHeads& heads,
                                      const std::vector<Request>& reqs, LoopOptions off, int chunks,
                                      const std::string& what) {
  SCOPED_TRACE(what);
  MetricsSnapshot m;
  auto plain = testing::RunOnCpu(bundle.weights, bundle.tokenizer.get(), reqs, off, chunks);
  EXPECT_TRUE(plain.ok()) << plain.status();
  LoopOptions on = off;
  on.speculation = LoopOptions::Speculation::kHeads;
  on.draft_heads = &heads;
  on.draft_tokens = 3;
  auto spec = testing::RunOnCpu(bundle.weights, bundle.tokenizer.get(), reqs, on, chunks, &m);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!plain.ok() || !spec.ok()) return m;
  testing::ExpectSameResults(*plain, *spec, what);
  for (size_t i = 0; i < spec->size(); ++i) {
    EXPECT_GT((*spec)[i].usage.draft_tokens, 0) << what << " request " << i;
  }
  EXPECT_GT(m.spec_draft_tokens_total, 0);
  EXPECT_LE(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
  std::printf("[%s] heads: %s; preemptions %lld\n", what.c_str(), testing::SpecSummary(m).c_str(),
              static_cast<long long>(m.preemptions_total));
  return m;
}

TEST_P(SpeculationArchTest, HydraHeadsKeepGreedyOutputExactly) {
  for (int overlap : {0, 1}) {
    const std::string what = absl::StrCat(GetParam(), ", overlap ", overlap);
    ExpectHeadsKeepOutput(bundle_, *heads_, SharedPrefixBatch(), Options(overlap), 512,
                          what + ", shared prefix");
    ExpectHeadsKeepOutput(bundle_, *heads_, Alone(), Options(overlap), 512, what + ", alone");
  }
}

// The shared-prefix batch, every request long, in KV caches small enough to preempt (each
// architecture preempts at some of these sizes), with the last request asked twice. The two
// greedy sequences of that prompt draft the same chain, so the second one's candidates reuse
// the first one's node; cutting the rejected ones splits that node, which needs a chunk a full
// pool may not have: the loop then takes the verified tokens and preempts the request (this
// once aborted in PrefixTree::Split). (Before greedy n > 1 ran one sequence, the n = 2
// request's two samples made that case.)
TEST_P(SpeculationArchTest, HydraHeadsKeepGreedyOutputUnderPreemption) {
  std::vector<Request> reqs = SharedPrefixBatch();
  reqs.push_back(reqs.back());
  reqs.back().id += "-again";
  reqs.back().n = 1;
  for (Request& r : reqs) {  // all of them long at once
    r.params.max_tokens = 39;
    r.params.ignore_eos = true;
  }
  int64_t preemptions = 0;
  for (int chunks = 16; chunks <= 24; ++chunks) {
    preemptions += ExpectHeadsKeepOutput(bundle_, *heads_, reqs, Options(0), chunks,
                                         absl::StrCat(GetParam(), ", chunks ", chunks))
                       .preemptions_total;
  }
  EXPECT_GT(preemptions, 0);
}

// Prompt lookup on a repeated load: the second run drafts the first run's continuation, every
// candidate is accepted, and the output is still that of plain decoding.
TEST_P(SpeculationArchTest, LookupAcceptsRepeatedLoadsAndKeepsGreedyOutput) {
  const struct {
    const char* what;
    std::vector<Request> reqs;
  } loads[] = {{"shared prefix", SharedPrefixBatch()}, {"alone", Alone()}};
  for (const auto& load : loads) {
    const std::string what = absl::StrCat(GetParam(), " ", load.what);
    SCOPED_TRACE(what);
    auto plain =
        testing::RunOnCpu(bundle_.weights, bundle_.tokenizer.get(), load.reqs, Options(0), 512);
    ASSERT_TRUE(plain.ok()) << plain.status();
    LoopOptions o = Options(0);
    o.speculation = LoopOptions::Speculation::kLookup;
    o.ngram_lookup.max_n = 0;  // the continuations alone (random weights repeat tokens)
    o.draft_tokens = 4;
    auto backend =
        engine::CpuBackend::Create(&bundle_.weights, {.num_chunks = 512, .chunk_size = 16});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EngineLoop loop(bundle_.weights.config, bundle_.tokenizer.get(), std::move(*backend), o);
    auto first = GenerateAll(loop, load.reqs);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(loop.metrics().spec_drafts_total, 0);  // nothing to look up yet
    testing::ExpectSameResults(*plain, *first, what + ", first run");
    auto second = GenerateAll(loop, load.reqs);
    ASSERT_TRUE(second.ok()) << second.status();
    testing::ExpectSameResults(*plain, *second, what + ", second run");
    const MetricsSnapshot& m = loop.metrics();
    for (size_t i = 0; i < second->size(); ++i) {
      EXPECT_GT((*second)[i].usage.accepted_draft_tokens, 0) << "request " << i;
    }
    EXPECT_GT(m.spec_accepted_tokens_total, 0);
    EXPECT_EQ(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
    EXPECT_TRUE(loop.tree().CheckInvariants().ok()) << loop.tree().CheckInvariants();
    std::printf("[%s] lookup: %s\n", what.c_str(), testing::SpecSummary(m).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, SpeculationArchTest,
                         ::testing::Values("llama3", "qwen2", "qwen3", "mistral"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace banyan::scheduler
