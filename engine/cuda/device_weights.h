// The model's weights in device memory, in the layout the CUDA backend's GEMMs want:
// per layer one fused [Wq; Wk; Wv] matrix ([(n_heads + 2 n_kv_heads) * head_dim, dim]) and one
// fused [W_gate; W_up] matrix ([2 * hidden_dim, dim]), row-major like the host tensors; matrices
// in the model dtype; norm weights, the q/k/v biases (one fused [bq; bk; bv] vector) and the
// per-head q/k norm weights in fp32. One allocation holds everything.
//
// FP8. With an Fp8Scaling (Fp8PlanFor), the four projection matrices are kept as FP8 (E4M3)
// codes, one byte per weight, in the same fused layouts, with their scales beside them in the
// form engine/cuda/fp8_gemm.h reads: kPerRow one fp32 per row of the fused matrix (a per-tensor
// checkpoint scale repeated over its rows), kBlock128 the [rows / 128, ceil(cols / 128)] blocks
// of the fused matrix (its parts start on 128-row boundaries; Fp8PlanFor checks). The
// embeddings and the LM head stay in the model dtype, as the checkpoints keep them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/fp8_gemm.h"
#include "engine/cuda/device_memory.h"
#include "model/model.h"
#include "kernels/cuda/dtype.h"

namespace banyan::engine::cuda {

// A projection matrix held in FP8 (see the top): codes row-major, scales as the scaling says.
struct DeviceFp8Matrix {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  Fp8Operand operand() const { return Fp8Operand{codes, scales}; }
};

struct DeviceLayer {
  // In the model dtype; null when the projections are FP8 (then the *8 fields hold them).
  void* wqkv = nullptr;        // [(hq + 2 hkv) * d, dim]
  void* wo = nullptr;          // [dim, hq * d]
  void* w13 = nullptr;         // [2 * hidden, dim]: gate rows, then up rows
  void* w2 = nullptr;          // [dim, hidden]
  float* attn_norm = nullptr;  // [dim]
  float* ffn_norm = nullptr;   // [dim]
  float* bqkv = nullptr;       // [(hq + 2 hkv) * d]: bq | bk | bv; only when qkv_bias
  float* q_norm = nullptr;     // [d]; only when qk_norm
  float* k_norm = nullptr;     // [d]; only when qk_norm
  DeviceFp8Matrix wqkv8, wo8, w13_8, w2_8;
};

// Whether the projections of a model run as FP8 on the device, and how their scales are held.
// A model keeps its projections FP8 on the device when every projection of every layer is FP8,
// with per-tensor or per-channel scales (kPerRow) or all with 128 x 128 blocks (kBlock128, whose
// fused parts must then be whole 128-row blocks), and every GEMM shape suits the FP8 tensor
// cores (Fp8Gemm::CheckShape). Otherwise `reason` says why not, and an FP8 checkpoint's
// projections are dequantized to the model dtype at upload.
struct Fp8Plan {
  std::optional<Fp8Scaling> scaling;
  std::string reason;  // when !scaling and the model holds FP8 projections
};
// For loaded weights (FP8 checkpoints, --quantization fp8).
Fp8Plan Fp8PlanFor(const model::ModelWeights& w);
// For dummy weights quantized on the device (per-channel, as --quantization fp8): kPerRow when
// the shapes allow it.
Fp8Plan Fp8PlanForShape(const model::ModelConfig& cfg);

class DeviceWeights {
 public:
  // Bytes the weights of `cfg` take on the device (FP8 projections when `fp8` is set).
  static int64_t Bytes(const model::ModelConfig& cfg, kernels::cuda::DType dtype,
                       std::optional<Fp8Scaling> fp8 = std::nullopt);

  // Allocates, then uploads `w` (fp32 on the host) narrowed to `dtype`. FP8 projections
  // (LayerWeights::fp8) are copied as they are when `fp8` is set (it must come from
  // Fp8PlanFor(w)), else dequantized on the host piece by piece and narrowed the same way.
  absl::Status Upload(const model::ModelWeights& w, kernels::cuda::DType dtype,
                      std::optional<Fp8Scaling> fp8, cudaStream_t stream);
  // Allocates, then fills with MakeDummyWeights' values generated on the device; with `fp8`
  // (kPerRow only), each projection is generated in `dtype` and quantized per row on the device
  // by the rule of --quantization fp8 (kernels/cuda/fp8_quant.h).
  absl::Status Generate(const model::ModelConfig& cfg, uint64_t seed, kernels::cuda::DType dtype,
                        std::optional<Fp8Scaling> fp8, cudaStream_t stream);

  // The projections' form on the device: FP8 with these scales, or none (the model dtype).
  std::optional<Fp8Scaling> fp8() const { return fp8_; }

  std::vector<DeviceLayer> layers;
  void* embeddings = nullptr;    // [vocab, dim]
  void* output = nullptr;        // [vocab, dim]; == embeddings when tied
  float* final_norm = nullptr;   // [dim]

 private:
  absl::Status Allocate(const model::ModelConfig& cfg, kernels::cuda::DType dtype,
                        std::optional<Fp8Scaling> fp8);
  // Device address of one tensor slot of ListTensorSlots (inside the fused matrices for
  // wq/wk/wv and gate/up). For an FP8 projection, its codes.
  void* SlotAddress(const model::ModelConfig& cfg, int kind, int layer) const;
  // An FP8 projection slot: its fused matrix and its first row in it; false for other slots.
  bool Fp8Slot(const model::ModelConfig& cfg, int kind, int layer, DeviceFp8Matrix* m,
               int64_t* row) const;

  kernels::cuda::DType dtype_ = kernels::cuda::DType::kBf16;
  std::optional<Fp8Scaling> fp8_;
  DeviceBuffer buffer_;
};

}  // namespace banyan::engine::cuda
