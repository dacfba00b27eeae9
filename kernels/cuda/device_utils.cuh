// Device helpers shared by the kernels of kernels/cuda: element conversions, 16-byte vector
// loads and stores, warp reductions. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dtype.h"

namespace banyan::kernels::cuda {

// Programmatic dependent launch (sm_90): no-ops when the grid was launched without it. Before
// sm_90 the instructions do not exist and the launch attribute has no effect (plain stream
// order: a dependent grid starts after its predecessor ends), so nothing is needed there.
// GridDependencyWait: returns once the grids this one depends on have completed and their
// memory is visible; a kernel that may be launched early (PDL, or a graph's programmatic edge)
// calls it before it touches memory they write or read.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// LaunchDependents: lets a grid launched after this one with PDL start now.
__device__ __forceinline__ void LaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

template <typename T>
struct PairOf;
template <>
struct PairOf<__nv_bfloat16> {
  using Type = __nv_bfloat162;
};
template <>
struct PairOf<__half> {
  using Type = __half2;
};

// The C++ element type of a DType, for the runtime dispatch points.
template <DType D>
struct ElementOf;
template <>
struct ElementOf<DType::kBf16> {
  using Type = __nv_bfloat16;
};
template <>
struct ElementOf<DType::kFp16> {
  using Type = __half;
};

__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float2 ToFloat2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
__device__ __forceinline__ float2 ToFloat2(__half2 x) { return __half22float2(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}

template <typename T>
__device__ __forceinline__ typename PairOf<T>::Type FromFloat2(float a, float b);
template <>
__device__ __forceinline__ __nv_bfloat162 FromFloat2<__nv_bfloat16>(float a, float b) {
  return __floats2bfloat162_rn(a, b);
}
template <>
__device__ __forceinline__ __half2 FromFloat2<__half>(float a, float b) {
  return __floats2half2_rn(a, b);
}

// Converts a raw 16-byte vector of eight elements.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&out)[8]) {
  const auto* h = reinterpret_cast<const typename PairOf<T>::Type*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = ToFloat2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Eight elements, one 16-byte load. `p` must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&out)[8]) {
  Unpack8<T>(*reinterpret_cast<const uint4*>(p), out);
}

// Eight fp32 elements, two 16-byte loads. `p` must be 32-byte aligned.
__device__ __forceinline__ void Load8(const float* p, float (&out)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Eight elements, one 16-byte store, rounded to nearest.
template <typename T>
__device__ __forceinline__ void Store8(T* p, const float (&in)[8]) {
  uint4 raw;
  auto* h = reinterpret_cast<typename PairOf<T>::Type*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = FromFloat2<T>(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace banyan::kernels::cuda
