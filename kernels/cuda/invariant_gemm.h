// The deterministic mode's GEMM: out[M, N] = a[M, K] . w[N, K]^T (+ beta * out), 16-bit operands
// (bf16 or fp16), fp32 sums, row-major as engine/cuda/cublas_gemm.h's RowMajorGemm, with each
// output row the same bit for bit whatever M is.
//
// cuBLAS picks its kernel, tile and split of K by the problem's shape, so the sums of one token's
// row change with the number of tokens in the step (a GEMV at M = 1, split-K at small M, other
// tiles at large M); it cannot be told to keep one. Here every output element is one sum in a
// fixed order: K in slices of 32, each slice as two mma.sync m16n8k16 steps, into one fp32
// accumulator, whatever tile or CTA holds the element. Rows past M and columns past K are zero
// in shared memory, and a zero product leaves the sum as it was, so neither M nor the padding
// reaches a row's result; nor does the tile shape, which is chosen by M (narrow tiles and a deep
// cp.async pipeline for a few rows, 64 x 64 for many). K of any size (16-byte copies where K is a
// multiple of 8, element copies otherwise: the same values land in shared memory either way).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace banyan::kernels::cuda {

struct InvariantGemmParams {
  const void* a = nullptr;  // [M, K] activations, the GEMM's dtype
  const void* w = nullptr;  // [N, K] weights, as stored
  void* out = nullptr;      // [M, N]: fp32 when out_f32, else the GEMM's dtype
  bool out_f32 = true;
  int64_t M = 0, N = 0, K = 0;
  float beta = 0.0f;  // 0: out is only written (never read)
};

// InvalidArgument for empty pointers or sizes outside [0, 2^31).
absl::Status InvariantGemm(DType dtype, const InvariantGemmParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
