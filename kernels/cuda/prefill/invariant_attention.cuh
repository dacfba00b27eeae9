// The deterministic mode's attention kernel for the head dims without a tensor-core path
// (InvariantAttention, attention.h; 64 and 128 run PrefillMmaKernel, see attention.cu): one CTA
// of four warps per (token, kv head, up to HW of its q heads), decode rows and prefill tokens
// alike. The
// context is cut at fixed positions into pieces of kInvariantPiece; warp w takes pieces w, w + 4,
// w + 8, ... in order, and warp 0 merges the four warps' states in warp order.
//
// The same result, bit for bit, for a query wherever its keys lie. GenericAttendWarp's blocks of
// 32 keys start at each span's first slot, so its sums depend on how the context is cut into
// spans (which chunks are shared, where a prefill chunk began). Here block b is always positions
// [32 b, 32 b + 32) of the context; lane j finds the slot of position 32 b + j in the span list
// itself; and every sum runs in a fixed order: each head's dot product over head_dim, the block's
// max and sum by one shuffle tree, the value rows in position order. A decode row and a prefill
// token, a shared or a private prefix, alone or in any batch: one function of the positions' K
// and V. The HW heads of a warp share its K and V loads; each head's sums are the ones it would
// have alone, so the grouping does not change a bit either.
#pragma once

#include "kernels/cuda/prefill/generic_attention.cuh"

namespace banyan::kernels::cuda {

// Positions of a context cut into pieces of this many: fixed, so the cut never depends on the
// batch; four warps share a context's pieces.
inline constexpr int kInvariantPiece = 256;

// Pieces piece0, piece0 + 4, ... of positions [0, limit) of spans [s_lo, s_hi) (span_pos: each
// span's first position) for the warp's HW queries q_s (pre-scaled to log2 units); o[h][i] holds
// element lane + 32 i of head h, unnormalized, with the running max m[h] and sum l[h].
template <typename T, bool KV8, int D, int HW, int NXD>
__device__ void InvariantAttendHeads(const float (*q_s)[kMaxGenericHeadDim], const KvViewDev& kv,
                                     int kvh, const int32_t* span_chunk, const int32_t* span_begin,
                                     const int32_t* span_end, const int32_t* span_pos, int s_lo,
                                     int s_hi, int64_t limit, int piece0, float (&o)[HW][NXD],
                                     float (&m)[HW], float (&l)[HW]) {
  constexpr int kRows = 8;  // value rows loaded ahead of their products
  const int d = D > 0 ? D : kv.head_dim, lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < HW; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < NXD; ++i) o[h][i] = 0.0f;
  }
  int s = s_lo;  // this lane's span: positions only grow, so it only moves forward
  for (int64_t base = int64_t{piece0} * kInvariantPiece; base < limit;
       base += 4 * kInvariantPiece) {
    const int64_t end = base + kInvariantPiece < limit ? base + kInvariantPiece : limit;
    for (int64_t p0 = base; p0 < end; p0 += 32) {
      const int64_t pos = p0 + lane;
      int chunk = -1, slot = 0;
      if (pos < end) {
        while (s < s_hi && span_pos[s] + (span_end[s] - span_begin[s]) <= pos) ++s;
        if (s < s_hi) {
          chunk = span_chunk[s];
          slot = span_begin[s] + static_cast<int>(pos - span_pos[s]);
        }
      }
      float sc[HW];
      KvRows r{};
      if (chunk >= 0) {
        r = KvRowsOf(kv, chunk, kvh);
        KeyScores<T, KV8, D, HW>(q_s, kv, r.kp, r.ke, slot, sc);
      } else {
#pragma unroll
        for (int h = 0; h < HW; ++h) sc[h] = -INFINITY;
      }
      // Whether the block holds a key depends on positions only: the same for every head.
      if (WarpMax(chunk >= 0 ? 1.0f : 0.0f) == 0.0f) continue;
      float pr[HW];
#pragma unroll
      for (int h = 0; h < HW; ++h) {
        const float new_m = fmaxf(m[h], WarpMax(sc[h]));
        const float corr = exp2f(m[h] - new_m);
        pr[h] = exp2f(sc[h] - new_m);
        l[h] = l[h] * corr + WarpSum(pr[h]);
#pragma unroll
        for (int i = 0; i < NXD; ++i) o[h][i] *= corr;
        m[h] = new_m;
      }
      const int n = static_cast<int>(end - p0 < 32 ? end - p0 : 32);
      const int64_t vrow = chunk >= 0 ? r.vp + static_cast<int64_t>(slot) * d : 0;
      const int64_t vexp = chunk >= 0 ? r.ve + slot : 0;
      for (int j0 = 0; j0 < n; j0 += kRows) {
        float v[kRows][NXD], pj[kRows][HW];
#pragma unroll
        for (int jj = 0; jj < kRows; ++jj) {
          const int j = j0 + jj < 32 ? j0 + jj : 31;
          const int64_t row_j = __shfl_sync(0xffffffffu, vrow, j);
          const int64_t exp_j = __shfl_sync(0xffffffffu, vexp, j);
          const bool use = j0 + jj < n && __shfl_sync(0xffffffffu, chunk, j) >= 0;  // warp-uniform
#pragma unroll
          for (int h = 0; h < HW; ++h) {
            const float ph = __shfl_sync(0xffffffffu, pr[h], j);
            pj[jj][h] = use ? ph : 0.0f;
          }
          float vscale = 1.0f;
          if constexpr (KV8) vscale = use ? KvFp8ScaleAt(kv, exp_j) : 1.0f;
#pragma unroll
          for (int i = 0; i < NXD; ++i) {
            const int x = lane + 32 * i;
            v[jj][i] = 0.0f;
            if (use && x < d) {
              if constexpr (KV8) {
                v[jj][i] = LoadKv1<T, true>(kv, row_j + x, vscale);
              } else {
                v[jj][i] = ToFloat(static_cast<const T*>(kv.base)[row_j + x]);
              }
            }
          }
        }
#pragma unroll
        for (int jj = 0; jj < kRows; ++jj) {
          if (j0 + jj >= n) break;
#pragma unroll
          for (int h = 0; h < HW; ++h) {
#pragma unroll
            for (int i = 0; i < NXD; ++i) o[h][i] += pj[jj][h] * v[jj][i];
          }
        }
      }
    }
  }
}

// Grid: (tokens, kv heads x ceil(group / HW)), 128 threads: the four warps of a CTA share its
// queries and split its context by pieces.
template <typename T, bool KV8, int D, int HW>
__global__ void __launch_bounds__(128)
    InvariantAttentionKernel(const __grid_constant__ PrefillParams p) {
  constexpr int NXD = D > 0 ? (D + 31) / 32 : kMaxGenericHeadDim / 32;
  __shared__ float q_s[HW][kMaxGenericHeadDim];
  __shared__ float o_s[4][HW][NXD * 32];
  __shared__ float ml_s[4][HW][2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hq = p.num_q_heads, hkv = p.kv.num_kv_heads, d = p.kv.head_dim;
  const int g = hq / hkv, per_kv = (g + HW - 1) / HW;
  const int w = blockIdx.y;
  const int kvh = w / per_kv;
  const int head0 = kvh * g + (w % per_kv) * HW;
  const int heads = min(HW, kvh * g + g - head0);
  const int tok = blockIdx.x;
  const int seq = p.token_seq[tok];
  const int64_t row = p.q_row_begin + tok;
  const int64_t limit = p.seq_pos0[seq] + (row - p.seq_q_row[seq]) + 1;
  const T* q = static_cast<const T*>(p.q) + row * hq * d;
  for (int i = threadIdx.x; i < HW * d; i += blockDim.x) {
    const int h = i / d, x = i % d;
    q_s[h][x] = h < heads ? ToFloat(q[(head0 + h) * d + x]) * (p.scale * kLog2e) : 0.0f;
  }
  __syncthreads();
  float o[HW][NXD], m[HW], l[HW];
  InvariantAttendHeads<T, KV8, D, HW, NXD>(q_s, p.kv, kvh, p.span_chunk, p.span_begin, p.span_end,
                                           p.span_pos, p.seq_span_begin[seq], p.seq_span_end[seq],
                                           limit, warp, o, m, l);
#pragma unroll
  for (int h = 0; h < HW; ++h) {
#pragma unroll
    for (int i = 0; i < NXD; ++i) o_s[warp][h][lane + 32 * i] = o[h][i];
    if (lane == 0) {
      ml_s[warp][h][0] = m[h];
      ml_s[warp][h][1] = l[h];
    }
  }
  __syncthreads();
  if (warp != 0) return;
    // The four warps' states merged in warp order (a warp without a piece has l = 0).
#pragma unroll
  for (int h = 0; h < HW; ++h) {
    if (h >= heads) break;
    float mx = -INFINITY;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      if (ml_s[v][h][1] > 0.0f) mx = fmaxf(mx, ml_s[v][h][0]);
    }
    float sum = 0.0f, acc[NXD];
#pragma unroll
    for (int i = 0; i < NXD; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      if (!(ml_s[v][h][1] > 0.0f)) continue;
      const float c = exp2f(ml_s[v][h][0] - mx);
      sum += ml_s[v][h][1] * c;
#pragma unroll
      for (int i = 0; i < NXD; ++i) acc[i] += o_s[v][h][lane + 32 * i] * c;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int i = 0; i < NXD; ++i) {
      const int x = lane + 32 * i;
      if (x < d)
        static_cast<T*>(p.out)[(row * hq + head0 + h) * d + x] = FromFloat<T>(acc[i] * inv);
    }
  }
}

}  // namespace banyan::kernels::cuda
