#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <cmath>

#include "model/weights_layout.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/weight_kernels.h"

namespace banyan::engine::cuda {
namespace {

using kernels::cuda::DType;
using kernels::cuda::DTypeBytes;

constexpr int64_t kAlign = 256;

int64_t AlignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct Sizes {
  int64_t qkv, wo, w13, w2, norm, vocab_matrix;  // elements
};

Sizes SizesOf(const model::ModelConfig& c) {
  const int64_t d = c.head_dim(), dim = c.dim;
  return Sizes{(int64_t{c.n_heads} + 2 * c.n_kv_heads) * d * dim,
               dim * c.n_heads * d,
               2 * int64_t{c.hidden_dim} * dim,
               dim * c.hidden_dim,
               dim,
               int64_t{c.vocab_size} * dim};
}

// Offsets of every tensor inside the single allocation, in bytes.
struct Layout {
  std::vector<int64_t> wqkv, wo, w13, w2, attn_norm, ffn_norm, bqkv, q_norm, k_norm;
  int64_t embeddings = 0, output = 0, final_norm = 0, total = 0;
};

Layout LayoutOf(const model::ModelConfig& c, DType dtype) {
  const Sizes s = SizesOf(c);
  const int64_t es = DTypeBytes(dtype);
  Layout l;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t off = at;
    at += AlignUp(bytes);
    return off;
  };
  l.embeddings = take(s.vocab_matrix * es);
  for (int i = 0; i < c.n_layers; ++i) {
    l.wqkv.push_back(take(s.qkv * es));
    l.wo.push_back(take(s.wo * es));
    l.w13.push_back(take(s.w13 * es));
    l.w2.push_back(take(s.w2 * es));
    l.attn_norm.push_back(take(s.norm * 4));
    l.ffn_norm.push_back(take(s.norm * 4));
    const int64_t qkv_rows = (int64_t{c.n_heads} + 2 * c.n_kv_heads) * c.head_dim();
    l.bqkv.push_back(c.qkv_bias ? take(qkv_rows * 4) : -1);
    l.q_norm.push_back(c.qk_norm ? take(int64_t{c.head_dim()} * 4) : -1);
    l.k_norm.push_back(c.qk_norm ? take(int64_t{c.head_dim()} * 4) : -1);
  }
  l.final_norm = take(s.norm * 4);
  l.output = c.tie_embeddings ? l.embeddings : take(s.vocab_matrix * es);
  l.total = at;
  return l;
}

}  // namespace

int64_t DeviceWeights::Bytes(const model::ModelConfig& cfg, DType dtype) {
  return LayoutOf(cfg, dtype).total;
}

absl::Status DeviceWeights::Allocate(const model::ModelConfig& cfg, DType dtype) {
  dtype_ = dtype;
  const Layout l = LayoutOf(cfg, dtype);
  BANYAN_RETURN_IF_ERROR(buffer_.Reserve(l.total, "model weights"));
  char* base = buffer_.as<char>();
  layers.resize(cfg.n_layers);
  auto f32 = [base](int64_t off) {
    return off < 0 ? nullptr : reinterpret_cast<float*>(base + off);
  };
  for (int i = 0; i < cfg.n_layers; ++i) {
    layers[i] = DeviceLayer{base + l.wqkv[i],    base + l.wo[i],        base + l.w13[i],
                            base + l.w2[i],      f32(l.attn_norm[i]),   f32(l.ffn_norm[i]),
                            f32(l.bqkv[i]),      f32(l.q_norm[i]),      f32(l.k_norm[i])};
  }
  embeddings = base + l.embeddings;
  output = base + l.output;
  final_norm = reinterpret_cast<float*>(base + l.final_norm);
  return absl::OkStatus();
}

void* DeviceWeights::SlotAddress(const model::ModelConfig& c, int kind_int, int layer) const {
  const model::WeightKind kind = static_cast<model::WeightKind>(kind_int);
  const int64_t es = DTypeBytes(dtype_);
  const int64_t d = c.head_dim(), dim = c.dim;
  auto at = [&](void* p, int64_t elements) { return static_cast<char*>(p) + elements * es; };
  switch (kind) {
    case model::WeightKind::kTokEmbd:
      return embeddings;
    case model::WeightKind::kFinalNorm:
      return final_norm;
    case model::WeightKind::kLmHead:
      return output;
    case model::WeightKind::kAttnNorm:
      return layers[layer].attn_norm;
    case model::WeightKind::kFfnNorm:
      return layers[layer].ffn_norm;
    case model::WeightKind::kWq:
      return layers[layer].wqkv;
    case model::WeightKind::kWk:
      return at(layers[layer].wqkv, int64_t{c.n_heads} * d * dim);
    case model::WeightKind::kWv:
      return at(layers[layer].wqkv, (int64_t{c.n_heads} + c.n_kv_heads) * d * dim);
    case model::WeightKind::kWo:
      return layers[layer].wo;
    case model::WeightKind::kGate:
      return layers[layer].w13;
    case model::WeightKind::kUp:
      return at(layers[layer].w13, int64_t{c.hidden_dim} * dim);
    case model::WeightKind::kDown:
      return layers[layer].w2;
    case model::WeightKind::kBq:
      return layers[layer].bqkv;
    case model::WeightKind::kBk:
      return layers[layer].bqkv + int64_t{c.n_heads} * d;
    case model::WeightKind::kBv:
      return layers[layer].bqkv + (int64_t{c.n_heads} + c.n_kv_heads) * d;
    case model::WeightKind::kQNorm:
      return layers[layer].q_norm;
    case model::WeightKind::kKNorm:
      return layers[layer].k_norm;
  }
  return nullptr;
}

absl::Status DeviceWeights::Upload(const model::ModelWeights& w, DType dtype, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(model::ValidateWeights(w));
  BANYAN_RETURN_IF_ERROR(Allocate(w.config, dtype));
  // fp32 staging on the device, narrowed by a kernel; the staging copy of the next piece waits
  // for the narrowing of the previous one (same stream).
  constexpr int64_t kStageElements = int64_t{16} << 20;
  int64_t largest = 0;
  const std::vector<model::TensorSlot> slots = model::ListTensorSlots(w.config);
  for (const model::TensorSlot& slot : slots) {
    int64_t n = 1;
    for (int64_t s : slot.shape) n *= s;
    largest = std::max(largest, n);
  }
  DeviceBuffer stage;
  BANYAN_RETURN_IF_ERROR(
      stage.Reserve(std::min(largest, kStageElements) * int64_t{4}, "weight upload staging"));
  std::vector<float> host_rows;  // FP8 projections, dequantized a piece at a time
  for (const model::TensorSlot& slot : slots) {
    const model::Tensor& t = model::SlotTensor(w, slot);
    void* dst = SlotAddress(w.config, static_cast<int>(slot.kind), slot.layer);
    if (const model::QuantizedTensor* q = model::SlotQuantized(w, slot); q != nullptr && !q->empty()) {
      // FP8 weights are dequantized on the host (model::Dequantize's values) and narrowed to
      // `dtype` like any fp32 tensor: there are no FP8 GEMMs yet. Pieces of whole rows, so the
      // host never holds more than kStageElements of fp32 (the copy from pageable memory has
      // left host_rows when cudaMemcpyAsync returns, so it can be refilled at once).
      const int64_t cols = q->cols();
      const int64_t rows_per_piece = std::max<int64_t>(1, std::min(kStageElements, largest) / cols);
      for (int64_t r = 0; r < q->rows(); r += rows_per_piece) {
        const int64_t rows = std::min(rows_per_piece, q->rows() - r);
        host_rows.resize(static_cast<size_t>(rows * cols));
        model::DequantizeRows(*q, r, r + rows, host_rows.data());
        BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage.get(), host_rows.data(),
                                                    host_rows.size() * 4, cudaMemcpyHostToDevice,
                                                    stream));
        BANYAN_RETURN_IF_ERROR(kernels::cuda::ConvertFromF32(
            dtype, stage.as<float>(), rows * cols,
            static_cast<char*>(dst) + r * cols * DTypeBytes(dtype), stream));
      }
      continue;
    }
    if (t.shape.size() == 1) {  // norms and biases stay fp32
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, t.data.data(), t.data.size() * 4,
                                                  cudaMemcpyHostToDevice, stream));
      continue;
    }
    for (int64_t b = 0; b < t.numel(); b += kStageElements) {
      const int64_t n = std::min(kStageElements, t.numel() - b);
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage.get(), t.data.data() + b,
                                                  static_cast<size_t>(n) * 4,
                                                  cudaMemcpyHostToDevice, stream));
      BANYAN_RETURN_IF_ERROR(kernels::cuda::ConvertFromF32(
          dtype, stage.as<float>(), n, static_cast<char*>(dst) + b * DTypeBytes(dtype), stream));
    }
  }
  // The staging buffer is freed on return: wait for its last use.
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status DeviceWeights::Generate(const model::ModelConfig& cfg, uint64_t seed, DType dtype,
                                     cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(model::ValidateConfig(cfg, "CudaBackend::CreateDummy"));
  BANYAN_RETURN_IF_ERROR(Allocate(cfg, dtype));
  const std::vector<model::TensorSlot> slots = model::ListTensorSlots(cfg);
  for (size_t k = 0; k < slots.size(); ++k) {
    const model::TensorSlot& slot = slots[k];
    int64_t n = 1;
    for (int64_t s : slot.shape) n *= s;
    const bool is_norm = slot.shape.size() == 1;
    kernels::cuda::DummyFillParams p;
    p.dst = SlotAddress(cfg, static_cast<int>(slot.kind), slot.layer);
    p.n = n;
    p.seed = seed;
    p.slot = static_cast<int32_t>(k);
    // Exactly MakeDummyWeights' float expressions.
    p.scale = is_norm ? 0.05f : 1.0f / std::sqrt(static_cast<float>(slot.shape.back()));
    p.offset = is_norm ? 1.0f : 0.0f;
    p.to_f32 = is_norm;
    BANYAN_RETURN_IF_ERROR(kernels::cuda::DummyFill(dtype, p, stream));
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace banyan::engine::cuda
