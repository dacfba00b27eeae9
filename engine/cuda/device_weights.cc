#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/weights_layout.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/weight_kernels.h"

namespace banyan::engine::cuda {
namespace {

using kernels::cuda::DType;
using kernels::cuda::DTypeBytes;

constexpr int64_t kAlign = 256;

int64_t AlignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// A projection matrix: rows x cols (row-major, as on the host).
struct Shape2 {
  int64_t rows, cols;
  int64_t elements() const { return rows * cols; }
};

struct Sizes {
  Shape2 qkv, wo, w13, w2;
  int64_t norm, vocab_matrix;  // elements
};

Sizes SizesOf(const model::ModelConfig& c) {
  const int64_t d = c.head_dim(), dim = c.dim;
  return Sizes{{(int64_t{c.n_heads} + 2 * c.n_kv_heads) * d, dim},
               {dim, c.n_heads * d},
               {2 * int64_t{c.hidden_dim}, dim},
               {dim, c.hidden_dim},
               dim,
               int64_t{c.vocab_size} * dim};
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scales of a fused FP8 matrix (see the header).
int64_t ScaleCount(Shape2 m, Fp8Scaling scaling) {
  return scaling == Fp8Scaling::kPerRow ? m.rows
                                        : CeilDiv(m.rows, 128) * Fp8BlockScaleStride(m.cols);
}

// Offsets of every tensor inside the single allocation, in bytes; the *_s ones (FP8 scales) -1
// without FP8.
struct Layout {
  std::vector<int64_t> wqkv, wo, w13, w2, attn_norm, ffn_norm, bqkv, q_norm, k_norm;
  std::vector<int64_t> wqkv_s, wo_s, w13_s, w2_s;
  int64_t embeddings = 0, output = 0, final_norm = 0, total = 0;
};

Layout LayoutOf(const model::ModelConfig& c, DType dtype, std::optional<Fp8Scaling> fp8) {
  const Sizes s = SizesOf(c);
  const int64_t es = DTypeBytes(dtype);
  const int64_t ws = fp8 ? 1 : es;  // bytes per projection weight
  Layout l;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t off = at;
    at += AlignUp(bytes);
    return off;
  };
  auto scales = [&](Shape2 m) { return fp8 ? take(ScaleCount(m, *fp8) * 4) : int64_t{-1}; };
  l.embeddings = take(s.vocab_matrix * es);
  for (int i = 0; i < c.n_layers; ++i) {
    l.wqkv.push_back(take(s.qkv.elements() * ws));
    l.wo.push_back(take(s.wo.elements() * ws));
    l.w13.push_back(take(s.w13.elements() * ws));
    l.w2.push_back(take(s.w2.elements() * ws));
    l.wqkv_s.push_back(scales(s.qkv));
    l.wo_s.push_back(scales(s.wo));
    l.w13_s.push_back(scales(s.w13));
    l.w2_s.push_back(scales(s.w2));
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

// The shape checks both plans share: every GEMM on the FP8 tensor cores.
absl::Status CheckFp8Shapes(const model::ModelConfig& c) {
  const Sizes s = SizesOf(c);
  for (Shape2 m : {s.qkv, s.wo, s.w13, s.w2}) {
    if (absl::Status st = Fp8Gemm::CheckShape(m.rows, m.cols); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

Fp8Plan Fp8PlanForShape(const model::ModelConfig& cfg) {
  if (absl::Status s = CheckFp8Shapes(cfg); !s.ok()) return {std::nullopt, std::string(s.message())};
  return {Fp8Scaling::kPerRow, ""};
}

Fp8Plan Fp8PlanFor(const model::ModelWeights& w) {
  if (!model::HasQuantizedWeights(w)) return {};
  bool blocks = false, rows = false;
  for (const model::TensorSlot& slot : model::ListTensorSlots(w.config)) {
    if (!model::IsProjection(slot.kind)) continue;
    const model::QuantizedTensor* q = model::SlotQuantized(w, slot);
    if (q == nullptr || q->empty()) {
      return {std::nullopt, absl::StrCat(model::SlotName(slot), " is not FP8 (the GPU runs a "
                                         "model's projections as FP8 only when all of them are)")};
    }
    (q->scale_kind == model::Fp8ScaleKind::kBlock128 ? blocks : rows) = true;
  }
  if (blocks && rows) {
    return {std::nullopt, "the projections mix 128 x 128 block scales with per-tensor or "
                          "per-channel ones"};
  }
  if (absl::Status s = CheckFp8Shapes(w.config); !s.ok()) {
    return {std::nullopt, std::string(s.message())};
  }
  if (blocks) {
    const model::ModelConfig& c = w.config;
    const int64_t d = c.head_dim();
    for (int64_t part : {int64_t{c.n_heads} * d, int64_t{c.n_kv_heads} * d, int64_t{c.hidden_dim}}) {
      if (part % 128 != 0) {
        return {std::nullopt,
                absl::StrCat("a fused projection part of ", part,
                             " rows does not start the next on a 128-row block boundary")};
      }
    }
    return {Fp8Scaling::kBlock128, ""};
  }
  return {Fp8Scaling::kPerRow, ""};
}

int64_t DeviceWeights::Bytes(const model::ModelConfig& cfg, DType dtype,
                             std::optional<Fp8Scaling> fp8) {
  return LayoutOf(cfg, dtype, fp8).total;
}

absl::Status DeviceWeights::Allocate(const model::ModelConfig& cfg, DType dtype,
                                     std::optional<Fp8Scaling> fp8) {
  dtype_ = dtype;
  fp8_ = fp8;
  const Layout l = LayoutOf(cfg, dtype, fp8);
  BANYAN_RETURN_IF_ERROR(buffer_.Reserve(l.total, "model weights"));
  char* base = buffer_.as<char>();
  layers.resize(cfg.n_layers);
  auto f32 = [base](int64_t off) {
    return off < 0 ? nullptr : reinterpret_cast<float*>(base + off);
  };
  for (int i = 0; i < cfg.n_layers; ++i) {
    DeviceLayer& d = layers[i];
    d = DeviceLayer{};
    d.attn_norm = f32(l.attn_norm[i]);
    d.ffn_norm = f32(l.ffn_norm[i]);
    d.bqkv = f32(l.bqkv[i]);
    d.q_norm = f32(l.q_norm[i]);
    d.k_norm = f32(l.k_norm[i]);
    if (fp8) {
      auto m8 = [&](int64_t codes, int64_t scales) {
        return DeviceFp8Matrix{reinterpret_cast<uint8_t*>(base + codes), f32(scales)};
      };
      d.wqkv8 = m8(l.wqkv[i], l.wqkv_s[i]);
      d.wo8 = m8(l.wo[i], l.wo_s[i]);
      d.w13_8 = m8(l.w13[i], l.w13_s[i]);
      d.w2_8 = m8(l.w2[i], l.w2_s[i]);
    } else {
      d.wqkv = base + l.wqkv[i];
      d.wo = base + l.wo[i];
      d.w13 = base + l.w13[i];
      d.w2 = base + l.w2[i];
    }
  }
  embeddings = base + l.embeddings;
  output = base + l.output;
  final_norm = reinterpret_cast<float*>(base + l.final_norm);
  return absl::OkStatus();
}

bool DeviceWeights::Fp8Slot(const model::ModelConfig& c, int kind_int, int layer,
                            DeviceFp8Matrix* m, int64_t* row) const {
  if (!fp8_) return false;
  const int64_t d = c.head_dim();
  const DeviceLayer& l = layers[layer];
  switch (static_cast<model::WeightKind>(kind_int)) {
    case model::WeightKind::kWq:
      *m = l.wqkv8, *row = 0;
      return true;
    case model::WeightKind::kWk:
      *m = l.wqkv8, *row = int64_t{c.n_heads} * d;
      return true;
    case model::WeightKind::kWv:
      *m = l.wqkv8, *row = (int64_t{c.n_heads} + c.n_kv_heads) * d;
      return true;
    case model::WeightKind::kWo:
      *m = l.wo8, *row = 0;
      return true;
    case model::WeightKind::kGate:
      *m = l.w13_8, *row = 0;
      return true;
    case model::WeightKind::kUp:
      *m = l.w13_8, *row = c.hidden_dim;
      return true;
    case model::WeightKind::kDown:
      *m = l.w2_8, *row = 0;
      return true;
    default:
      return false;
  }
}

void* DeviceWeights::SlotAddress(const model::ModelConfig& c, int kind_int, int layer) const {
  const model::WeightKind kind = static_cast<model::WeightKind>(kind_int);
  DeviceFp8Matrix m8;
  int64_t row = 0;
  if (Fp8Slot(c, kind_int, layer, &m8, &row)) {
    const int64_t cols = kind == model::WeightKind::kWo     ? int64_t{c.n_heads} * c.head_dim()
                         : kind == model::WeightKind::kDown ? int64_t{c.hidden_dim}
                                                            : int64_t{c.dim};
    return m8.codes + row * cols;
  }
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

absl::Status DeviceWeights::Upload(const model::ModelWeights& w, DType dtype,
                                   std::optional<Fp8Scaling> fp8, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(model::ValidateWeights(w));
  if (fp8 && Fp8PlanFor(w).scaling != fp8) {
    return absl::InvalidArgumentError("DeviceWeights::Upload: the FP8 plan does not fit the weights");
  }
  BANYAN_RETURN_IF_ERROR(Allocate(w.config, dtype, fp8));
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
    DeviceFp8Matrix m8;
    int64_t row = 0;
    if (Fp8Slot(w.config, static_cast<int>(slot.kind), slot.layer, &m8, &row)) {
      // Kept FP8: the codes as they are, the scales in the fused matrix's form.
      const model::QuantizedTensor& q = *model::SlotQuantized(w, slot);
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, q.codes.data(), q.codes.size(),
                                                  cudaMemcpyHostToDevice, stream));
      if (*fp8 == Fp8Scaling::kBlock128) {
        // Each block row of the checkpoint's [rows / 128, ceil(cols / 128)] scales at the
        // device's stride (Fp8BlockScaleStride).
        const int64_t cb = CeilDiv(q.cols(), 128), stride = Fp8BlockScaleStride(q.cols());
        BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
            m8.scales + row / 128 * stride, stride * 4, q.scales.data(), cb * 4, cb * 4,
            CeilDiv(q.rows(), 128), cudaMemcpyHostToDevice, stream));
      } else {
        host_rows.assign(static_cast<size_t>(q.rows()), q.scales[0]);  // per tensor: repeated
        if (q.scale_kind == model::Fp8ScaleKind::kPerChannel) {
          host_rows.assign(q.scales.begin(), q.scales.end());
        }
        BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m8.scales + row, host_rows.data(),
                                                    host_rows.size() * 4, cudaMemcpyHostToDevice,
                                                    stream));
      }
      continue;
    }
    if (const model::QuantizedTensor* q = model::SlotQuantized(w, slot); q != nullptr && !q->empty()) {
      // FP8 weights not kept FP8 (Fp8PlanFor said why) are dequantized on the host
      // (model::Dequantize's values) and narrowed to `dtype` like any fp32 tensor. Pieces of whole rows, so the
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
                                     std::optional<Fp8Scaling> fp8, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(model::ValidateConfig(cfg, "CudaBackend::CreateDummy"));
  if (fp8 && *fp8 != Fp8Scaling::kPerRow) {
    return absl::InvalidArgumentError("dummy FP8 weights have per-channel scales");
  }
  BANYAN_RETURN_IF_ERROR(Allocate(cfg, dtype, fp8));
  const std::vector<model::TensorSlot> slots = model::ListTensorSlots(cfg);
  // FP8: each projection generated in fp32 (the values MakeDummyWeights gives the host) into a
  // staging buffer, then quantized per row into its place, as --quantization fp8 does.
  DeviceBuffer stage;
  if (fp8) {
    int64_t largest = 0;
    for (const model::TensorSlot& slot : slots) {
      if (model::IsProjection(slot.kind)) largest = std::max(largest, slot.shape[0] * slot.shape[1]);
    }
    BANYAN_RETURN_IF_ERROR(stage.Reserve(largest * 4, "FP8 weight staging"));
  }
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
    DeviceFp8Matrix m8;
    int64_t row = 0;
    const bool quantize = Fp8Slot(cfg, static_cast<int>(slot.kind), slot.layer, &m8, &row);
    if (quantize) {
      p.dst = stage.get();
      p.to_f32 = true;
    }
    BANYAN_RETURN_IF_ERROR(kernels::cuda::DummyFill(dtype, p, stream));
    if (quantize) {
      kernels::cuda::QuantizeFp8Params qp;
      qp.in = stage.get();
      qp.in_f32 = true;
      qp.rows = slot.shape[0];
      qp.cols = slot.shape[1];
      qp.group = static_cast<int32_t>(slot.shape[1]);
      qp.codes = static_cast<uint8_t*>(SlotAddress(cfg, static_cast<int>(slot.kind), slot.layer));
      qp.scales = m8.scales + row;
      BANYAN_RETURN_IF_ERROR(kernels::cuda::QuantizeRowsFp8(dtype, qp, stream));
    }
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace banyan::engine::cuda
