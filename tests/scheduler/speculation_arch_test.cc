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
//    request) and one request alone, decoded without speculation, with the heads (CPU a step
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
#include "engine/model/dummy_weights.h"
#include "engine/model/model_io.h"
#include "engine/model/safetensors_file.h"
#include "engine/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/generate.h"
#include "tests/engine/model/test_util.h"
#include "tests/scheduler/speculation_util.h"

namespace banyan::scheduler {
namespace {

using engine::ModelConfig;
using engine::ModelWeights;
using engine::Tensor;

// Its 512 pieces fix the models' vocabulary.
const std::string kTokenizer = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/tok512.model";

// The architectures, by the names the test instances carry.
ModelConfig ArchConfig(const std::string& name) {
  ModelConfig c = engine::testing::SmallArchConfig(name == "llama3" ? "llama" : name);
  c.vocab_size = 512;
  c.max_seq_len = 256;
  if (name == "llama3") {
    c.n_heads = 8;  // head_dim 8, 4 query heads per KV head
    c.rope_theta = 500000.0f;
    // Wavelengths on both sides of the blend band, and inside it.
    c.rope_scaling.type = engine::RopeScalingType::kLlama3;
    c.rope_scaling.factor = 8.0f;  // low / high_freq_factor 1 / 4 and 8192: Llama 3.1's
    c.stop_ids = {2, 7};
  }
  c.tie_embeddings = name == "llama3" || name == "qwen2";
  return c;
}

// Uniform in [-scale, scale), from mt19937 (whose sequence the standard fixes, unlike the
// distributions').
void FillUniform(std::mt19937& rng, float scale, Tensor* t) {
  t->data.resize(static_cast<size_t>(t->numel()));
  for (float& x : t->data) x = scale * (static_cast<float>(rng() >> 8) * 0x1p-23f - 1.0f);
}

// A random Hydra head set for `base` in `dir`: config.json and heads.safetensors (docs/hydra.md,
// "File format"; the tensors through the model writer's WriteSafetensors). Matrices have
// variance 1 / fan-in, biases are small. Returns the config's path.
absl::StatusOr<std::string> WriteRandomHydraHeads(const ModelWeights& base, const std::string& dir,
                                                  int num_heads, int mlp_hidden, uint32_t seed) {
  const ModelConfig& c = base.config;
  std::mt19937 rng(seed);
  std::vector<Tensor> tensors(4 * static_cast<size_t>(num_heads));
  std::vector<engine::SafetensorsItem> items;
  nlohmann::ordered_json heads = nlohmann::ordered_json::array();
  for (int i = 0; i < num_heads; ++i) {
    const int input_size = (i + 2) * c.dim;
    const std::string p = absl::StrCat("heads.", i, ".");
    const struct {
      std::string name;
      std::vector<int64_t> shape;
      float scale;
    } specs[] = {{p + "fc1.weight", {mlp_hidden, input_size}, std::sqrt(3.0f / input_size)},
                 {p + "fc1.bias", {mlp_hidden}, 0.1f},
                 {p + "fc2.weight", {c.dim, mlp_hidden}, std::sqrt(3.0f / mlp_hidden)},
                 {p + "fc2.bias", {c.dim}, 0.1f}};
    nlohmann::ordered_json shapes;
    nlohmann::ordered_json inputs = {"hidden"};
    for (int k = 0; k <= i; ++k) inputs.push_back(absl::StrCat("embed(x[t+", k + 1, "])"));
    for (int k = 0; k < 4; ++k) {
      Tensor& t = tensors[4 * static_cast<size_t>(i) + k];
      t.shape = specs[k].shape;
      FillUniform(rng, specs[k].scale, &t);
      items.push_back({specs[k].name, &t, nullptr});
      shapes[specs[k].name] = specs[k].shape;
    }
    heads.push_back({{"index", i},
                     {"predicts", absl::StrCat("x[t+", i + 2, "]")},
                     {"inputs", inputs},
                     {"input_size", input_size},
                     {"tensors", shapes}});
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (absl::Status s =
          engine::WriteSafetensors(dir + "/heads.safetensors", items, engine::WeightDtype::kF32);
      !s.ok()) {
    return s;
  }
  const nlohmann::ordered_json config = {
      {"format", "banyan-draft-heads"},
      {"format_version", 1},
      {"kind", "hydra"},
      {"tensors_file", "heads.safetensors"},
      {"dtype", "F32"},
      {"base_model",
       {{"dim", c.dim},
        {"hidden_dim", c.hidden_dim},
        {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"vocab_size", c.vocab_size},
        {"max_seq_len", c.max_seq_len},
        {"tie_embeddings", c.tie_embeddings},
        {"head_dim", c.head_dim()},
        {"norm_eps", c.norm_eps},
        {"rope_theta", c.rope_theta},
        {"rope_style", "half"},
        {"bos_id", c.bos_id},
        {"eos_id", c.eos_id},
        {"file", base.source}}},
      {"num_heads", num_heads},
      {"dim", c.dim},
      {"mlp_hidden", mlp_hidden},
      {"activation", "silu"},
      {"hidden_state", "final_norm_output"},
      {"embedding", "base_tok_embeddings"},
      {"output_projection", "base_lm_head"},
      {"residual", "hidden"},
      {"heads", heads},
      {"training", {{"command", "random weights (speculation_arch_test)"}, {"seed", seed}}}};
  const std::string path = dir + "/config.json";
  std::ofstream out(path, std::ios::trunc);
  out << config.dump(2) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return path;
}

class SpeculationArchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const ModelConfig config = ArchConfig(GetParam());
    const std::string model_dir = dir_.File("model");
    ASSERT_TRUE(engine::WriteHfFolder(engine::MakeDummyWeights(config, 11), model_dir).ok());
    std::filesystem::copy_file(kTokenizer, model_dir + "/tokenizer.model");
    auto bundle = engine::LoadModelBundle(model_dir);
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

  engine::testing::TempDir dir_;
  engine::ModelBundle bundle_;
  std::optional<engine::DraftHeads> heads_;
  int ids_ = 0;
};

// Plain and Hydra decoding of `reqs` on a fresh loop each, token for token the same; every
// request drafted. Returns the speculating run's counters.
MetricsSnapshot ExpectHeadsKeepOutput(const engine::ModelBundle& bundle,
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
// architecture preempts at some of these sizes). The n = 2 request's greedy samples draft the
// same chain, so the second one's candidates reuse the first one's node; cutting the rejected
// ones splits that node, which needs a chunk a full pool may not have: the loop then takes the
// verified tokens and preempts the request (this once aborted in PrefixTree::Split).
TEST_P(SpeculationArchTest, HydraHeadsKeepGreedyOutputUnderPreemption) {
  std::vector<Request> reqs = SharedPrefixBatch();
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
