// The W8A8 FP8 product of a few tokens (decode at small batch) as a weight-streaming kernel:
// each block reads 16 output channels' FP8 codes once, 16 bytes per lane with several loads in
// flight, and multiplies them with every token's FP8 activation codes on the FP8 tensor cores
// (mma.sync m16n8k32, sm_89 and later), the block's warps splitting K; fp32 sums, scales applied
// as the GEMM applies them. The same inputs and result as engine/cuda/fp8_gemm.h's cuBLASLt GEMM
// (which runs a product of one token at about half the memory bandwidth on an H100), for
// M <= kFp8GemvMaxRows (the 8 columns of one mma).
//
//   out[m, n] = sum_k code_a(m, k) * sa(m, k) * code_w(n, k) * sw(n, k)  (+ beta * out[m, n])
// with, per row (w_scale_stride == 0): sw(n, k) = w_scales[n], sa(m, k) = a_scales[m]; with
// 128 x 128 blocks (w_scale_stride > 0): sw(n, k) = w_scales[(n / 128) * w_scale_stride + k / 128],
// sa(m, k) = a_scales[(k / 128) * M + m] (group-major, as the GEMM reads them).
// Limits: K a multiple of 16 and codes 16-byte aligned (row stride K).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace banyan::kernels::cuda {

constexpr int64_t kFp8GemvMaxRows = 8;

enum class Fp8GemvOut { kF32, kBf16, kF16 };

struct Fp8GemvParams {
  const uint8_t* w = nullptr;        // [N, K] codes
  const float* w_scales = nullptr;   // [N], or [ceil(N / 128), w_scale_stride]
  int64_t w_scale_stride = 0;        // 0: one scale per row; > 0: 128 x 128 blocks
  const uint8_t* a = nullptr;        // [M, K] codes
  const float* a_scales = nullptr;   // [M], or [ceil(K / 128), M]
  int64_t M = 0, N = 0, K = 0;
  void* out = nullptr;               // [M, N]
  Fp8GemvOut out_type = Fp8GemvOut::kBf16;
  float beta = 0.0f;
};

// InvalidArgument for M outside [0, kFp8GemvMaxRows], K not a multiple of 16, empty pointers.
absl::Status Fp8Gemv(const Fp8GemvParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
