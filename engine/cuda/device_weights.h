// The model's weights in device memory, in the layout the CUDA backend's GEMMs want:
// per layer one fused [Wq; Wk; Wv] matrix ([(n_heads + 2 n_kv_heads) * head_dim, dim]) and one
// fused [W_gate; W_up] matrix ([2 * hidden_dim, dim]), row-major like the host tensors; matrices
// in the model dtype; norm weights, the q/k/v biases (one fused [bq; bk; bv] vector) and the
// per-head q/k norm weights in fp32. One allocation holds everything.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/device_memory.h"
#include "model/model.h"
#include "kernels/cuda/dtype.h"

namespace banyan::engine::cuda {

struct DeviceLayer {
  void* wqkv = nullptr;        // [(hq + 2 hkv) * d, dim]
  void* wo = nullptr;          // [dim, hq * d]
  void* w13 = nullptr;         // [2 * hidden, dim]: gate rows, then up rows
  void* w2 = nullptr;          // [dim, hidden]
  float* attn_norm = nullptr;  // [dim]
  float* ffn_norm = nullptr;   // [dim]
  float* bqkv = nullptr;       // [(hq + 2 hkv) * d]: bq | bk | bv; only when qkv_bias
  float* q_norm = nullptr;     // [d]; only when qk_norm
  float* k_norm = nullptr;     // [d]; only when qk_norm
};

class DeviceWeights {
 public:
  // Bytes the weights of `cfg` take on the device.
  static int64_t Bytes(const model::ModelConfig& cfg, kernels::cuda::DType dtype);

  // Allocates, then uploads `w` (fp32 on the host) narrowed to `dtype`. FP8 projections
  // (LayerWeights::fp8) are dequantized on the host piece by piece and narrowed the same way.
  absl::Status Upload(const model::ModelWeights& w, kernels::cuda::DType dtype, cudaStream_t stream);
  // Allocates, then fills with MakeDummyWeights' values generated on the device.
  absl::Status Generate(const model::ModelConfig& cfg, uint64_t seed, kernels::cuda::DType dtype,
                        cudaStream_t stream);

  std::vector<DeviceLayer> layers;
  void* embeddings = nullptr;    // [vocab, dim]
  void* output = nullptr;        // [vocab, dim]; == embeddings when tied
  float* final_norm = nullptr;   // [dim]

 private:
  absl::Status Allocate(const model::ModelConfig& cfg, kernels::cuda::DType dtype);
  // Device address of one tensor slot of ListTensorSlots (inside the fused matrices for
  // wq/wk/wv and gate/up).
  void* SlotAddress(const model::ModelConfig& cfg, int kind, int layer) const;

  kernels::cuda::DType dtype_ = kernels::cuda::DType::kBf16;
  DeviceBuffer buffer_;
};

}  // namespace banyan::engine::cuda
