// The element types of weights, activations fed to GEMMs, and the KV cache on the GPU.
// Accumulation is always fp32; the residual stream and GEMM outputs are fp32 too.
#pragma once

#include <cstdint>

namespace banyan::kernels::cuda {

enum class DType : int32_t {
  kBf16,  // __nv_bfloat16 (the default)
  kFp16,  // __half
};

inline constexpr int64_t DTypeBytes(DType) { return 2; }
inline constexpr const char* DTypeName(DType t) { return t == DType::kBf16 ? "bf16" : "fp16"; }

}  // namespace banyan::kernels::cuda
