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

namespace {

// For each row of a [n_heads * head_dim, in] matrix in the order `to`, the row it comes from in
// the order `from`.
std::vector<int64_t> QkRowSources(int n_heads, int head_dim, RopeStyle from, RopeStyle to) {
  std::vector<int64_t> src(static_cast<size_t>(n_heads) * head_dim);
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    const int64_t base = int64_t{h} * head_dim;
    for (int i = 0; i < half; ++i) {
      // Interleaved row 2i + j  <->  half row i + j * head_dim / 2, for j in {0, 1}.
      for (int j = 0; j < 2; ++j) {
        const int64_t inter = base + 2 * i + j;
        const int64_t halfrow = base + i + int64_t{j} * half;
        const bool to_half = from == RopeStyle::kInterleaved && to == RopeStyle::kHalf;
        src[static_cast<size_t>(to_half ? halfrow : inter)] = to_half ? inter : halfrow;
      }
    }
  }
  return src;
}

}  // namespace

void PermuteQkRows(Tensor& w, int n_heads, int head_dim, RopeStyle from, RopeStyle to) {
  if (from == to) return;
  BANYAN_CHECK(w.shape.size() == 2 && head_dim > 0 && head_dim % 2 == 0 &&
               w.shape[0] == int64_t{n_heads} * head_dim &&
               w.data.size() == static_cast<size_t>(w.numel()))
      << "PermuteQkRows: shape " << (w.shape.empty() ? -1 : w.shape[0]) << " rows, n_heads "
      << n_heads << ", head_dim " << head_dim;
  const size_t cols = static_cast<size_t>(w.shape[1]);
  const std::vector<int64_t> src = QkRowSources(n_heads, head_dim, from, to);
  std::vector<float> out(w.data.size());
  for (size_t dst = 0; dst < src.size(); ++dst) {
    std::memcpy(&out[dst * cols], &w.data[static_cast<size_t>(src[dst]) * cols],
                cols * sizeof(float));
  }
  w.data = std::move(out);
}

absl::Status PermuteQkRows(QuantizedTensor& q, int n_heads, int head_dim, RopeStyle from,
                           RopeStyle to) {
  if (from == to) return absl::OkStatus();
  BANYAN_CHECK(q.shape.size() == 2 && head_dim > 0 && head_dim % 2 == 0 &&
               q.rows() == int64_t{n_heads} * head_dim &&
               q.codes.size() == static_cast<size_t>(q.rows() * q.cols()))
      << "PermuteQkRows: " << q.rows() << " FP8 rows, n_heads " << n_heads << ", head_dim "
      << head_dim;
  const std::vector<int64_t> src = QkRowSources(n_heads, head_dim, from, to);
  if (q.scale_kind == Fp8ScaleKind::kBlock128) {
    for (size_t dst = 0; dst < src.size(); ++dst) {
      if (src[dst] / kFp8BlockSize != static_cast<int64_t>(dst) / kFp8BlockSize) {
        return absl::UnimplementedError(absl::StrCat(
            "the RoPE row order of FP8 weights with 128 x 128 scale blocks and head_dim ",
            head_dim, " cannot be converted: rows would change blocks"));
      }
    }
  }
  const size_t cols = static_cast<size_t>(q.cols());
  std::vector<uint8_t> codes(q.codes.size());
  for (size_t dst = 0; dst < src.size(); ++dst) {
    std::memcpy(&codes[dst * cols], &q.codes[static_cast<size_t>(src[dst]) * cols], cols);
  }
  q.codes = std::move(codes);
  if (q.scale_kind == Fp8ScaleKind::kPerChannel) {
    std::vector<float> scales(q.scales.size());
    for (size_t dst = 0; dst < src.size(); ++dst) scales[dst] = q.scales[static_cast<size_t>(src[dst])];
    q.scales = std::move(scales);
  }
  return absl::OkStatus();
}

void ConvertRopeStyle(ModelWeights& w, RopeStyle to) {
  const ModelConfig& c = w.config;
  for (LayerWeights& l : w.layers) {
    PermuteQkRows(l.wq, c.n_heads, c.head_dim(), c.rope_style, to);
    PermuteQkRows(l.wk, c.n_kv_heads, c.head_dim(), c.rope_style, to);
    for (auto [q, heads] : {std::pair{&l.fp8.wq, c.n_heads}, std::pair{&l.fp8.wk, c.n_kv_heads}}) {
      if (q->empty()) continue;
      const absl::Status s = PermuteQkRows(*q, heads, c.head_dim(), c.rope_style, to);
      BANYAN_CHECK(s.ok()) << w.source << ": " << s.message();
    }
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
