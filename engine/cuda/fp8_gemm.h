// W8A8 GEMMs on FP8 tensor cores (Hopper) through cuBLASLt: FP8 (E4M3) weights with their
// scales, activations quantized to FP8 per token on the fly (kernels/cuda/fp8_quant.h).
//
//   out[M, N] = sum_k a(m, k) * w(n, k),  a(m, k) = code_a(m, k) * sa(m, k),
//                                         w(n, k) = code_w(n, k) * sw(n, k)
// fp32 accumulation, out rounded once to bf16 (or fp16). Row-major as everywhere in the engine:
// activations [M, K] by rows, weights [N, K] as stored. Two scalings:
//   kPerRow     sw(n, k) = w_scales[n] (one per output channel; a per-tensor checkpoint scale is
//               repeated over the rows at upload), sa(m, k) = a_scales[m] (one per token):
//               cuBLASLt's outer-vector scaling;
//   kBlock128   sw(n, k) = w_scales[(n / 128) * ceil(K / 128) + k / 128] (128 x 128 blocks, the
//               fine-grained checkpoints' layout), sa(m, k) = a_scales[m * ceil(K / 128) + k / 128]
//               (one per 128 elements of a token): cuBLASLt's 2-D block and 1-D vector scaling.
// In cuBLASLt's column-major terms this is out^T = w . a^T with the weights transposed and the
// activations not ("TN", the layout its FP8 kernels need); both scale layouts above are the
// column-major ones it reads for those operands.
//
// Limits (CheckShape): K a multiple of 16 and N of 8 (16-byte rows for FP8 and bf16); pointers
// 16-byte aligned. Plans (descriptors, layouts and the heuristic's algorithm) are cached per
// (scaling, M, N, K, output type): a new decode batch size costs one heuristic query.
//
// Not thread-safe: one per stream owner (the CUDA backend's engine thread).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace banyan::engine::cuda {

enum class Fp8Scaling { kPerRow, kBlock128 };

// How cuBLASLt reads the scales of kBlock128 (gpu_fp8_test checks both against a float64
// product on the GPU):
//  - the activations' 1 x 128 scales group-major, [ceil(K / 128), rows] (QuantizeFp8Params::
//    group_major), not the [rows, ceil(K / 128)] of the formula at the top;
//  - the weights' 128 x 128 scales by block rows, [ceil(N / 128), Fp8BlockScaleStride(K)]: each
//    block row's ceil(K / 128) scales padded to a multiple of 4.
// Both found with a probe on an H100 (cuBLASLt 13.1): a weight of 3 x 2 and one of 2 x 3 blocks
// with scales i + 1 gave block (1, 0) the scale of index 4; an activation of 8 or 12 tokens gave
// token m of group 0 the scale of index m.
inline constexpr bool kFp8ActivationGroupsMajor = true;
inline int64_t Fp8BlockScaleStride(int64_t K) { return ((K + 127) / 128 + 3) / 4 * 4; }

struct Fp8Operand {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
};

class Fp8Gemm {
 public:
  // `workspace_bytes` of device memory for cuBLASLt (split-K and such); 32 MiB is plenty.
  // Products of at most `gemv_max_rows` tokens (at most kernels::cuda::kFp8GemvMaxRows) run as
  // the weight-streaming GEMV of kernels/cuda/fp8_gemv.h instead of cuBLASLt; 0: never.
  static absl::StatusOr<std::unique_ptr<Fp8Gemm>> Create(size_t workspace_bytes = 32u << 20,
                                                         int gemv_max_rows = 0);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // InvalidArgument naming the dimension when N, K cannot run on the FP8 path.
  static absl::Status CheckShape(int64_t N, int64_t K);

  // The rows a GEMM of M tokens runs on: cuBLASLt's 1 x 128 activation scaling takes only a
  // multiple of 4 tokens (CUBLAS_STATUS_NOT_SUPPORTED otherwise, seen on an H100 with cuBLASLt
  // 13.1), so kBlock128 rounds M up and the caller pads the activations
  // (QuantizeFp8Params::pad_rows) and gives the output room for the padding rows.
  static int64_t RowsFor(Fp8Scaling scaling, int64_t M) {
    return scaling == Fp8Scaling::kBlock128 ? (M + 3) / 4 * 4 : M;
  }

  // out[M, N] of `out_type` (CUDA_R_16BF, CUDA_R_16F or CUDA_R_32F) = the product above +
  // beta * out, on `stream` (beta 1 adds into the residual stream, as the bf16 GEMMs do).
  absl::Status Run(Fp8Scaling scaling, const Fp8Operand& w, const Fp8Operand& a, void* out,
                   cudaDataType_t out_type, int64_t M, int64_t N, int64_t K, float beta,
                   cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int>;
  Fp8Gemm() = default;
  absl::StatusOr<Plan*> PlanFor(Fp8Scaling scaling, int64_t M, int64_t N, int64_t K,
                                cudaDataType_t out_type);

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* placeholder_scales_ = nullptr;  // 256 bytes: the scale pointers of a plan's query
  int gemv_max_rows_ = 0;
  size_t workspace_bytes_ = 0;
  absl::flat_hash_map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace banyan::engine::cuda
