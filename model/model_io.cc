#include "model/model_io.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "model/gguf_loader.h"
#include "model/llama2c_loader.h"
#include "model/safetensors_loader.h"

namespace banyan::model {

void PermuteQkRows(Tensor& w, int n_heads, int head_dim, RopeStyle from, RopeStyle to) {
  if (from == to) return;
  BANYAN_CHECK(w.shape.size() == 2 && head_dim > 0 && head_dim % 2 == 0 &&
               w.shape[0] == int64_t{n_heads} * head_dim &&
               w.data.size() == static_cast<size_t>(w.numel()))
      << "PermuteQkRows: shape " << (w.shape.empty() ? -1 : w.shape[0]) << " rows, n_heads "
      << n_heads << ", head_dim " << head_dim;
  const size_t cols = static_cast<size_t>(w.shape[1]);
  const int half = head_dim / 2;
  std::vector<float> out(w.data.size());
  for (int h = 0; h < n_heads; ++h) {
    const size_t base = static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      // Interleaved row 2i + j  <->  half row i + j * head_dim / 2, for j in {0, 1}.
      for (int j = 0; j < 2; ++j) {
        const size_t inter = base + 2 * i + j;
        const size_t halfrow = base + i + j * half;
        const size_t src = (from == RopeStyle::kInterleaved) ? inter : halfrow;
        const size_t dst = (from == RopeStyle::kInterleaved) ? halfrow : inter;
        std::memcpy(&out[dst * cols], &w.data[src * cols], cols * sizeof(float));
      }
    }
  }
  w.data = std::move(out);
}

void ConvertRopeStyle(ModelWeights& w, RopeStyle to) {
  const ModelConfig& c = w.config;
  // FP8 weights come only from Hugging Face folders (kHalf) or --quantization after the load;
  // rows of 128 x 128 scale blocks could not be permuted anyway.
  BANYAN_CHECK(c.rope_style == to || !HasQuantizedWeights(w))
      << w.source << ": the RoPE row order of FP8 Wq / Wk cannot be converted";
  for (LayerWeights& l : w.layers) {
    PermuteQkRows(l.wq, c.n_heads, c.head_dim(), c.rope_style, to);
    PermuteQkRows(l.wk, c.n_kv_heads, c.head_dim(), c.rope_style, to);
  }
  w.config.rope_style = to;
}

namespace {

absl::StatusOr<ModelWeights> LoadModelFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  char magic[4] = {};
  {
    std::ifstream in(path, std::ios::binary);
    in.read(magic, sizeof(magic));
  }
  if (std::memcmp(magic, "GGUF", 4) == 0) return LoadGguf(path, nullptr);
  if (absl::EndsWith(path, ".bin")) return LoadLlama2c(path);
  if (absl::EndsWith(path, ".gguf")) return LoadGguf(path, nullptr);  // reports the bad magic
  if (absl::EndsWith(path, ".safetensors")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": pass the folder holding config.json and the safetensors, not the file"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path,
      ": unrecognised model format (expected a Hugging Face folder, a .gguf or a llama2.c "
      ".bin)"));
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModel(const std::string& path, WeightQuantization quantization) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return LoadHfFolder(path, quantization);
  absl::StatusOr<ModelWeights> w = LoadModelFile(path);
  if (!w.ok() || quantization == WeightQuantization::kNone) return w;
  if (absl::Status s = QuantizeWeightsFp8(&*w); !s.ok()) return s;
  return w;
}

}  // namespace banyan::model
