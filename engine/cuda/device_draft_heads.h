// Draft heads on the GPU: the heads' MLPs in device memory and the candidate trees drafted there
// from the last step's final-norm hidden states, one level at a time for every node of every
// sample (three cuBLAS GEMMs per level: the MLP's two and the base model's LM head, and the
// kernels of kernels/cuda/draft_kernels.h). The trees are what DraftHeads::TreeBatch builds
// on the host, with the GEMMs' inputs in the model dtype (bf16/fp16) instead of fp32: a token
// can differ only where two logits are within that rounding of each other. The trees' tokens
// are the only thing copied back.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/device_memory.h"
#include "engine/speculative/draft_heads.h"
#include "kernels/cuda/dtype.h"

namespace banyan::engine::cuda {

class DeviceDraftHeads {
 public:
  // Uploads the heads' MLPs narrowed to `dtype` (biases stay fp32). Synchronous.
  absl::Status Upload(const DraftHeads& heads, kernels::cuda::DType dtype, cudaStream_t stream);
  // DraftHeads::id of the head set uploaded last (0 before the first Upload).
  uint64_t source_id() const { return source_id_; }

  struct Base {
    const void* hidden = nullptr;      // [*, dim] final-norm hidden states of the step's rows
    const void* embeddings = nullptr;  // [vocab, dim]
    const void* lm_head = nullptr;     // [vocab, dim]
    int32_t vocab = 0;
  };
  // Trees for roots.size() samples: sample i from hidden row rows[i], root roots[i]. Runs on
  // `stream` with `cublas` (set to that stream) and waits for the tokens.
  absl::Status Draft(cublasHandle_t cublas, cudaStream_t stream, const Base& base,
                     std::span<const int32_t> rows, std::span<const int32_t> roots,
                     std::span<const int32_t> branching, std::vector<DraftHeads::Tree>* out);

 private:
  struct Head {
    void* fc1_w = nullptr;  // [mlp, input], dtype
    void* fc2_w = nullptr;  // [dim, mlp], dtype
    float* fc1_b = nullptr;
    float* fc2_b = nullptr;
    int input_size = 0;
  };
  uint64_t source_id_ = 0;
  kernels::cuda::DType dtype_ = kernels::cuda::DType::kBf16;
  int dim_ = 0, mlp_ = 0;
  bool hydra_ = true;
  std::vector<Head> heads_;
  DeviceBuffer weights_;
  // Work space, grown on demand.
  StagedInts ints_;
  DeviceBuffer paths_[2], node_sample_[2], tokens_, u_, a_, s_, z_, zq_, logits_;
  PinnedBuffer host_tokens_;
};

}  // namespace banyan::engine::cuda
