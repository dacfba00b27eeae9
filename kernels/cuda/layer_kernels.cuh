// Templated kernels behind layer_kernels.h. Each takes its Params struct by value; T is the
// element type (__nv_bfloat16 or __half).
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/kv_fp8.cuh"
#include "kernels/cuda/layer_kernels.h"

namespace banyan::kernels::cuda {

// One block per row; threads stride the row.
template <typename T>
__global__ void EmbeddingKernel(const __grid_constant__ EmbeddingParams p) {
  const int64_t r = blockIdx.x;
  int32_t token = p.tokens[r];
  if (p.feed != nullptr && p.feed[r] >= 0) token = max(p.feed_tokens[p.feed[r]], 0);
  const T* src = static_cast<const T*>(p.table) + static_cast<int64_t>(token) * p.dim;
  float* dst = p.x + r * p.dim;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) dst[i] = ToFloat(src[i]);
}

// Sum over the block; every thread gets the result. `scratch` holds one float per warp.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused by the caller
  return total;
}

// The largest of the block's values of `v`, all >= 0 (an amax: fmaxf skips NaN); every thread
// gets it. `scratch` holds one float per warp, as for BlockSum.
__device__ __forceinline__ float BlockAmax(float v, float* scratch) {
  v = WarpMax(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < static_cast<int>((blockDim.x + 31) / 32); ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();  // scratch may be reused by the caller
  return m;
}

// Row r of an FP8 output past the real rows (the padding a GEMM runs on): zero codes and scale 1,
// per token (scales[r]) or per 128 elements (scales[g * scale_ld + r]). cols % 4 == 0.
__device__ __forceinline__ void WriteFp8PaddingRow(uint8_t* codes, float* scales, int cols,
                                                   bool per_token, int64_t scale_ld, int64_t r) {
  auto* row = reinterpret_cast<uint32_t*>(codes + r * cols);
  for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) row[i] = 0;
  if (per_token) {
    if (threadIdx.x == 0) scales[r] = 1.0f;
    return;
  }
  for (int g = threadIdx.x; g < cols / kFp8Group; g += blockDim.x) scales[g * scale_ld + r] = 1.0f;
}

// One block per row.
template <typename T>
__global__ void RmsNormKernel(const __grid_constant__ RmsNormParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t src = p.row_index != nullptr ? p.row_index[r] : r;
  const float* x = p.x + src * p.dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) ss += x[i] * x[i];
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(p.dim) + p.eps);
  T* out = static_cast<T*>(p.out) + r * p.dim;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = FromFloat<T>(x[i] * inv * p.weight[i]);
}

// One block per row, the row in registers: each thread holds up to kRmsVecs float4 vectors of it
// (one read of x instead of two), the weight read as float4 and the output written four elements
// (8 bytes) at a time. Needs dim % 4 == 0, dim <= 4 * kRmsVecs * 1024 and 16-byte aligned x and
// weight (the dispatcher checks; otherwise RmsNormKernel above).
inline constexpr int kRmsVecs = 8;

// Four values (already rounded to the model dtype) to E4M3 by fp8_quant.h's rule, packed.
__device__ __forceinline__ uint32_t Fp8CodesOf4(float a, float b, float c, float d, float scale) {
  const float v[4] = {a, b, c, d};
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    packed |= uint32_t{__nv_cvt_float_to_fp8(__fdiv_rn(v[j], scale), __NV_SATFINITE, __NV_E4M3)}
              << (8 * j);
  }
  return packed;
}

// fp8_quant.h's scale of a group whose amax is `amax` (NaN elements already skipped).
__device__ __forceinline__ float Fp8ScaleOf(float amax) {
  const float scale = __fdiv_rn(amax, kFp8E4M3Max);
  return scale > 0.0f ? scale : 1.0f;
}

template <typename T>
__global__ void RmsNormVecKernel(const __grid_constant__ RmsNormParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int nv = p.dim / 4;
  const bool fp8 = p.fp8_codes != nullptr;
  const bool per_token = p.fp8_group == p.dim;
  const int64_t scale_ld = max(p.rows, p.fp8_pad_rows);
  if (r >= p.rows) {  // an FP8 padding row
    WriteFp8PaddingRow(p.fp8_codes, p.fp8_scales, p.dim, per_token, scale_ld, r);
    return;
  }
  const int64_t src = p.row_index != nullptr ? p.row_index[r] : r;
  const auto* x = reinterpret_cast<const float4*>(p.x + src * p.dim);
  float4 v[kRmsVecs];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsVecs; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    v[k] = i < nv ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(p.dim) + p.eps);
  const auto* w = reinterpret_cast<const float4*>(p.weight);
  using Pair = typename PairOf<T>::Type;
  Pair* out = reinterpret_cast<Pair*>(static_cast<T*>(p.out) + r * p.dim);
  float amax = 0.0f;  // fmaxf skips NaN, as QuantizeRowsFp8 does
#pragma unroll
  for (int k = 0; k < kRmsVecs; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= nv) break;
    const float4 wv = w[i];
    Pair o[2] = {FromFloat2<T>(v[k].x * inv * wv.x, v[k].y * inv * wv.y),
                 FromFloat2<T>(v[k].z * inv * wv.z, v[k].w * inv * wv.w)};
    *reinterpret_cast<uint2*>(out + 2 * i) = *reinterpret_cast<const uint2*>(o);
    if (fp8) {  // keep the rounded values: the codes are of what `out` holds
      const float2 lo = ToFloat2(o[0]), hi = ToFloat2(o[1]);
      v[k] = make_float4(lo.x, lo.y, hi.x, hi.y);
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(lo.x), fabsf(lo.y)), fmaxf(fabsf(hi.x), fabsf(hi.y))));
    }
  }
  if (!fp8) return;
  auto* codes = reinterpret_cast<uint32_t*>(p.fp8_codes + r * p.dim);
  if (per_token) {
    const float scale = Fp8ScaleOf(BlockAmax(amax, scratch));
    if (threadIdx.x == 0) p.fp8_scales[r] = scale;
#pragma unroll
    for (int k = 0; k < kRmsVecs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= nv) break;
      codes[i] = Fp8CodesOf4(v[k].x, v[k].y, v[k].z, v[k].w, scale);
    }
    return;
  }
  // Per 128 elements: a warp's 32 vectors of step k are one aligned group (blockDim.x is a
  // multiple of 32, dim of 128: the dispatcher checks).
#pragma unroll
  for (int k = 0; k < kRmsVecs; ++k) {
    const int i0 = (threadIdx.x & ~31) + k * blockDim.x;  // the warp's first vector
    if (i0 >= nv) break;
    const int i = threadIdx.x + k * blockDim.x;
    const float a = WarpMax(fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)),
                                  fmaxf(fabsf(v[k].z), fabsf(v[k].w))));
    const float scale = Fp8ScaleOf(a);
    if ((threadIdx.x & 31) == 0) p.fp8_scales[(i0 / 32) * scale_ld + r] = scale;
    codes[i] = Fp8CodesOf4(v[k].x, v[k].y, v[k].z, v[k].w, scale);
  }
}

// One block per token (grid-stride over tokens), its threads over (head, rotation pair) with
// 32-bit index arithmetic; heads are the q heads, then the k heads, then the v heads (which are
// only copied).
template <typename T, typename In>
__global__ void RopeKvKernel(const __grid_constant__ RopeKvParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  const int d = p.kv.head_dim, half = d / 2;
  const int hq = p.num_q_heads, hkv = p.kv.num_kv_heads;
  const int heads = hq + 2 * hkv;
  const int pairs = heads * half;
  const bool fp8 = KvIsFp8(p.kv);  // K and V are WriteKvFp8Kernel's
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const In* row = static_cast<const In*>(p.qkv) + t * static_cast<int64_t>(heads) * d;
    const bool write = p.write_kv[t] != 0;
    const float pos = static_cast<float>(p.positions[t]);
    const int64_t chunk_base = write ? p.slot_chunk[t] * p.kv.chunk_stride : 0;
    const int slot = write ? p.slot_index[t] : 0;
    for (int u = threadIdx.x; u < pairs; u += blockDim.x) {
      const int h = u / half, i = u - h * half;
      const In* src = row + h * d;
      if (h >= hq + hkv) {  // V: copy the pair (2i, 2i + 1)
        if (!write || fp8) continue;
        const int hv = h - hq - hkv;
        T* dst = static_cast<T*>(p.kv.base) + chunk_base +
                 (static_cast<int64_t>(hv) * p.kv.chunk_size + slot) * d + p.kv.v_offset;
        *reinterpret_cast<typename PairOf<T>::Type*>(dst + 2 * i) =
            FromFloat2<T>(ToFloat(src[2 * i]), ToFloat(src[2 * i + 1]));
        continue;
      }
      const bool is_k = h >= hq;
      if (is_k && (!write || fp8)) continue;
      const int a = p.interleaved ? 2 * i : i;
      const int b = p.interleaved ? 2 * i + 1 : i + half;
      float sn, cs;
      sincosf(pos * p.inv_freq[i], &sn, &cs);
      const float x0 = ToFloat(src[a]), x1 = ToFloat(src[b]);
      const float y0 = x0 * cs - x1 * sn;
      const float y1 = x0 * sn + x1 * cs;
      T* dst;
      if (is_k) {
        dst = static_cast<T*>(p.kv.base) + chunk_base +
              (static_cast<int64_t>(h - hq) * p.kv.chunk_size + slot) * d;
      } else {
        dst = static_cast<T*>(p.q_out) + (t * hq + h) * d;
      }
      dst[a] = FromFloat<T>(y0);
      dst[b] = FromFloat<T>(y1);
    }
  }
}

// RopeKvKernel with 16-byte accesses (head_dim % 16 == 0): per token the head_dim / 2 rotation
// angles' cos and sin are computed once into shared memory (not once per head), then each thread
// takes units of eight elements: with interleaved pairs (2i, 2i + 1), eight consecutive
// elements (four pairs); otherwise elements [8j, 8j + 8) and their partners [8j + d/2, ...).
// Same rounding as RopeKvKernel: sincosf of pos * inv_freq[i], products in fp32, one rounding
// to the dtype. Shared memory: head_dim floats.
template <typename T, typename In>
__global__ void RopeKvVecKernel(const __grid_constant__ RopeKvParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  extern __shared__ float rope_cs[];  // [half] cos, then [half] sin
  const int d = p.kv.head_dim, half = d / 2;
  const int hq = p.num_q_heads, hkv = p.kv.num_kv_heads;
  const int heads = hq + 2 * hkv;
  const int per_head = p.interleaved ? d / 8 : half / 8;  // units per head
  const int units = heads * per_head;
  const bool fp8 = KvIsFp8(p.kv);  // K and V are WriteKvFp8Kernel's
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const bool write = p.write_kv[t] != 0;
    const float pos = static_cast<float>(p.positions[t]);
    __syncthreads();  // the previous token's angles are no longer read
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      sincosf(pos * p.inv_freq[i], &rope_cs[half + i], &rope_cs[i]);
    }
    __syncthreads();
    const In* row = static_cast<const In*>(p.qkv) + t * static_cast<int64_t>(heads) * d;
    const int64_t chunk_base = write ? p.slot_chunk[t] * p.kv.chunk_stride : 0;
    const int slot = write ? p.slot_index[t] : 0;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int h = u / per_head, j = u - h * per_head;
      const bool is_q = h < hq, is_v = h >= hq + hkv;
      if (!is_q && (!write || fp8)) continue;
      T* dst;
      if (is_q) {
        dst = static_cast<T*>(p.q_out) + (t * hq + h) * d;
      } else {
        const int kh = is_v ? h - hq - hkv : h - hq;
        dst = static_cast<T*>(p.kv.base) + chunk_base +
              (static_cast<int64_t>(kh) * p.kv.chunk_size + slot) * d + (is_v ? p.kv.v_offset : 0);
      }
      const In* src = row + h * d;
      if (p.interleaved) {
        float f[8];
        Load8(src + 8 * j, f);
        if (!is_v) {
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const float cs = rope_cs[4 * j + m], sn = rope_cs[half + 4 * j + m];
            const float x0 = f[2 * m], x1 = f[2 * m + 1];
            f[2 * m] = x0 * cs - x1 * sn;
            f[2 * m + 1] = x0 * sn + x1 * cs;
          }
        }
        Store8<T>(dst + 8 * j, f);
      } else {
        float a[8], b[8];
        Load8(src + 8 * j, a);
        Load8(src + half + 8 * j, b);
        if (!is_v) {
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const float cs = rope_cs[8 * j + m], sn = rope_cs[half + 8 * j + m];
            const float x0 = a[m], x1 = b[m];
            a[m] = x0 * cs - x1 * sn;
            b[m] = x0 * sn + x1 * cs;
          }
        }
        Store8<T>(dst + 8 * j, a);
        Store8<T>(dst + half + 8 * j, b);
      }
    }
  }
}

// K and V into an FP8 cache (kernels/kv_fp8.h), beside RopeKvKernel / RopeKvVecKernel, which
// then write only q. One warp per (token, kv head, K or V) of a token with write_kv: lane l
// holds rotation pairs l, l + 32, .. (kKvFp8MaxPairsPerLane at most: head_dim <= 256), K rotated
// as RopeKvKernel does (sincosf of pos * inv_freq[i], products in fp32), V as projected; the
// row's amax over its non-NaN values by shuffles, then its exponent and codes.
inline constexpr int kKvFp8MaxPairsPerLane = 4;

template <typename In>
__global__ void WriteKvFp8Kernel(const __grid_constant__ RopeKvParams p) {
  GridDependencyWait();
  const int d = p.kv.head_dim, half = d / 2;
  const int hq = p.num_q_heads, hkv = p.kv.num_kv_heads;
  const int heads = hq + 2 * hkv;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t units = static_cast<int64_t>(p.tokens) * 2 * hkv;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       u < units; u += warps) {
    const int64_t t = u / (2 * hkv);
    const int hh = static_cast<int>(u - t * 2 * hkv);  // k heads, then v heads
    if (p.write_kv[t] == 0) continue;                  // warp-uniform
    const bool is_v = hh >= hkv;
    const int kh = is_v ? hh - hkv : hh;
    const In* src = static_cast<const In*>(p.qkv) + t * static_cast<int64_t>(heads) * d +
                    static_cast<int64_t>(hq + hh) * d;
    const float pos = static_cast<float>(p.positions[t]);
    float y0[kKvFp8MaxPairsPerLane], y1[kKvFp8MaxPairsPerLane];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kKvFp8MaxPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      y0[j] = y1[j] = 0.0f;
      if (i >= half) continue;
      const int a = p.interleaved ? 2 * i : i;
      const int b = p.interleaved ? 2 * i + 1 : i + half;
      const float x0 = ToFloat(src[a]), x1 = ToFloat(src[b]);
      if (is_v) {
        y0[j] = x0;
        y1[j] = x1;
      } else {
        float sn, cs;
        sincosf(pos * p.inv_freq[i], &sn, &cs);
        y0[j] = x0 * cs - x1 * sn;
        y1[j] = x0 * sn + x1 * cs;
      }
      amax = fmaxf(amax, fmaxf(fabsf(y0[j]), fabsf(y1[j])));  // fmaxf skips NaN
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    const int e = KvFp8Exponent(amax);
    const float inv = KvFp8ScaleDev(-e);
    const int slot = p.slot_index[t];
    const int64_t chunk = p.slot_chunk[t];
    uint8_t* row = static_cast<uint8_t*>(p.kv.base) + chunk * p.kv.chunk_stride +
                   (static_cast<int64_t>(kh) * p.kv.chunk_size + slot) * d +
                   (is_v ? p.kv.v_offset : 0);
#pragma unroll
    for (int j = 0; j < kKvFp8MaxPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i >= half) continue;
      row[p.interleaved ? 2 * i : i] = QuantizeKvFp8(y0[j], inv);
      row[p.interleaved ? 2 * i + 1 : i + half] = QuantizeKvFp8(y1[j], inv);
    }
    if (lane == 0) {
      static_cast<int8_t*>(p.kv.base)[KvFp8ExpOffset(p.kv, chunk, kh, slot) +
                                      (is_v ? KvFp8VExpStride(p.kv) : 0)] =
          static_cast<int8_t>(e);
    }
  }
}

// One warp per (token, head): heads are the q heads, then the k heads, then the v heads (bias
// only). Each lane holds head_dim / 32 values (rounded up) in registers between the passes.
template <int MAX_PER_LANE>
__global__ void QkvBiasNormKernel(const __grid_constant__ QkvBiasNormParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  const int hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_dim;
  const int heads = hq + 2 * hkv;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(p.tokens) * heads) return;
  const int h = static_cast<int>(warp % heads);
  const bool is_v = h >= hq + hkv;
  const float* weight = h < hq ? p.q_norm : p.k_norm;
  if (is_v && p.bias == nullptr) return;
  float* x = p.qkv + warp * d;  // rows are heads * d long, so (token, head) is warp * d
  float v[MAX_PER_LANE];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < MAX_PER_LANE; ++k) {
    const int i = lane + 32 * k;
    v[k] = 0.0f;
    if (i < d) {
      v[k] = x[i] + (p.bias != nullptr ? p.bias[static_cast<int64_t>(h) * d + i] : 0.0f);
      ss += v[k] * v[k];
    }
  }
  float inv = 1.0f;
  const bool norm = !is_v && weight != nullptr;
  if (norm) inv = rsqrtf(WarpSum(ss) / static_cast<float>(d) + p.eps);
#pragma unroll
  for (int k = 0; k < MAX_PER_LANE; ++k) {
    const int i = lane + 32 * k;
    if (i < d) x[i] = norm ? v[k] * inv * weight[i] : v[k];
  }
}

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

// Rows over blockIdx.y (grid-stride), a row's elements over blockIdx.x and the threads, eight
// at a time with 16-byte accesses when hidden % 8 == 0 (every row then starts aligned), else
// one at a time. In: fp32 or
// the dtype (SwiGluParams::gate_up_in_dtype).
template <typename T, typename In>
__global__ void SwiGluKernel(const __grid_constant__ SwiGluParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  const int n = p.hidden;
  const bool vec8 = n % 8 == 0;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const In* g = static_cast<const In*>(p.gate_up) + r * 2 * n;
    const In* u = g + n;
    T* out = static_cast<T*>(p.out) + r * n;
    if (vec8) {  // 16-byte loads and stores of the dtype (two 16-byte loads per 8 fp32)
      for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n / 8; k += gridDim.x * blockDim.x) {
        float a[8], b[8];
        Load8(g + 8 * k, a);
        Load8(u + 8 * k, b);
#pragma unroll
        for (int m = 0; m < 8; ++m) a[m] = Silu(a[m]) * b[m];
        Store8<T>(out + 8 * k, a);
      }
    } else {
      for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = FromFloat<T>(Silu(ToFloat(g[i])) * ToFloat(u[i]));
      }
    }
  }
}

// SwiGLU with its output also quantized to FP8 (SwiGluParams::fp8_codes): one block per row
// (rows past p.rows are padding: zero codes, scale 1), each thread holding up to kSwiGluVecs
// vectors of 8 outputs, rounded to the dtype as SwiGluKernel rounds them, between the amax and
// the codes. Per 128 elements, a group is 16 vectors: a half warp's at one step (the block's
// threads are a multiple of 32). Needs hidden % 8 == 0 and hidden / 8 <= kSwiGluVecs * 1024.
inline constexpr int kSwiGluVecs = 8;
// The SwiGLU outputs of the fused FP8 kernels, each thread's vectors of 8 from `first` in steps of
// blockDim.x, up to kSwiGluVecs below `end`: written to out in the dtype, kept in y as the
// dtype rounds them (zeros past end), their amax returned (fmaxf skips NaN, as QuantizeRowsFp8
// does).
template <typename T, typename In>
__device__ __forceinline__ float SwiGluVectors(const In* g, const In* u, T* out, int first,
                                               int end, float (&y)[kSwiGluVecs][8]) {
  using Pair = typename PairOf<T>::Type;
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kSwiGluVecs; ++k) {
    const int i = first + k * static_cast<int>(blockDim.x);
#pragma unroll
    for (int m = 0; m < 8; ++m) y[k][m] = 0.0f;
    if (i >= end) continue;
    float a[8], b[8];
    Load8(g + 8 * i, a);
    Load8(u + 8 * i, b);
    uint4 raw;
    auto* h = reinterpret_cast<Pair*>(&raw);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      h[m] = FromFloat2<T>(Silu(a[2 * m]) * b[2 * m], Silu(a[2 * m + 1]) * b[2 * m + 1]);
      const float2 f = ToFloat2(h[m]);
      y[k][2 * m] = f.x;
      y[k][2 * m + 1] = f.y;
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    *reinterpret_cast<uint4*>(out + 8 * i) = raw;
  }
  return amax;
}

template <typename T, typename In>
__global__ void SwiGluFp8Kernel(const __grid_constant__ SwiGluParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  __shared__ float warp_max[32];
  const int64_t r = blockIdx.x;
  const int n = p.hidden, nv = n / 8;
  const bool per_token = p.fp8_group == n;
  const int64_t scale_ld = max(p.rows, p.fp8_pad_rows);
  auto* codes = reinterpret_cast<uint2*>(p.fp8_codes + r * n);
  if (r >= p.rows) {  // an FP8 padding row
    WriteFp8PaddingRow(p.fp8_codes, p.fp8_scales, n, per_token, scale_ld, r);
    return;
  }
  const In* g = static_cast<const In*>(p.gate_up) + r * 2 * n;
  const In* u = g + n;
  T* out = static_cast<T*>(p.out) + r * n;
  float y[kSwiGluVecs][8];
  const float amax = SwiGluVectors<T, In>(g, u, out, threadIdx.x, nv, y);
  auto codes_of = [&](int k, float scale) {
    return make_uint2(Fp8CodesOf4(y[k][0], y[k][1], y[k][2], y[k][3], scale),
                      Fp8CodesOf4(y[k][4], y[k][5], y[k][6], y[k][7], scale));
  };
  if (per_token) {
    const float scale = Fp8ScaleOf(BlockAmax(amax, warp_max));
    if (threadIdx.x == 0) p.fp8_scales[r] = scale;
#pragma unroll
    for (int k = 0; k < kSwiGluVecs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= nv) break;
      codes[i] = codes_of(k, scale);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kSwiGluVecs; ++k) {
    if (k * static_cast<int>(blockDim.x) >= nv) break;  // the same for the whole block
    const int i = threadIdx.x + k * blockDim.x;
    float a = 0.0f;  // the shuffles below run on every lane: y is 0 past the row
#pragma unroll
    for (int m = 0; m < 8; ++m) a = fmaxf(a, fabsf(y[k][m]));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (i >= nv) continue;  // a whole half warp (nv is a multiple of 16)
    const float scale = Fp8ScaleOf(a);
    if ((threadIdx.x & 15) == 0) p.fp8_scales[(i / 16) * scale_ld + r] = scale;
    codes[i] = codes_of(k, scale);
  }
}

// The same outputs as SwiGluFp8Kernel's with per-token scales, for a few rows: a thread block
// cluster of kSwiGluCluster blocks per row (grid kSwiGluCluster x rows), each a slice of the row
// with one vector of 8 outputs per thread at a time, up to kSwiGluVecs. The row's amax is the
// fmaxf of the blocks' amaxes, read across the cluster from each block's shared memory (sm_90),
// so codes and scale are bit for bit those of the one-block kernel. One block per row leaves all
// but a few SMs idle at decode batch 1-8; a cluster spreads a row over eight.
inline constexpr int kSwiGluCluster = 8;
template <typename T, typename In>
__global__ void SwiGluFp8ClusterKernel(const __grid_constant__ SwiGluParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  GridDependencyWait();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float warp_max[32];
  __shared__ float block_max;
  const int64_t r = blockIdx.y;
  const int part = static_cast<int>(cluster.block_rank());
  const int n = p.hidden, nv = n / 8;
  if (r >= p.rows) {  // an FP8 padding row: the whole cluster leaves together
    if (part == 0) WriteFp8PaddingRow(p.fp8_codes, p.fp8_scales, n, true, 0, r);
    return;
  }
  const int per = (nv + kSwiGluCluster - 1) / kSwiGluCluster;
  const int v0 = part * per, v1 = min(nv, v0 + per);
  const In* g = static_cast<const In*>(p.gate_up) + r * 2 * n;
  const In* u = g + n;
  T* out = static_cast<T*>(p.out) + r * n;
  auto* codes = reinterpret_cast<uint2*>(p.fp8_codes + r * n);
  float y[kSwiGluVecs][8];
  float amax = SwiGluVectors<T, In>(g, u, out, v0 + threadIdx.x, v1, y);
  amax = BlockAmax(amax, warp_max);
  if (threadIdx.x == 0) block_max = amax;
  cluster.sync();  // every block's amax is in its shared memory
  float row_max = 0.0f;
  for (int b = 0; b < kSwiGluCluster; ++b) {
    row_max = fmaxf(row_max, *cluster.map_shared_rank(&block_max, b));
  }
  cluster.sync();  // no block leaves while another may still read its amax
  const float scale = Fp8ScaleOf(row_max);
  if (part == 0 && threadIdx.x == 0) p.fp8_scales[r] = scale;
#pragma unroll
  for (int k = 0; k < kSwiGluVecs; ++k) {
    const int i = v0 + threadIdx.x + k * blockDim.x;
    if (i >= v1) break;
    codes[i] = make_uint2(Fp8CodesOf4(y[k][0], y[k][1], y[k][2], y[k][3], scale),
                          Fp8CodesOf4(y[k][4], y[k][5], y[k][6], y[k][7], scale));
  }
#endif
}

// Block b copies one (layer, k|v, kv head) run of slots with 16-byte vectors.
__global__ void CopyKvSlotsKernel(const __grid_constant__ CopyKvSlotsParams p) {
  const int hkv = p.kv.num_kv_heads, d = p.kv.head_dim, c = p.kv.chunk_size;
  const int layer = blockIdx.x / (2 * hkv);
  const int run = blockIdx.x % (2 * hkv);  // k|v * hkv + head: runs are c * d elements apart
  const int64_t off = layer * p.layer_stride + static_cast<int64_t>(run) * c * d;
  const auto* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.kv.base) + off +
                                                   p.src * p.kv.chunk_stride +
                                                   static_cast<int64_t>(p.slot_begin) * d);
  auto* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.kv.base) + off +
                                       p.dst * p.kv.chunk_stride +
                                       static_cast<int64_t>(p.dst_begin) * d);
  const int vecs = (p.slot_end - p.slot_begin) * d / 8;
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) dst[i] = src[i];
}

// CopyKvSlotsKernel for an FP8 cache: block b copies one (layer, k|v, kv head) run of codes
// (16-byte vectors where head_dim, the strides and the base allow, bytes otherwise), then its
// exponents.
__global__ void CopyKvSlotsFp8Kernel(const __grid_constant__ CopyKvSlotsParams p) {
  const int hkv = p.kv.num_kv_heads, d = p.kv.head_dim, c = p.kv.chunk_size;
  const int layer = blockIdx.x / (2 * hkv);
  const int run = blockIdx.x % (2 * hkv);
  const auto* base = static_cast<const uint8_t*>(p.kv.base) + layer * p.layer_stride;
  auto* dbase = static_cast<uint8_t*>(p.kv.base) + layer * p.layer_stride;
  const int64_t off = static_cast<int64_t>(run) * c * d;
  const uint8_t* src = base + off + p.src * p.kv.chunk_stride + static_cast<int64_t>(p.slot_begin) * d;
  uint8_t* dst = dbase + off + p.dst * p.kv.chunk_stride + static_cast<int64_t>(p.dst_begin) * d;
  const int bytes = (p.slot_end - p.slot_begin) * d;
  const bool vec = d % 16 == 0 && p.kv.chunk_stride % 16 == 0 && p.layer_stride % 16 == 0 &&
                   (reinterpret_cast<uintptr_t>(p.kv.base) & 15) == 0;  // uniform
  if (vec) {
    for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
  } else {
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
  const int64_t eoff = p.kv.scale_offset + static_cast<int64_t>(run) * c;
  const uint8_t* esrc = base + p.src * p.kv.chunk_stride + eoff + p.slot_begin;
  uint8_t* edst = dbase + p.dst * p.kv.chunk_stride + eoff + p.dst_begin;
  for (int i = threadIdx.x; i < p.slot_end - p.slot_begin; i += blockDim.x) edst[i] = esrc[i];
}

// (value, index) pairs: larger value wins, then the lower index.
__device__ __forceinline__ void ArgmaxCombine(float& v, int& idx, float v2, int idx2) {
  if (v2 > v || (v2 == v && idx2 < idx)) {
    v = v2;
    idx = idx2;
  }
}

// One block per row.
__global__ void ArgmaxKernel(const __grid_constant__ ArgmaxParams p) {
  GridDependencyWait();  // launched early in a step's graph (EarlyLaunchKernels)
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.vocab;
  float best = -INFINITY;
  int best_idx = INT_MAX;
  for (int i = threadIdx.x; i < p.vocab; i += blockDim.x) {
    float v = row[i];
    if (isnan(v)) v = -INFINITY;
    ArgmaxCombine(best, best_idx, v, i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, best_idx, o);
    ArgmaxCombine(best, best_idx, v2, i2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) ArgmaxCombine(best, best_idx, sv[w], si[w]);
    p.out[blockIdx.x] = best == -INFINITY ? -1 : best_idx;
  }
}

}  // namespace banyan::kernels::cuda
