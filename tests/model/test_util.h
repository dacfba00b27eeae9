// Helpers shared by the model tests (the inline ones also by the scheduler's speculation
// tests): small configs of each architecture, temp dirs, file bytes, the bundled model's paths,
// tensor comparison, and writers for synthetic GGUF / safetensors files (used to build both
// valid inputs in other dtypes and deliberately broken ones).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/model.h"
#include "gtest/gtest.h"

namespace banyan::model::testing {

inline std::string ModelFile(const std::string& name) {
  return std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/" + name;
}

// A small config of an architecture the loaders know: "llama", "mistral" (the same tensors),
// "qwen2" (q/k/v biases), "qwen3" (q/k norms, head_dim 32 != dim / n_heads). dim 64, 4 query
// heads over 2 KV heads, 2 layers, vocabulary 40, context 128, kHalf, untied, no RoPE scaling;
// callers change what their test needs.
inline ModelConfig SmallArchConfig(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.max_seq_len = 128;
  c.rope_style = RopeStyle::kHalf;
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  if (arch == "qwen3") c.head_size = 32;
  return c;
}

// A fresh directory under the test temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? info->name() : "x";
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized tests: "Name/param"
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("banyan_model_" + name + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

template <typename T>
void AppendPod(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

inline std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Exact comparison: shape and every value bit-for-bit (NaN never in our weights).
inline void ExpectSameTensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::memcmp(&a.data[i], &b.data[i], sizeof(float)) != 0 && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": first mismatch at " << first << ": " << a.data[first]
                            << " vs " << b.data[first];
}

// Compares every tensor of two models (same config shapes), using the output matrix for the
// LM head so a tied and an untied copy of the same weights compare equal.
void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b);

// Builds GGUF bytes. Keys and tensors are written in insertion order.
class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  void U32(const std::string& key, uint32_t v) { Scalar(key, 4, v); }
  void I32(const std::string& key, int32_t v) { Scalar(key, 5, v); }
  void F32(const std::string& key, float v) { Scalar(key, 6, v); }
  void Bool(const std::string& key, bool v) { Scalar(key, 7, static_cast<uint8_t>(v)); }
  void Str(const std::string& key, const std::string& v) {
    Key(key, 8);
    String(kv_, v);
    ++n_kv_;
  }
  void StrArray(const std::string& key, const std::vector<std::string>& v);
  void F32Array(const std::string& key, const std::vector<float>& v);
  void I32Array(const std::string& key, const std::vector<int32_t>& v);

  // ne: GGML order (innermost first). data: raw bytes of the tensor.
  void AddTensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                 const std::string& data);

  std::string Build(uint32_t alignment = 32) const;

 private:
  static void String(std::string& s, const std::string& v) {
    AppendPod(s, static_cast<uint64_t>(v.size()));
    s += v;
  }
  void Key(const std::string& key, uint32_t type) {
    String(kv_, key);
    AppendPod(kv_, type);
  }
  template <typename T>
  void Scalar(const std::string& key, uint32_t type, T v) {
    Key(key, type);
    AppendPod(kv_, v);
    ++n_kv_;
  }

  uint32_t version_;
  std::string kv_;
  uint64_t n_kv_ = 0;
  struct PendingTensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  std::vector<PendingTensor> tensors_;
};

// GGML type ids used by the tests.
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ8_0 = 8, kGgmlBF16 = 30;

// Q8_0 blocks of n values (n a multiple of 32): d = max|x| / 127 stored as f16, q = round(x / d).
std::string EncodeQ8_0(const float* x, size_t n);

// A complete GGUF holding `w` (its tensors as stored, no permutation) in `type`
// (F32/F16/BF16, or Q8_0 for the matrices whose rows are multiples of 32, the rest F32), with
// `<w.config.arch>.*` metadata and a trivial tokenizer; `rope_freqs`, when given, is written as
// the F32 tensor rope_freqs.weight. `override_type_of` names one
// tensor written with `override_type` instead (its bytes are then garbage of the right size).
// A non-empty `chat_template` is written as tokenizer.chat_template.
std::string GgufFromWeights(const ModelWeights& w, uint32_t type,
                            const std::string& override_type_of = "", uint32_t override_type = 0,
                            uint32_t version = 3,
                            const std::vector<float>* rope_freqs = nullptr,
                            const std::string& chat_template = "");

// One raw safetensors entry: dtype string and bytes exactly as written.
struct RawEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::string SafetensorsBytes(const std::vector<RawEntry>& entries);

// The entries of `w` as F32 under their Hugging Face names (no permutation).
std::vector<RawEntry> HfEntries(const ModelWeights& w);

// Writes config.json text for `c` as LlamaForCausalLM.
std::string HfConfigJson(const ModelConfig& c);

}  // namespace banyan::model::testing
