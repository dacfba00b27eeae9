// Activations to FP8 (E4M3) for the W8A8 GEMMs (engine/cuda/fp8_gemm.h): dynamic scales, one
// per token (a whole row) or one per 128 consecutive elements of a token (the group the
// fine-grained FP8 checkpoints' 128 x 128 weight blocks pair with).
//
// The rule, per group g of row r (the same as model::QuantizeFp8PerChannel's for weights):
//   amax  = max |x|  over the group;
//   scale = fp32(amax / 448), or 1 where that is 0 (a group of zeros, or of values too small);
//   code  = E4M3(fp32(x / scale)), round to nearest even, saturating at +-448;
// so that x ~= Fp8E4M3ToFloat(code) * scale. A NaN element gets the NaN code and leaves its
// group's scale to the other elements; an infinite one makes its group's scale infinite.
//
// Layout: codes row-major [rows, cols]; scales row-major [rows, groups] with groups =
// ceil(cols / group) (per token: [rows], cuBLASLt's outer-vector scale), or with group_major
// [groups, ld] (ld = max(rows, pad_rows)), each group's scales of all rows side by side.
// Rows in [rows, pad_rows) are padding: zero codes and scale 1, so that a GEMM can run on a
// whole number of row groups (engine/cuda/fp8_gemm.h says which scaling needs what).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace banyan::kernels::cuda {

constexpr float kFp8E4M3Max = 448.0f;
constexpr int32_t kFp8Group = 128;

struct QuantizeFp8Params {
  const void* in = nullptr;  // [rows, cols] of `dtype` (fp32 when in_f32), row stride in_stride
  bool in_f32 = false;       // fp32 input (weights quantized on the device)
  int64_t in_stride = 0;     // 0: cols
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t group = 0;         // cols (one scale per token) or kFp8Group
  uint8_t* codes = nullptr;  // [rows, cols], dense
  float* scales = nullptr;   // [rows, ceil(cols / group)], or group_major (see the top)
  int64_t pad_rows = 0;      // padding rows up to this count (0: none)
  bool group_major = false;  // scales [groups, max(rows, pad_rows)]
};

// InvalidArgument for a group other than cols or kFp8Group, or empty pointers.
absl::Status QuantizeRowsFp8(DType dtype, const QuantizeFp8Params& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
