// Draft heads (engine/speculative/draft_heads.h) on the bundled stories260K with its shipped
// heads: the loader's checks, and drafts equal to the training tool's reference values
// (docs/hydra.md, "Reference values", computed by tools/hydra/eval_acceptance.py in PyTorch).
#include "engine/speculative/draft_heads.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "gtest/gtest.h"
#include "engine/step_runner.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "nlohmann/json.hpp"
#include "tests/testing/bundled_model.h"

namespace banyan::engine {
namespace {

const std::string kDir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K";

class DraftHeadsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { bundle_ = &banyan::testing::BundledModel(); }

  // The final-norm hidden state at the prompt's last token, and the base model's next token.
  void Hidden(const std::vector<int32_t>& prompt, std::vector<float>* h, int32_t* next) {
    auto backend = *CpuBackend::Create(&bundle_->weights, {.num_chunks = 64, .chunk_size = 16});
    auto pool = *kvcache::ChunkPool::Create(64, 16);
    kvcache::PrefixTree tree(&pool);
    auto placed = tree.Insert("", prompt);
    ASSERT_TRUE(placed.ok());
    // The engine's own step: StepRunner builds the prefill row from the tree.
    const CpuBackend* cpu = backend.get();
    StepRunner runner(backend.get(), &tree, AttentionMode::kTpp);
    const int32_t len = static_cast<int32_t>(prompt.size());
    const PrefillItem item{.seq = placed->seq, .begin = 0, .end = len, .cached_end = 0,
                           .want_logits = true, .samples = {}};
    StepOutput out;
    ASSERT_TRUE(runner.RunLogits({}, {}, std::span<const PrefillItem>(&item, 1), &out).ok());
    const std::vector<float>& logits = out.logits;
    *h = cpu->last_hidden();
    ASSERT_EQ(h->size(), static_cast<size_t>(bundle_->weights.config.dim));
    *next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  static const model::ModelBundle* bundle_;
};
const model::ModelBundle* DraftHeadsTest::bundle_ = nullptr;

TEST_F(DraftHeadsTest, ShippedHeadsDraftTheReferenceTokens) {
  struct Case {
    const char* config;
    DraftHeadKind kind;
    std::vector<int32_t> chain, head0_top4;
  };
  // "Once upon a time": ids 1 403 407 261 378, base next token 432.
  const Case cases[] = {
      {"config.json", DraftHeadKind::kHydra, {383, 286, 261, 376}, {383, 322, 358, 353}},
      {"medusa_config.json", DraftHeadKind::kMedusa, {383, 286, 261, 376}, {383, 261, 312, 322}},
  };
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  EXPECT_EQ(bundle_->tokenizer->Encode("Once upon a time", true), prompt);
  std::vector<float> h;
  int32_t next = -1;
  Hidden(prompt, &h, &next);
  EXPECT_EQ(next, 432);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config);
    auto heads = DraftHeads::Load(kDir + "/hydra/" + c.config, bundle_->weights);
    ASSERT_TRUE(heads.ok()) << heads.status();
    EXPECT_EQ(heads->kind(), c.kind);
    EXPECT_EQ(heads->num_heads(), 4);
    auto chain = heads->Chain(h, next);
    ASSERT_TRUE(chain.ok()) << chain.status();
    EXPECT_EQ(*chain, c.chain);
    const int32_t branching[] = {4, 2, 2};
    auto tree = heads->BuildTree(h, next, branching);
    ASSERT_TRUE(tree.ok()) << tree.status();
    ASSERT_EQ(tree->token.size(), 1u + 4 + 8 + 16);
    EXPECT_EQ(tree->token[0], next);
    EXPECT_EQ(std::vector<int32_t>(tree->token.begin() + 1, tree->token.begin() + 5),
              c.head0_top4);
    for (size_t i = 1; i < tree->token.size(); ++i) {
      EXPECT_EQ(tree->depth[i], tree->depth[tree->parent[i]] + 1);
    }
  }
}

// The batched float drafter the engine loop uses agrees with the double-precision reference
// chain and tree, sample by sample, for chains of every length and several trees; bad shapes
// are refused.
TEST_F(DraftHeadsTest, ChainBatchMatchesChain) {
  const char* texts[] = {"Once upon a time", "The little dog", "Lily and her mom went to",
                         "One day, a big red ball", "Tom had a toy car. He liked to"};
  std::vector<float> hs;
  std::vector<int32_t> roots;
  for (const char* t : texts) {
    std::vector<float> h;
    int32_t next = -1;
    Hidden(bundle_->tokenizer->Encode(t, true), &h, &next);
    hs.insert(hs.end(), h.begin(), h.end());
    roots.push_back(next);
  }
  const size_t dim = static_cast<size_t>(bundle_->weights.config.dim);
  for (const char* config : {"config.json", "medusa_config.json"}) {
    SCOPED_TRACE(config);
    auto heads = DraftHeads::Load(kDir + "/hydra/" + config, bundle_->weights);
    ASSERT_TRUE(heads.ok()) << heads.status();
    for (int length = 1; length <= heads->num_heads(); ++length) {
      std::vector<int32_t> batch;
      ASSERT_TRUE(heads->ChainBatch(hs, roots, length, &batch).ok());
      ASSERT_EQ(batch.size(), roots.size() * length);
      for (size_t i = 0; i < roots.size(); ++i) {
        auto chain = heads->Chain(std::span<const float>(hs).subspan(i * dim, dim), roots[i]);
        ASSERT_TRUE(chain.ok());
        EXPECT_EQ(std::vector<int32_t>(batch.begin() + i * length, batch.begin() + (i + 1) * length),
                  std::vector<int32_t>(chain->begin(), chain->begin() + length))
            << "sample " << i << ", length " << length;
      }
    }
    // Trees too: the batched float drafter against the double-precision reference, per sample.
    for (const std::vector<int32_t>& branching :
         {std::vector<int32_t>{4, 2, 2}, std::vector<int32_t>{2, 2}, std::vector<int32_t>{3, 1, 2},
          std::vector<int32_t>{1, 1, 1, 1}}) {
      std::vector<DraftHeads::Tree> trees;
      ASSERT_TRUE(heads->TreeBatch(hs, roots, branching, &trees).ok());
      ASSERT_EQ(trees.size(), roots.size());
      for (size_t i = 0; i < roots.size(); ++i) {
        auto ref = heads->BuildTree(std::span<const float>(hs).subspan(i * dim, dim), roots[i],
                                    branching);
        ASSERT_TRUE(ref.ok());
        EXPECT_EQ(trees[i].token, ref->token) << "sample " << i << ", " << branching.size();
        EXPECT_EQ(trees[i].parent, ref->parent);
        EXPECT_EQ(trees[i].depth, ref->depth);
      }
    }
    std::vector<DraftHeads::Tree> bad_trees;
    EXPECT_FALSE(heads->TreeBatch(hs, roots, std::vector<int32_t>{2, 0}, &bad_trees).ok());
    std::vector<int32_t> out;
    EXPECT_FALSE(heads->ChainBatch(hs, roots, heads->num_heads() + 1, &out).ok());
    EXPECT_FALSE(heads->ChainBatch(std::span<const float>(hs).subspan(1), roots, 1, &out).ok());
  }
}

// Every refusal names what does not fit.
TEST_F(DraftHeadsTest, LoaderRefusesHeadsThatDoNotFit) {
  const std::string dir = ::testing::TempDir() + "/draft_heads_test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/hydra/heads.safetensors", dir + "/heads.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(kDir + "/hydra/config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {[](nlohmann::json& c) { c["format_version"] = 2; }, "format_version"},
      {[](nlohmann::json& c) { c["kind"] = "eagle"; }, "kind"},
      {[](nlohmann::json& c) { c["base_model"]["dim"] = 4096; }, "base_model.dim"},
      {[](nlohmann::json& c) { c["base_model"]["vocab_size"] = 32000; }, "base_model.vocab_size"},
      {[](nlohmann::json& c) { c["mlp_hidden"] = 256; }, "heads.0.fc1.weight"},
      {[](nlohmann::json& c) { c["num_heads"] = 5; }, "num_heads"},
      {[](nlohmann::json& c) { c["kind"] = "medusa"; }, "input_size"},
      {[](nlohmann::json& c) { c["tensors_file"] = "missing.safetensors"; }, "missing"},
  };
  for (const Case& c : cases) {
    nlohmann::json cfg = good;
    c.edit(cfg);
    std::ofstream(dir + "/config.json") << cfg.dump();
    auto heads = DraftHeads::Load(dir + "/config.json", bundle_->weights);
    ASSERT_FALSE(heads.ok()) << c.message;
    EXPECT_NE(heads.status().message().find(c.message), std::string::npos) << heads.status();
  }
  std::ofstream(dir + "/config.json") << good.dump();
  EXPECT_TRUE(DraftHeads::Load(dir + "/config.json", bundle_->weights).ok());
}

}  // namespace
}  // namespace banyan::engine
