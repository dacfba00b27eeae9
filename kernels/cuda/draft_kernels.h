// Kernels of draft heads on the GPU (engine/cuda/device_draft_heads.h runs them around cuBLAS
// GEMMs). One level of a candidate tree at a time, for every node of the level of every sample:
//   DraftHeadInput   u = [h, E[path_0], ..., E[path_d]] (dtype), z = h + b2 (fp32)
//   (GEMM)           a = u . W1^T
//   DraftBiasSilu    s = silu(a + b1) (dtype)
//   (GEMM)           z += s . W2^T;  zq = dtype(z) (DraftNarrow)
//   (GEMM)           logits = zq . LM_head^T
//   DraftTopB        the b best tokens of each node (value descending, then id ascending; NaN as
//                    -inf, the host TopK's order), and the next level's paths
// Each function launches on `stream`, checks the launch and never synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace banyan::kernels::cuda {

inline constexpr int kDraftMaxBranching = 16;

struct DraftInputParams {
  const void* hidden = nullptr;      // [*, dim] final-norm hidden states, dtype
  const int32_t* hidden_row = nullptr;  // [samples] row of `hidden` per sample
  const int32_t* node_sample = nullptr;  // [nodes] the sample of each node of the level
  const int32_t* paths = nullptr;    // [nodes, path_len] root .. node tokens
  const void* embeddings = nullptr;  // [vocab, dim], dtype
  const float* fc2_bias = nullptr;   // [dim]
  void* u = nullptr;                 // [nodes, dim * (1 + path_len)] (path_len 0: h only), dtype
  float* z = nullptr;                // [nodes, dim] = h + fc2_bias
  int32_t nodes = 0;
  int32_t dim = 0;
  int32_t path_len = 0;  // tokens of each path that enter u (0 for Medusa heads)
  int32_t path_stride = 0;  // int32 per row of `paths`
};
absl::Status DraftHeadInput(DType dtype, const DraftInputParams& p, cudaStream_t stream);

// out[r, i] = dtype(silu(a[r, i] + bias[i])).
struct DraftBiasSiluParams {
  const float* a = nullptr;     // [rows, n]
  const float* bias = nullptr;  // [n]
  void* out = nullptr;          // [rows, n], dtype
  int32_t rows = 0;
  int32_t n = 0;
};
absl::Status DraftBiasSilu(DType dtype, const DraftBiasSiluParams& p, cudaStream_t stream);

// out = dtype(x), n elements.
absl::Status DraftNarrow(DType dtype, const float* x, void* out, int64_t n, cudaStream_t stream);

// For each row r of logits: tokens[r * b + j], j < b, the j-th best token; and the next level's
// rows r * b + j: paths_next = paths[r] + token (path_len + 1 tokens), node_sample_next =
// node_sample[r].
struct DraftTopBParams {
  const float* logits = nullptr;       // [rows, vocab]
  int32_t* tokens = nullptr;           // [rows * b]
  const int32_t* paths = nullptr;      // [rows, path_stride]
  const int32_t* node_sample = nullptr;  // [rows]
  int32_t* paths_next = nullptr;       // [rows * b, path_stride] or nullptr (last level)
  int32_t* node_sample_next = nullptr;  // [rows * b] or nullptr
  int32_t rows = 0;
  int32_t vocab = 0;
  int32_t b = 1;         // 1 .. kDraftMaxBranching, <= vocab
  int32_t path_len = 0;  // tokens in each row of paths
  int32_t path_stride = 0;
};
absl::Status DraftTopB(const DraftTopBParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
