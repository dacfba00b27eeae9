// Paged decode attention kernels (see attention.h), the generic any-head_dim kernels shared by
// decode and prefill, and the log-sum-exp merge. Scores and log-sum-exps are kept in log2 units
// (logits pre-multiplied by scale * log2(e)) so that every exponential is one exp2f.
#pragma once

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {

inline constexpr int kDecodeWarps = 4;
inline constexpr int kDecodeRowsPerStep = 4;  // K/V rows each lane group keeps in flight

// One CTA per (item, kv head x q-head tile). Lanes form groups of HEAD_DIM / 8 threads, each
// thread holding 8 elements of a row; a group reads kDecodeRowsPerStep consecutive K and V rows
// per step (all loads issued before any use) and keeps its own online-softmax state for HPC q
// heads; the groups' states are merged through shared memory at the end.
template <int HEAD_DIM, int HPC, typename T>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    PagedDecodeKernel(const __grid_constant__ PagedDecodeParams p) {
  constexpr int TPR = HEAD_DIM / 8;           // threads per K/V row
  constexpr int GPW = 32 / TPR;               // lane groups per warp
  constexpr int NG = GPW * kDecodeWarps;      // lane groups per CTA
  constexpr int U = kDecodeRowsPerStep;
  static_assert(HEAD_DIM % 8 == 0 && TPR <= 32 && 32 % TPR == 0, "unsupported HEAD_DIM");
  __shared__ float sm_m[NG][HPC];
  __shared__ float sm_l[NG][HPC];
  __shared__ float sm_o[NG][HPC][HEAD_DIM];

  const int item = blockIdx.x;
  const int hq = p.num_q_heads, hkv = p.kv.num_kv_heads, g = hq / hkv;
  const int tiles = (g + HPC - 1) / HPC;
  const int kvh = blockIdx.y / tiles;
  const int qh0 = kvh * g + (blockIdx.y % tiles) * HPC;
  const int nh = min(HPC, kvh * g + g - qh0);
  const int row = p.item_row[item];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int grp_in_warp = lane / TPR;
  const int grp = warp * GPW + grp_in_warp;
  const int sub = lane % TPR;
  const float scale_log2 = p.scale * kLog2e;

  float q[HPC][8];
  const T* qrow = static_cast<const T*>(p.q) + static_cast<int64_t>(row) * hq * HEAD_DIM;
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    if (h < nh) {
      Load8(qrow + (qh0 + h) * HEAD_DIM + sub * 8, q[h]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] *= scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] = 0.0f;
    }
  }
  float m[HPC], l[HPC], o[HPC][8];
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[h][i] = 0.0f;
  }

  const T* base = static_cast<const T*>(p.kv.base);
  const int s_end = p.item_span_end[item];
  for (int s = p.item_span_begin[item]; s < s_end; ++s) {
    const int b = p.span_begin[s], e = p.span_end[s];
    const T* kp = base + p.span_chunk[s] * p.kv.chunk_stride +
                  static_cast<int64_t>(kvh) * p.kv.chunk_size * HEAD_DIM + sub * 8;
    const T* vp = kp + p.kv.v_offset;
    // Warp-uniform loop: every lane of the warp runs the same iterations (shuffles below).
    for (int tw = b + warp * GPW * U; tw < e; tw += NG * U) {
      const int t0 = tw + grp_in_warp * U;
      uint4 kr[U], vr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (t0 + u < e) {
          kr[u] = *reinterpret_cast<const uint4*>(kp + static_cast<int64_t>(t0 + u) * HEAD_DIM);
          vr[u] = *reinterpret_cast<const uint4*>(vp + static_cast<int64_t>(t0 + u) * HEAD_DIM);
        } else {
          kr[u] = make_uint4(0, 0, 0, 0);
          vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
      float sc[HPC][U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[8];
        Unpack8<T>(kr[u], kf);
#pragma unroll
        for (int h = 0; h < HPC; ++h) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) dot += q[h][i] * kf[i];
#pragma unroll
          for (int off = TPR / 2; off > 0; off >>= 1) {
            dot += __shfl_xor_sync(0xffffffffu, dot, off);
          }
          sc[h][u] = t0 + u < e ? dot : -INFINITY;
        }
      }
      float vf[U][8];
#pragma unroll
      for (int u = 0; u < U; ++u) Unpack8<T>(vr[u], vf[u]);
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        float mx = sc[h][0];
#pragma unroll
        for (int u = 1; u < U; ++u) mx = fmaxf(mx, sc[h][u]);
        const float new_m = fmaxf(m[h], mx);
        if (new_m == -INFINITY) continue;  // nothing seen yet: avoids exp2(-inf - -inf) = NaN
        const float corr = exp2f(m[h] - new_m);
        float sum = 0.0f;
        float pu[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          pu[u] = exp2f(sc[h][u] - new_m);
          sum += pu[u];
        }
        l[h] = l[h] * corr + sum;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float acc = o[h][i] * corr;
#pragma unroll
          for (int u = 0; u < U; ++u) acc += pu[u] * vf[u][i];
          o[h][i] = acc;
        }
        m[h] = new_m;
      }
    }
  }

  // Merge the lane groups' states.
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    if (sub == 0) {
      sm_m[grp][h] = m[h];
      sm_l[grp][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_o[grp][h][sub * 8 + i] = o[h][i];
  }
  __syncthreads();
  const int part = p.item_partial[item];
  for (int idx = threadIdx.x; idx < nh * HEAD_DIM; idx += blockDim.x) {
    const int h = idx / HEAD_DIM, x = idx % HEAD_DIM;
    float mm = -INFINITY;
#pragma unroll
    for (int k = 0; k < NG; ++k) mm = fmaxf(mm, sm_m[k][h]);
    float val = 0.0f, lse = -INFINITY;
    if (mm != -INFINITY) {
      float ll = 0.0f, acc = 0.0f;
#pragma unroll
      for (int k = 0; k < NG; ++k) {
        const float w = exp2f(sm_m[k][h] - mm);  // groups with no tokens: exp2(-inf) = 0
        ll += sm_l[k][h] * w;
        acc += sm_o[k][h][x] * w;
      }
      val = acc / ll;
      lse = mm + log2f(ll);
    }
    const int qh = qh0 + h;
    if (part < 0) {
      static_cast<T*>(p.out)[(static_cast<int64_t>(row) * hq + qh) * HEAD_DIM + x] =
          FromFloat<T>(val);
    } else {
      p.partial_o[(static_cast<int64_t>(part) * hq + qh) * HEAD_DIM + x] = val;
      if (x == 0) p.partial_lse[static_cast<int64_t>(part) * hq + qh] = lse;
    }
  }
}

// Merges a row's partial states: one CTA per (merge row, q head).
template <typename T>
__global__ void MergeStatesKernel(const __grid_constant__ PagedDecodeParams p) {
  const int mr = blockIdx.x, qh = blockIdx.y;
  const int hq = p.num_q_heads, d = p.kv.head_dim;
  const int row = p.merge_row[mr], p0 = p.merge_partial_begin[mr], n = p.merge_count[mr];
  float mm = -INFINITY;
  for (int k = 0; k < n; ++k) mm = fmaxf(mm, p.partial_lse[static_cast<int64_t>(p0 + k) * hq + qh]);
  for (int x = threadIdx.x; x < d; x += blockDim.x) {
    float val = 0.0f;
    if (mm != -INFINITY) {  // all states empty: zero output, no exp2(-inf - -inf)
      float ws = 0.0f, acc = 0.0f;
      for (int k = 0; k < n; ++k) {
        const int64_t st = static_cast<int64_t>(p0 + k) * hq + qh;
        const float w = exp2f(p.partial_lse[st] - mm);
        ws += w;
        acc += w * p.partial_o[st * d + x];
      }
      val = acc / ws;
    }
    static_cast<T*>(p.out)[(static_cast<int64_t>(row) * hq + qh) * d + x] = FromFloat<T>(val);
  }
}

// Generic single-query attention for one warp: any head_dim that is a multiple of 8, up to
// kMaxGenericHeadDim. Lane j scores key j of each block of 32; the output element x lives in
// lane x % 32, slot x / 32. Reads at most `limit` tokens of spans [s_lo, s_hi).
// q_s: the query, pre-scaled to log2 units, in shared memory. State in log2 units.
template <typename T>
__device__ void GenericAttendWarp(const float* q_s, const KvViewDev& kv, int kvh,
                                  const int32_t* span_chunk, const int32_t* span_begin,
                                  const int32_t* span_end, int s_lo, int s_hi, int64_t limit,
                                  float (&o)[kMaxGenericHeadDim / 32], float& m, float& l) {
  constexpr int NX = kMaxGenericHeadDim / 32;
  const int d = kv.head_dim, lane = threadIdx.x % 32;
  m = -INFINITY;
  l = 0.0f;
#pragma unroll
  for (int i = 0; i < NX; ++i) o[i] = 0.0f;
  const T* base = static_cast<const T*>(kv.base);
  int64_t seen = 0;
  for (int s = s_lo; s < s_hi && seen < limit; ++s) {
    const int b = span_begin[s];
    const int64_t left = limit - seen;  // not b + left: limit may be INT64_MAX
    const int e = span_end[s] - b > left ? b + static_cast<int>(left) : span_end[s];
    seen += e - b;
    const T* kp = base + span_chunk[s] * kv.chunk_stride + static_cast<int64_t>(kvh) * kv.chunk_size * d;
    const T* vp = kp + kv.v_offset;
    for (int t0 = b; t0 < e; t0 += 32) {
      const int t = t0 + lane;
      float sc = -INFINITY;
      if (t < e) {
        float dot = 0.0f;
        for (int x = 0; x < d; x += 8) {
          float kf[8];
          Load8(kp + static_cast<int64_t>(t) * d + x, kf);
#pragma unroll
          for (int i = 0; i < 8; ++i) dot += q_s[x + i] * kf[i];
        }
        sc = dot;
      }
      const float bm = WarpMax(sc);
      if (bm == -INFINITY) continue;
      const float new_m = fmaxf(m, bm);
      const float corr = exp2f(m - new_m);
      const float pr = exp2f(sc - new_m);
      l = l * corr + WarpSum(pr);
#pragma unroll
      for (int i = 0; i < NX; ++i) o[i] *= corr;
      const int n = min(32, e - t0);
      for (int j = 0; j < n; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pr, j);
        const T* vrow = vp + static_cast<int64_t>(t0 + j) * d;
#pragma unroll
        for (int i = 0; i < NX; ++i) {
          const int x = lane + 32 * i;
          if (x < d) o[i] += pj * ToFloat(vrow[x]);
        }
      }
      m = new_m;
    }
  }
}

// Loads query `qrow` (head_dim elements) scaled into this warp's shared buffer.
template <typename T>
__device__ __forceinline__ void LoadQueryWarp(const T* qrow, int d, float scale_log2, float* q_s) {
  for (int x = threadIdx.x % 32; x < d; x += 32) q_s[x] = ToFloat(qrow[x]) * scale_log2;
  __syncwarp();
}

// Decode, generic head_dim: one warp per (item, q head); 4 warps per CTA over q heads.
template <typename T>
__global__ void __launch_bounds__(128) GenericDecodeKernel(const __grid_constant__ PagedDecodeParams p) {
  __shared__ float q_s[4][kMaxGenericHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int item = blockIdx.x, qh = blockIdx.y * 4 + warp;
  const int hq = p.num_q_heads, d = p.kv.head_dim;
  if (qh >= hq) return;
  const int kvh = qh / (hq / p.kv.num_kv_heads);
  const int row = p.item_row[item];
  LoadQueryWarp(static_cast<const T*>(p.q) + (static_cast<int64_t>(row) * hq + qh) * d, d,
                p.scale * kLog2e, q_s[warp]);
  float o[kMaxGenericHeadDim / 32], m, l;
  GenericAttendWarp<T>(q_s[warp], p.kv, kvh, p.span_chunk, p.span_begin, p.span_end,
                       p.item_span_begin[item], p.item_span_end[item], INT64_MAX, o, m, l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  const int part = p.item_partial[item];
#pragma unroll
  for (int i = 0; i < kMaxGenericHeadDim / 32; ++i) {
    const int x = lane + 32 * i;
    if (x >= d) continue;
    if (part < 0) {
      static_cast<T*>(p.out)[(static_cast<int64_t>(row) * hq + qh) * d + x] = FromFloat<T>(o[i] * inv);
    } else {
      p.partial_o[(static_cast<int64_t>(part) * hq + qh) * d + x] = o[i] * inv;
    }
  }
  if (part >= 0 && lane == 0) {
    p.partial_lse[static_cast<int64_t>(part) * hq + qh] = l > 0.0f ? m + log2f(l) : -INFINITY;
  }
}

// Prefill, generic head_dim: one warp per (new token, q head).
template <typename T>
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
  GenericAttendWarp<T>(q_s[warp], p.kv, kvh, p.span_chunk, p.span_begin, p.span_end,
                       p.seq_span_begin[seq], p.seq_span_end[seq], limit, o, m, l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxGenericHeadDim / 32; ++i) {
    const int x = lane + 32 * i;
    if (x < d) static_cast<T*>(p.out)[(row * hq + qh) * d + x] = FromFloat<T>(o[i] * inv);
  }
}

}  // namespace banyan::kernels::cuda
