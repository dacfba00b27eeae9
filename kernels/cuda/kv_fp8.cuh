// Device side of the FP8 KV cache (kernels/kv_fp8.h): the exponent of a K/V row, and eight codes
// dequantized into the model's dtype (exact: kernels/kv_fp8.h says why), so that the attention
// kernels' matrix products and shared-memory tiles stay what they are for a bf16 / fp16 cache.
// A kernel reads a KV view as FP8 when its scale_offset is non-zero; offsets in elements are
// then offsets in bytes, so a row's element offset computed for the 16-bit cache addresses its
// codes unchanged.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/kv_fp8.h"
#include "kernels/paged_views.h"

namespace banyan::kernels::cuda {

__device__ __forceinline__ bool KvIsFp8(const KvViewDev& kv) { return kv.scale_offset != 0; }

// Byte offset of the exponent of K row (chunk, kv head, slot); its V's is KvFp8VExpStride later.
__device__ __forceinline__ int64_t KvFp8ExpOffset(const KvViewDev& kv, int64_t chunk, int kvh,
                                                  int slot) {
  return chunk * kv.chunk_stride + kv.scale_offset + static_cast<int64_t>(kvh) * kv.chunk_size +
         slot;
}
__device__ __forceinline__ int64_t KvFp8VExpStride(const KvViewDev& kv) {
  return static_cast<int64_t>(kv.num_kv_heads) * kv.chunk_size;
}

// 2^e for e in [kKvFp8MinExp, kKvFp8MaxExp] (a normal float, built from its bits).
__device__ __forceinline__ float KvFp8ScaleDev(int e) { return __int_as_float((127 + e) << 23); }

__device__ __forceinline__ float KvFp8ScaleAt(const KvViewDev& kv, int64_t exp_offset) {
  return KvFp8ScaleDev(static_cast<const int8_t*>(kv.base)[exp_offset]);
}

template <typename DType>
__device__ __forceinline__ uint32_t KvPack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t KvPack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t KvPack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Eight E4M3 codes (little-endian in `codes`) times `scale`, as eight DType values in a uint4.
template <typename DType>
__device__ __forceinline__ uint4 DequantKv8(uint2 codes, float scale) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? codes.x : codes.y;
    const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (i & 1))) & 0xffffu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);  // exact
    const float2 f = __half22float2(__half2(h));
    out[i] = KvPack2<DType>(f.x * scale, f.y * scale);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Eight values of a K/V row as DType: `elem` is the element offset of the eight (computed as for
// a 16-bit cache), `exp_offset` the row's exponent (unused for a 16-bit cache). KV8: the kernel's
// instantiation for an FP8 cache (a template parameter, so that the 16-bit instantiations keep
// their registers and occupancy).
template <typename DType, bool KV8>
__device__ __forceinline__ uint4 LoadKv8(const KvViewDev& kv, int64_t elem, int64_t exp_offset) {
  if constexpr (KV8) {
    const uint2 codes = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(kv.base) + elem);
    return DequantKv8<DType>(codes, KvFp8ScaleAt(kv, exp_offset));
  }
  return *reinterpret_cast<const uint4*>(static_cast<const DType*>(kv.base) + elem);
}

// Eight DType values of a uint4 as floats.
template <typename DType>
__device__ __forceinline__ void Unpack8Kv(const uint4& raw, float (&v)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = static_cast<uint16_t>(w[i] & 0xffffu), hi = static_cast<uint16_t>(w[i] >> 16);
    v[2 * i] = static_cast<float>(*reinterpret_cast<const DType*>(&lo));
    v[2 * i + 1] = static_cast<float>(*reinterpret_cast<const DType*>(&hi));
  }
}

// One element as float (the generic kernels' scalar path); `scale` is its row's 2^e (unused for
// a 16-bit cache).
template <typename DType, bool KV8>
__device__ __forceinline__ float LoadKv1(const KvViewDev& kv, int64_t elem, float scale) {
  if constexpr (KV8) {
    const auto code = static_cast<__nv_fp8_storage_t>(static_cast<const uint8_t*>(kv.base)[elem]);
    const __half_raw h = __nv_cvt_fp8_to_halfraw(code, __NV_E4M3);
    return __half2float(__half(h)) * scale;
  }
  return static_cast<float>(static_cast<const DType*>(kv.base)[elem]);
}

// x * 2^-e (exact) to E4M3, round to nearest even, saturating (kernels/kv_fp8.h).
__device__ __forceinline__ uint8_t QuantizeKvFp8(float x, float inv_scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x * inv_scale, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace banyan::kernels::cuda
