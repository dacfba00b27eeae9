// CudaBackend: the LLaMA forward pass on one NVIDIA GPU, over the same StepBatch and
// AttentionPlan as the CPU backend (engine/backend.h).
//
// Numerics: weights in bf16 (or fp16), converted on upload; GEMMs through cuBLAS with fp32
// accumulation and fp32 outputs; the residual stream is fp32 and the residual adds are the
// beta = 1 of the Wo and W_down GEMMs; norm weights stay fp32. Activations are rounded to the
// model dtype only where they feed a GEMM or the KV cache. Logits are fp32.
//
// Per layer: RMSNorm -> one fused QKV GEMM -> RoPE + K/V written into chunk slots (one kernel
// for every token of the step, before any attention of the layer) -> attention (decode rows:
// the paged kernel; prefill sequences: the tensor-core prefill kernel) -> Wo GEMM (+= x) ->
// RMSNorm -> one fused gate|up GEMM -> SwiGLU -> W_down GEMM (+= x).
//
// KV memory: [layer][chunk][k|v][kv_head][chunk_size][head_dim] in the model dtype, one
// allocation sized at creation (kernels/cuda/kv_view.h). Attention modes: kPaged and kNone as
// documented in backend.h; kTpp runs the paged kernel over the TPP plan (segments read per row)
// until the TPP kernel is wired in. The result is the same attention either way.
//
// Not thread-safe: the engine thread owns it. Forward synchronizes on its stream before it
// returns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "kernels/cuda/dtype.h"

namespace banyan::engine {

struct CudaBackendOptions {
  // KV pool size: num_chunks when > 0; otherwise as many chunks as fit in kv_memory_bytes; when
  // both are 0, 90% of the device memory left free after the weights and a workspace reserve.
  int32_t num_chunks = 0;
  int64_t kv_memory_bytes = 0;
  int32_t chunk_size = 64;
  AttentionMode attention = AttentionMode::kTpp;
  kernels::cuda::DType dtype = kernels::cuda::DType::kBf16;
  int device = 0;
  // Memory kept free for activations when the KV pool is sized from free memory, bytes.
  int64_t workspace_reserve_bytes = int64_t{2} << 30;
};

class CudaBackend final : public Backend {
 public:
  // Uploads `weights` (narrowed to options.dtype). The host weights are not kept.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const ModelWeights* weights,
                                                             const CudaBackendOptions& options);
  // Synthetic weights generated on the device, equal (before rounding to the dtype) to
  // MakeDummyWeights(config, seed): any shape, no host copy.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateDummy(const ModelConfig& config,
                                                                  uint64_t seed,
                                                                  const CudaBackendOptions& options);
  // Bytes of KV memory one chunk takes (every layer, K and V).
  static int64_t ChunkBytes(const ModelConfig& config, int32_t chunk_size,
                            kernels::cuda::DType dtype);
  // Whether a CUDA device is present (false on machines without a GPU or driver).
  static bool DeviceAvailable();

  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> copies) override;
  absl::Status Forward(const StepBatch& batch, std::vector<float>* logits) override;

  // Like Forward, but greedy sampling runs on the device: tokens[i] = argmax of logits row i
  // (lowest id on ties), and only the token ids come back to the host.
  absl::Status ForwardGreedy(const StepBatch& batch, std::vector<int32_t>* tokens);

  const ModelConfig& config() const { return cfg_; }
  int32_t num_chunks() const { return num_chunks_; }
  int32_t chunk_size() const { return options_.chunk_size; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t kv_bytes() const { return kv_bytes_; }

 private:
  struct Impl;
  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  absl::Status Init(const ModelWeights* weights, uint64_t dummy_seed);
  // Runs the model up to the logits, left on the device; *rows receives their number.
  absl::Status Run(const StepBatch& batch, int32_t* rows);

  ModelConfig cfg_;
  CudaBackendOptions options_;
  int32_t num_chunks_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t kv_bytes_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace banyan::engine
