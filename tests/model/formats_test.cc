// The bundled stories260K in its three formats must load to identical weights.
#include <cmath>
#include <map>

#include "common/check.h"
#include "model/dtype.h"
#include "model/dummy_weights.h"
#include "model/gguf_loader.h"
#include "model/llama2c_loader.h"
#include "model/model_io.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

using testing::ExpectSameTensor;
using testing::ExpectSameWeights;
using testing::ModelFile;
using testing::TempDir;

ModelWeights LoadBin() {
  absl::StatusOr<ModelWeights> w = LoadLlama2c(ModelFile("stories260K.bin"));
  BANYAN_CHECK(w.ok()) << w.status().ToString();
  return *std::move(w);
}

TEST(Llama2cLoader, LoadsStories260K) {
  ModelWeights w = LoadBin();
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_TRUE(w.lm_head.data.empty());
  EXPECT_EQ(w.layers[0].wk.shape, (std::vector<int64_t>{32, 64}));
  // RMSNorm weights of a trained model are O(1), far from the init of exactly 1.
  EXPECT_GT(std::abs(w.final_norm.data[0]), 0.1f);
  EXPECT_TRUE(ValidateWeights(w).ok());
}

TEST(GgufLoader, MatchesLlama2cExactly) {
  text::SpmVocab vocab;
  absl::StatusOr<ModelWeights> g = LoadGguf(ModelFile("stories260K.gguf"), &vocab);
  ASSERT_TRUE(g.ok()) << g.status();
  ModelWeights b = LoadBin();
  const ModelConfig &gc = g->config, &bc = b.config;
  EXPECT_EQ(gc.dim, bc.dim);
  EXPECT_EQ(gc.hidden_dim, bc.hidden_dim);
  EXPECT_EQ(gc.n_layers, bc.n_layers);
  EXPECT_EQ(gc.n_heads, bc.n_heads);
  EXPECT_EQ(gc.n_kv_heads, bc.n_kv_heads);
  EXPECT_EQ(gc.vocab_size, bc.vocab_size);
  EXPECT_EQ(gc.rope_theta, bc.rope_theta);
  EXPECT_EQ(gc.norm_eps, bc.norm_eps);
  EXPECT_EQ(gc.bos_id, bc.bos_id);
  EXPECT_EQ(gc.eos_id, bc.eos_id);
  EXPECT_EQ(gc.max_seq_len, 2048);  // the GGUF's metadata says so; the .bin says 512
  EXPECT_FALSE(gc.tie_embeddings);  // the GGUF stores output.weight as a copy
  // Both are in the interleaved order already, so no permutation is needed to compare.
  ASSERT_EQ(gc.rope_style, RopeStyle::kInterleaved);
  ASSERT_EQ(bc.rope_style, RopeStyle::kInterleaved);
  ExpectSameWeights(*g, b);

  EXPECT_EQ(vocab.pieces.size(), 512u);
  EXPECT_EQ(vocab.scores.size(), 512u);
  EXPECT_EQ(vocab.pieces[1], "<s>");
  EXPECT_EQ(vocab.pieces[3], "<0x00>");
  EXPECT_EQ(vocab.types[0], text::PieceType::kUnknown);
  EXPECT_EQ(vocab.types[1], text::PieceType::kControl);
  EXPECT_EQ(vocab.types[3], text::PieceType::kByte);
  EXPECT_EQ(vocab.types[300], text::PieceType::kNormal);
  EXPECT_TRUE(vocab.byte_fallback);
  EXPECT_EQ(vocab.unk_id, 0);
  EXPECT_EQ(vocab.bos_id, 1);
  EXPECT_EQ(vocab.eos_id, 2);
  EXPECT_EQ(vocab.pad_id, -1);
  EXPECT_EQ(vocab.model_type, text::SpmModelType::kBpe);
}

TEST(LoadModel, DispatchesOnFormat) {
  absl::StatusOr<ModelWeights> b = LoadModel(ModelFile("stories260K.bin"));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<ModelWeights> g = LoadModel(ModelFile("stories260K.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectSameWeights(*b, *g);
  TempDir dir;
  ASSERT_TRUE(WriteHfFolder(*b, dir.path()).ok());
  absl::StatusOr<ModelWeights> h = LoadModel(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->config.rope_style, RopeStyle::kHalf);
  EXPECT_EQ(h->source, dir.path());
}

TEST(HfWriter, F32RoundTripIsExact) {
  const ModelWeights b = LoadBin();
  TempDir dir;
  ASSERT_TRUE(WriteHfFolder(b, dir.path(), HfDtype::kF32).ok());
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->config.rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(h->config.tie_embeddings);
  EXPECT_EQ(h->config.max_seq_len, 512);
  EXPECT_EQ(h->config.norm_eps, 1e-5f);
  EXPECT_EQ(h->config.rope_theta, 10000.0f);
  EXPECT_EQ(h->config.n_kv_heads, 4);
  // The written Wq differs from the source (rows permuted) ...
  EXPECT_NE(h->layers[0].wq.data, b.layers[0].wq.data);
  // ... V, O and the MLP do not.
  ExpectSameTensor(h->layers[0].wv, b.layers[0].wv, "wv");
  // Permuting back gives the source exactly.
  ConvertRopeStyle(*h, RopeStyle::kInterleaved);
  ExpectSameWeights(*h, b);

  const nlohmann::json cfg = nlohmann::json::parse(testing::ReadBytes(dir.File("config.json")));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["hidden_act"], "silu");
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  EXPECT_EQ(cfg["rms_norm_eps"].get<double>(), 1e-5);  // written as 1e-05, not 9.99999974e-06
  EXPECT_TRUE(cfg["rope_scaling"].is_null());
}

TEST(HfWriter, GgufToHfMatchesLlama2cToHf) {
  absl::StatusOr<ModelWeights> g = LoadGguf(ModelFile("stories260K.gguf"), nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  TempDir dir;
  ASSERT_TRUE(WriteHfFolder(*g, dir.path()).ok());
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_FALSE(h->config.tie_embeddings);
  ModelWeights b = LoadBin();
  ConvertRopeStyle(b, RopeStyle::kHalf);  // the other direction this time
  ExpectSameWeights(*h, b);
}

// Narrow dtypes: the loader must widen exactly what the writer narrowed.
void CheckNarrowRoundTrip(HfDtype dtype, float rel_tol) {
  const ModelWeights b = LoadBin();
  TempDir dir;
  ASSERT_TRUE(WriteHfFolder(b, dir.path(), dtype).ok());
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  ConvertRopeStyle(*h, RopeStyle::kInterleaved);
  for (const TensorSlot& slot : ListTensorSlots(b.config)) {
    const Tensor& src = SlotTensor(b, slot);
    const Tensor& got = SlotTensor(*h, slot);
    ASSERT_EQ(src.shape, got.shape) << SlotName(slot);
    std::vector<float> expect(src.data.size());
    std::vector<uint16_t> narrow(src.data.size());
    ConvertFromFloat(dtype, src.data.data(), src.data.size(), narrow.data());
    ConvertToFloat(dtype, narrow.data(), narrow.size(), expect.data());
    for (size_t i = 0; i < src.data.size(); ++i) {
      ASSERT_EQ(got.data[i], expect[i]) << SlotName(slot) << "[" << i << "]";
      ASSERT_LE(std::abs(got.data[i] - src.data[i]), rel_tol * std::abs(src.data[i]) + 1e-7f)
          << SlotName(slot) << "[" << i << "]";
    }
  }
}

TEST(HfWriter, Bf16RoundTripWithinTolerance) { CheckNarrowRoundTrip(HfDtype::kBF16, 1.0f / 256); }
TEST(HfWriter, F16RoundTripWithinTolerance) { CheckNarrowRoundTrip(HfDtype::kF16, 1.0f / 2048); }

TEST(HfLoader, ShardedIndex) {
  const ModelWeights b = LoadBin();
  TempDir dir;
  std::vector<testing::RawEntry> entries = testing::HfEntries(b);
  const size_t half = entries.size() / 2;
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (size_t i = 0; i < entries.size(); ++i) {
    index["weight_map"][entries[i].name] =
        i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  testing::WriteBytes(dir.File("model-00001-of-00002.safetensors"),
                      testing::SafetensorsBytes({entries.begin(), entries.begin() + half}));
  testing::WriteBytes(dir.File("model-00002-of-00002.safetensors"),
                      testing::SafetensorsBytes({entries.begin() + half, entries.end()}));
  testing::WriteBytes(dir.File("model.safetensors.index.json"), index.dump());
  testing::WriteBytes(dir.File("config.json"), testing::HfConfigJson(b.config));
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  ExpectSameWeights(*h, b);  // entries were not permuted; the bytes come back as written
}

TEST(HfLoader, EosListAndDefaults) {
  absl::StatusOr<ModelConfig> c = ParseHfConfig(R"({
      "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
      "num_attention_heads": 8, "vocab_size": 512, "eos_token_id": [7, 9],
      "rope_scaling": null, "torch_dtype": "bfloat16"})",
                                                "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_id, 7);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->max_seq_len, 2048);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
}

// Synthetic GGUFs in each supported tensor type, and GGUF v2.
TEST(GgufLoader, SyntheticF16Bf16AndV2) {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.max_seq_len = 64;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-6f;
  const ModelWeights src = MakeDummyWeights(c, 5);
  struct Case {
    uint32_t type;
    uint32_t version;
    WeightDtype dtype;
  };
  for (const Case& k : {Case{testing::kGgmlF32, 2, WeightDtype::kF32},
                        Case{testing::kGgmlF16, 3, WeightDtype::kF16},
                        Case{testing::kGgmlBF16, 3, WeightDtype::kBF16}}) {
    TempDir dir;
    const std::string path = dir.File("m.gguf");
    const std::string tmpl = k.version == 3 ? "{{ bos_token }}{% for m in messages %}..." : "";
    testing::WriteBytes(path, testing::GgufFromWeights(src, k.type, "", 0, k.version, nullptr, tmpl));
    text::SpmVocab vocab;
    std::string chat_template = "unset";
    absl::StatusOr<ModelWeights> g = LoadGguf(path, &vocab, nullptr, &chat_template);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(chat_template, tmpl);  // tokenizer.chat_template, empty when absent
    EXPECT_EQ(g->config.rope_theta, 500000.0f);
    EXPECT_EQ(g->config.norm_eps, 1e-6f);
    EXPECT_FALSE(g->config.tie_embeddings);
    EXPECT_EQ(vocab.pieces.size(), 40u);
    EXPECT_EQ(vocab.scores[5], -5.0f);
    EXPECT_FALSE(vocab.byte_fallback);
    for (const TensorSlot& slot : ListTensorSlots(c)) {
      const Tensor& s = SlotTensor(src, slot);
      std::vector<uint16_t> narrow(s.data.size());
      Tensor expect = s;
      if (k.dtype != WeightDtype::kF32) {
        ConvertFromFloat(k.dtype, s.data.data(), s.data.size(), narrow.data());
        ConvertToFloat(k.dtype, narrow.data(), narrow.size(), expect.data.data());
      }
      ExpectSameTensor(SlotTensor(*g, slot), expect, SlotName(slot));
    }
  }
}

}  // namespace
}  // namespace banyan::model
