// Weight preparation on the GPU: narrowing fp32 weights to the model dtype after upload, and
// synthetic ("dummy") weights generated in place for large shapes, with no host round trip.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace banyan::kernels::cuda {

// dst[i] = round_to_nearest(src[i]) for i in [0, n).
absl::Status ConvertFromF32(DType dtype, const float* src, int64_t n, void* dst,
                            cudaStream_t stream);

// Fills elements [0, n) of tensor number `slot` (its index in ListTensorSlots) exactly as
// model/dummy_weights.h documents for MakeDummyWeights: value e = offset + scale *
// ApproxNormal(counter (seed, slot, e)), computed in fp32 without contraction so that it equals
// the host's value bit for bit before the final rounding to the dtype.
struct DummyFillParams {
  void* dst = nullptr;  // [n], dtype, or fp32 when to_f32
  int64_t n = 0;
  uint64_t seed = 0;
  int32_t slot = 0;
  float scale = 1.0f;   // 0.05 for norms, 1 / sqrt(in_features) for matrices
  float offset = 0.0f;  // 1 for norms, 0 for matrices
  bool to_f32 = false;
};
absl::Status DummyFill(DType dtype, const DummyFillParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
