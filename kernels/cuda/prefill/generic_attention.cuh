// Attention for any head_dim (a multiple of 8, up to kMaxGenericHeadDim): one warp per query
// over a span list (GenericAttendWarp), used by the generic prefill kernel below and by TPP's
// phase 2 for head dims without a compiled family (kernels/cuda/tpp/phase2_generic.cuh). Scores
// and log-sum-exps are kept in log2 units (logits pre-multiplied by scale * log2(e)) so that
// every exponential is one exp2f.
#pragma once

#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_fp8.cuh"

namespace banyan::kernels::cuda {

// Each of HW queries' score against K row `t` of the (chunk, kv head) whose K rows start at
// element kp (and whose FP8 exponents start at ke), for one warp lane, each summed in head_dim
// order. q_s: HW rows of kMaxGenericHeadDim. D: head_dim at compile time (the loop unrolled, its
// loads in flight together), 0: any.
template <typename T, bool KV8, int D, int HW>
__device__ __forceinline__ void KeyScores(const float (*q_s)[kMaxGenericHeadDim],
                                          const KvViewDev& kv, int64_t kp, int64_t ke, int t,
                                          float (&dot)[HW]) {
  const int d = D > 0 ? D : kv.head_dim;
#pragma unroll
  for (int h = 0; h < HW; ++h) dot[h] = 0.0f;
#pragma unroll
  for (int x = 0; x < (D > 0 ? D : d); x += 8) {
    float kf[8];
    if constexpr (KV8) {
      Unpack8Kv<T>(LoadKv8<T, true>(kv, kp + static_cast<int64_t>(t) * d + x, ke + t), kf);
    } else {
      Load8(static_cast<const T*>(kv.base) + kp + static_cast<int64_t>(t) * d + x, kf);
    }
#pragma unroll
    for (int h = 0; h < HW; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) dot[h] += q_s[h][x + i] * kf[i];
    }
  }
}

// o += pj * V row `t` (elements from vp, FP8 exponents from ve): element x lives in lane x % 32,
// slot x / 32.
template <typename T, bool KV8>
__device__ __forceinline__ void AddValueRow(float (&o)[kMaxGenericHeadDim / 32], float pj,
                                            const KvViewDev& kv, int64_t vp, int64_t ve, int t) {
  constexpr int NX = kMaxGenericHeadDim / 32;
  const int d = kv.head_dim, lane = threadIdx.x % 32;
  const int64_t vrow = vp + static_cast<int64_t>(t) * d;
  if constexpr (KV8) {
    const float vscale = KvFp8ScaleAt(kv, ve + t);  // once per row
#pragma unroll
    for (int i = 0; i < NX; ++i) {
      const int x = lane + 32 * i;
      if (x < d) o[i] += pj * LoadKv1<T, true>(kv, vrow + x, vscale);
    }
  } else {
    const T* vr = static_cast<const T*>(kv.base) + vrow;
#pragma unroll
    for (int i = 0; i < NX; ++i) {
      const int x = lane + 32 * i;
      if (x < d) o[i] += pj * ToFloat(vr[x]);
    }
  }
}

// Element offsets of the K rows of (chunk, kv head), of its V rows, and of their FP8 exponents.
struct KvRows {
  int64_t kp, vp, ke, ve;
};
__device__ __forceinline__ KvRows KvRowsOf(const KvViewDev& kv, int64_t chunk, int kvh) {
  KvRows r;
  r.kp = chunk * kv.chunk_stride + static_cast<int64_t>(kvh) * kv.chunk_size * kv.head_dim;
  r.vp = r.kp + kv.v_offset;
  r.ke = KvFp8ExpOffset(kv, chunk, kvh, 0);
  r.ve = r.ke + KvFp8VExpStride(kv);
  return r;
}

// The online-softmax step of one block of up to 32 keys: lane j's score sc (-inf for no key).
// Returns the block's probabilities' scale relative to the new maximum and updates m, l, o's
// scale; false when the block holds no key.
__device__ __forceinline__ bool SoftmaxBlock(float sc, float& m, float& l, float& pr,
                                             float (&o)[kMaxGenericHeadDim / 32]) {
  const float bm = WarpMax(sc);
  if (bm == -INFINITY) return false;
  const float new_m = fmaxf(m, bm);
  const float corr = exp2f(m - new_m);
  pr = exp2f(sc - new_m);
  l = l * corr + WarpSum(pr);
#pragma unroll
  for (int i = 0; i < kMaxGenericHeadDim / 32; ++i) o[i] *= corr;
  m = new_m;
  return true;
}

// Generic single-query attention for one warp: any head_dim that is a multiple of 8, up to
// kMaxGenericHeadDim. Lane j scores key j of each block of 32; the output element x lives in
// lane x % 32, slot x / 32. Reads at most `limit` tokens of spans [s_lo, s_hi).
// q_s: the query, pre-scaled to log2 units, in shared memory. State in log2 units.
template <typename T, bool KV8 = false>
__device__ void GenericAttendWarp(const float* q_s, const KvViewDev& kv, int kvh,
                                  const int32_t* span_chunk, const int32_t* span_begin,
                                  const int32_t* span_end, int s_lo, int s_hi, int64_t limit,
                                  float (&o)[kMaxGenericHeadDim / 32], float& m, float& l) {
  constexpr int NX = kMaxGenericHeadDim / 32;
  const int lane = threadIdx.x % 32;
  m = -INFINITY;
  l = 0.0f;
#pragma unroll
  for (int i = 0; i < NX; ++i) o[i] = 0.0f;
  int64_t seen = 0;
  for (int s = s_lo; s < s_hi && seen < limit; ++s) {
    const int b = span_begin[s];
    const int64_t left = limit - seen;  // not b + left: limit may be INT64_MAX
    const int e = span_end[s] - b > left ? b + static_cast<int>(left) : span_end[s];
    seen += e - b;
    const KvRows r = KvRowsOf(kv, span_chunk[s], kvh);
    for (int t0 = b; t0 < e; t0 += 32) {
      const int t = t0 + lane;
      float sc = -INFINITY;
      if (t < e) {
        float dot[1];
        KeyScores<T, KV8, 0, 1>(reinterpret_cast<const float(*)[kMaxGenericHeadDim]>(q_s), kv,
                                r.kp, r.ke, t, dot);
        sc = dot[0];
      }
      float pr;
      if (!SoftmaxBlock(sc, m, l, pr, o)) continue;
      const int n = min(32, e - t0);
      for (int j = 0; j < n; ++j) {
        AddValueRow<T, KV8>(o, __shfl_sync(0xffffffffu, pr, j), kv, r.vp, r.ve, t0 + j);
      }
    }
  }
}

// Loads query `qrow` (head_dim elements) scaled into this warp's shared buffer.
template <typename T>
__device__ __forceinline__ void LoadQueryWarp(const T* qrow, int d, float scale_log2, float* q_s) {
  for (int x = threadIdx.x % 32; x < d; x += 32) q_s[x] = ToFloat(qrow[x]) * scale_log2;
  __syncwarp();
}

// Prefill, generic head_dim: one warp per (new token, q head).
template <typename T, bool KV8 = false>
__global__ void __launch_bounds__(128) GenericPrefillKernel(const __grid_constant__ PrefillParams p) {
  __shared__ float q_s[4][kMaxGenericHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tok = blockIdx.x, qh = blockIdx.y * 4 + warp;
  const int hq = p.num_q_heads, d = p.kv.head_dim;
  if (qh >= hq) return;
  const int kvh = qh / (hq / p.kv.num_kv_heads);
  const int seq = p.token_seq[tok];
  const int64_t row = p.q_row_begin + tok;
  const int64_t limit = p.seq_pos0[seq] + (row - p.seq_q_row[seq]) + 1;
  LoadQueryWarp(static_cast<const T*>(p.q) + (row * hq + qh) * d, d, p.scale * kLog2e, q_s[warp]);
  float o[kMaxGenericHeadDim / 32], m, l;
  GenericAttendWarp<T, KV8>(q_s[warp], p.kv, kvh, p.span_chunk, p.span_begin, p.span_end,
                       p.seq_span_begin[seq], p.seq_span_end[seq], limit, o, m, l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxGenericHeadDim / 32; ++i) {
    const int x = lane + 32 * i;
    if (x < d) static_cast<T*>(p.out)[(row * hq + qh) * d + x] = FromFloat<T>(o[i] * inv);
  }
}

}  // namespace banyan::kernels::cuda
