// The loaders on the architectures beyond plain Llama: config.json of Llama 3.1 (llama3 RoPE
// scaling, eos list, tied), Qwen 2.5 (q/k/v biases), Qwen 3 (q/k norm, head_dim != hidden /
// heads) and Mistral (sliding window), the refusals naming their field, and round trips of
// dummy weights of each kind through safetensors and GGUF (qwen2 / qwen3 architectures, the
// rope_freqs tensor of Llama 3.1 GGUF files).
#include <string>

#include "model/dummy_weights.h"
#include "model/gguf_loader.h"
#include "model/model_io.h"
#include "model/rope.h"
#include "model/safetensors_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteBytes;

constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
  "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 131072,
  "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
  "bos_token_id": 998, "eos_token_id": [999, 997, 996], "head_dim": 64,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

TEST(ArchConfig, Llama31) {
  absl::StatusOr<ModelConfig> c = ParseHfConfig(kLlama31, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0f);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_scaling.original_max_pos, 8192);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->eos_id, 999);
  EXPECT_EQ(c->stop_ids, (std::vector<int>{999, 997, 996}));
  EXPECT_TRUE(c->IsStop(997) && c->IsStop(996) && c->IsStop(999));
  EXPECT_FALSE(c->IsStop(998));
  EXPECT_EQ(c->head_size, 0);  // 64 == 256 / 4
  EXPECT_FALSE(c->qkv_bias || c->qk_norm);
  // transformers 5 spelling: rope_parameters.
  std::string v5 = kLlama31;
  v5.replace(v5.find("\"rope_scaling\""), 14, "\"rope_parameters\"");
  absl::StatusOr<ModelConfig> c5 = ParseHfConfig(v5, "config.json");
  ASSERT_TRUE(c5.ok()) << c5.status();
  EXPECT_EQ(c5->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(RopeInvFreq(*c5), RopeInvFreq(*c));
}

TEST(ArchConfig, QwenAndMistral) {
  absl::StatusOr<ModelConfig> q2 = ParseHfConfig(R"({
    "model_type": "qwen2", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 500, "max_position_embeddings": 32768, "sliding_window": 4096,
    "use_sliding_window": false, "max_window_layers": 21, "tie_word_embeddings": true,
    "rope_theta": 1000000.0, "bos_token_id": 1, "eos_token_id": 2})", "qwen2.json");
  ASSERT_TRUE(q2.ok()) << q2.status();
  EXPECT_TRUE(q2->qkv_bias);
  EXPECT_FALSE(q2->qk_norm);
  EXPECT_EQ(q2->max_seq_len, 32768);  // the window is off
  absl::StatusOr<ModelConfig> q3 = ParseHfConfig(R"({
    "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 256, "head_dim": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 500, "attention_bias": false, "sliding_window": null,
    "use_sliding_window": false, "eos_token_id": 2})", "qwen3.json");
  ASSERT_TRUE(q3.ok()) << q3.status();
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_FALSE(q3->qkv_bias);
  EXPECT_EQ(q3->head_dim(), 64);
  EXPECT_EQ(q3->head_size, 64);
  const std::string mistral = R"({
    "model_type": "mistral", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 500, "max_position_embeddings": 32768, "sliding_window": SW})";
  auto with_window = [&](const std::string& sw) {
    std::string t = mistral;
    t.replace(t.find("SW"), 2, sw);
    return ParseHfConfig(t, "mistral.json");
  };
  absl::StatusOr<ModelConfig> m = with_window("null");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->max_seq_len, 32768);
  m = with_window("4096");  // v0.1: the context is limited to the window
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->max_seq_len, 4096);
  EXPECT_EQ(with_window("0").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ArchConfig, UnsupportedFieldsAreNamed) {
  const std::string base = R"({"hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, )";
  const struct {
    const char* extra;
    const char* field;
  } cases[] = {
      {R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})", "yarn"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})", "low_freq_factor"},
      {R"("rope_parameters": {"rope_type": "dynamic", "factor": 2.0})", "rope_parameters"},
      {R"("model_type": "qwen3", "attention_bias": true)", "attention_bias"},
      {R"("model_type": "qwen2_moe")", "model_type"},
      {R"("model_type": "mistral", "num_local_experts": 8)", "num_local_experts"},
      {R"("partial_rotary_factor": 0.5)", "partial_rotary_factor"},
      {R"("model_type": "qwen2", "layer_types": ["full_attention", "chunked"])", "layer_types"},
      {R"("mlp_bias": true)", "mlp_bias"},
  };
  for (const auto& c : cases) {
    const absl::Status s = ParseHfConfig(base + c.extra + "}", "cfg.json").status();
    EXPECT_FALSE(s.ok()) << c.extra;
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("cfg.json"), HasSubstr(c.field)))
        << c.extra;
  }
}

TEST(ArchWeights, HfFoldersRoundTrip) {
  for (const char* arch : {"qwen2", "qwen3", "llama"}) {
    SCOPED_TRACE(arch);
    ModelConfig c = testing::SmallArchConfig(arch);
    c.tie_embeddings = std::string(arch) != "llama";
    const ModelWeights w = MakeDummyWeights(c, 7);
    TempDir dir;
    WriteBytes(dir.File("config.json"), testing::HfConfigJson(c));
    WriteBytes(dir.File("model.safetensors"), testing::SafetensorsBytes(testing::HfEntries(w)));
    absl::StatusOr<ModelWeights> got = LoadHfFolder(dir.path());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->config.qkv_bias, c.qkv_bias);
    EXPECT_EQ(got->config.qk_norm, c.qk_norm);
    EXPECT_EQ(got->config.head_dim(), c.head_dim());
    testing::ExpectSameWeights(*got, w);
  }
  // banyan's own writer (banyan convert) keeps the architecture, the scaling and the eos list.
  for (const char* arch : {"qwen2", "qwen3", "llama"}) {
    SCOPED_TRACE(arch);
    ModelConfig c = testing::SmallArchConfig(arch);
    if (std::string(arch) == "llama") {
      c.rope_scaling.type = RopeScalingType::kLlama3;
      c.rope_scaling.factor = 8;
      c.stop_ids = {2, 7};
    }
    const ModelWeights w = MakeDummyWeights(c, 8);
    TempDir dir;
    ASSERT_TRUE(WriteHfFolder(w, dir.path()).ok());
    absl::StatusOr<ModelWeights> got = LoadHfFolder(dir.path());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->config.arch, arch);
    EXPECT_EQ(got->config.stop_ids, c.stop_ids);
    EXPECT_EQ(RopeInvFreq(got->config), RopeInvFreq(c));
    testing::ExpectSameWeights(*got, w);
  }
  // A Qwen 2.5 folder without its biases names the missing tensor.
  const ModelWeights w = MakeDummyWeights(testing::SmallArchConfig("qwen2"), 7);
  std::vector<testing::RawEntry> entries = testing::HfEntries(w);
  std::erase_if(entries, [](const testing::RawEntry& e) {
    return e.name == "model.layers.1.self_attn.k_proj.bias";
  });
  TempDir dir;
  WriteBytes(dir.File("config.json"), testing::HfConfigJson(w.config));
  WriteBytes(dir.File("model.safetensors"), testing::SafetensorsBytes(entries));
  EXPECT_THAT(std::string(LoadHfFolder(dir.path()).status().message()),
              HasSubstr("model.layers.1.self_attn.k_proj.bias"));
}

TEST(ArchWeights, GgufRoundTripAndRopeFreqs) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    const ModelWeights w = MakeDummyWeights(testing::SmallArchConfig(arch), 9);
    TempDir dir;
    WriteBytes(dir.File("m.gguf"), testing::GgufFromWeights(w, testing::kGgmlF32));
    absl::StatusOr<ModelWeights> got = LoadGguf(dir.File("m.gguf"), nullptr);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->config.arch, arch);
    EXPECT_EQ(got->config.rope_style, RopeStyle::kHalf);  // Qwen GGUFs are not permuted
    EXPECT_EQ(got->config.head_dim(), w.config.head_dim());
    testing::ExpectSameWeights(*got, w);
  }
  // Llama 3.1 GGUFs carry the scaling as rope_freqs.weight: divisors of the frequencies.
  ModelConfig c = testing::SmallArchConfig("llama");
  c.rope_style = RopeStyle::kInterleaved;
  const ModelWeights w = MakeDummyWeights(c, 3);
  std::vector<float> divisors(c.head_dim() / 2);
  for (size_t i = 0; i < divisors.size(); ++i) divisors[i] = 1.0f + static_cast<float>(i) / 4;
  TempDir dir;
  WriteBytes(dir.File("m.gguf"),
             testing::GgufFromWeights(w, testing::kGgmlF32, "", 0, 3, &divisors));
  absl::StatusOr<ModelWeights> got = LoadGguf(dir.File("m.gguf"), nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->config.rope_scaling.freq_divisors, divisors);
  const std::vector<float> plain = RopeInvFreq(c), freqs = RopeInvFreq(got->config);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_FLOAT_EQ(freqs[i], static_cast<float>(double{plain[i]} / divisors[i])) << i;
  }
  divisors.pop_back();  // wrong length
  WriteBytes(dir.File("bad.gguf"),
             testing::GgufFromWeights(w, testing::kGgmlF32, "", 0, 3, &divisors));
  EXPECT_THAT(std::string(LoadGguf(dir.File("bad.gguf"), nullptr).status().message()),
              HasSubstr("rope_freqs.weight"));
}

TEST(ArchWeights, UnexpectedBiasOrNormTensorsAreRefused) {
  // A Qwen 2.5 checkpoint labelled llama: its biases would be dropped.
  const ModelWeights w = MakeDummyWeights(testing::SmallArchConfig("qwen2"), 4);
  ModelConfig as_llama = w.config;
  as_llama.arch = "llama";
  as_llama.qkv_bias = false;
  TempDir dir;
  WriteBytes(dir.File("config.json"), testing::HfConfigJson(as_llama));
  WriteBytes(dir.File("model.safetensors"), testing::SafetensorsBytes(testing::HfEntries(w)));
  absl::Status s = LoadHfFolder(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("_proj.bias"), HasSubstr("llama")));
  // The same in GGUF: a qwen3 file relabelled llama (metadata under llama.*) keeps its
  // attn_q_norm / attn_k_norm tensors.
  ModelWeights q3 = MakeDummyWeights(testing::SmallArchConfig("qwen3"), 4);
  q3.config.arch = "llama";
  WriteBytes(dir.File("m.gguf"), testing::GgufFromWeights(q3, testing::kGgmlF32));
  s = LoadGguf(dir.File("m.gguf"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("_norm.weight"), HasSubstr("llama")));
}

TEST(ArchWeights, GgufRefusals) {
  ModelWeights w = MakeDummyWeights(testing::SmallArchConfig("llama"), 5);
  w.config.arch = "gemma2";
  TempDir dir;
  WriteBytes(dir.File("g.gguf"), testing::GgufFromWeights(w, testing::kGgmlF32));
  const absl::Status s = LoadGguf(dir.File("g.gguf"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("general.architecture"), HasSubstr("gemma2")));
}

}  // namespace
}  // namespace banyan::model
