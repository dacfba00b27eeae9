// TPP phase 2 for short private tails: one warp per (phase-2 item, query head).
//
// With tails of a few tokens (every row's first decode step has one; a decode run's rows have
// tens) the CTA kernels are latency-bound: a 128-thread CTA per (row, kv head) walks the span
// tables, fills a cp.async pipeline for one partial tile, combines its token lanes through
// shared memory at a CTA barrier, then merges the phase-1 partials; measured on the H200, 32,768
// such CTAs (7B shape, B = 1,024, 1-token tails) took 265 us for about 50 MB of traffic. Here a
// warp does all of that for one head with no shared memory and no barrier, so four independent
// chains share each CTA and an SM holds several times more of them in flight:
//  - lane (tl, c): c owns 16-byte vector c of head_dim, tl a token lane (2 at head_dim 128, 4 at
//    64); each step loads kUnroll tokens per token lane straight from global memory (all loads of
//    a step in flight together), reduces the dot products over the c lanes by shuffles and
//    updates the token lane's online-softmax state;
//  - the token lanes are merged by shuffles, then the lanes of token lane 0 finish the state as
//    Phase2Finish does (a partial state, or the merge of the row's phase-1 partials and the
//    output).
#pragma once

#include "kernels/cuda/tpp/phase2.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM>
struct Phase2WarpConfig {
  static constexpr int kWarps = 4;                 // heads per CTA
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kVecs = HEAD_DIM / 8;       // lanes per token
  static constexpr int kTokLanes = 32 / kVecs;     // tokens per load step
  static constexpr int kUnroll = 4;                // load steps in flight together
  static_assert(kVecs <= 32 && 32 % kVecs == 0, "a token's vectors must tile a warp");
};

template <int HEAD_DIM, typename DType>
__global__ void __launch_bounds__(128) TppPhase2WarpKernel(const __grid_constant__ TppParams p) {
  using Cfg = Phase2WarpConfig<HEAD_DIM>;
  constexpr int VECS = Cfg::kVecs;
  constexpr int TL = Cfg::kTokLanes;
  constexpr int U = Cfg::kUnroll;
  const int lane = threadIdx.x & 31;
  const int c = lane % VECS;
  const int tl = lane / VECS;
  const int item = blockIdx.x;
  const int hq = p.num_q_heads;
  const int head = blockIdx.y * Cfg::kWarps + static_cast<int>(threadIdx.x >> 5);
  const bool valid_head = head < hq;  // warp-uniform; the last CTA of a row may be part empty
  const int kvh = (valid_head ? head : 0) / p.group;
  const TppTables& t = p.t;
  const int row = t.p2_row[item];
  const int span_lo = t.p2_span_lo[item];
  const int span_hi = valid_head ? t.p2_span_hi[item] : span_lo;
  const int out_state = t.p2_state[item];

  float q[8];
  {
    const DType* qp = static_cast<const DType*>(p.q) +
                      (static_cast<int64_t>(row) * hq + (valid_head ? head : 0)) * HEAD_DIM;
    Unpack8<DType>(*reinterpret_cast<const uint4*>(qp + c * 8), q);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] *= p.scale_log2;
  }

  const DType* kv_base = static_cast<const DType*>(p.kv.base);
  const int64_t v_offset = p.kv.v_offset;
  float m = kNegInf, l = 0.0f, o[8] = {};
  for (int sp = span_lo; sp < span_hi; ++sp) {
    const int end = t.span_end[sp];
    const DType* base = kv_base + static_cast<int64_t>(t.span_chunk[sp]) * p.kv.chunk_stride +
                        static_cast<int64_t>(kvh) * p.kv.chunk_size * HEAD_DIM + c * 8;
    for (int s0 = t.span_begin[sp]; s0 < end; s0 += TL * U) {
      uint4 kr[U], vr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int slot = s0 + u * TL + tl;
        if (slot < end) {
          const DType* src = base + static_cast<int64_t>(slot) * HEAD_DIM;
          kr[u] = *reinterpret_cast<const uint4*>(src);
          vr[u] = *reinterpret_cast<const uint4*>(src + v_offset);
        } else {
          kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
      float sc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float k[8];
        Unpack8<DType>(kr[u], k);
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(q[j], k[j], dot);
        sc[u] = dot;
      }
#pragma unroll
      for (int off = VECS / 2; off > 0; off >>= 1) {
#pragma unroll
        for (int u = 0; u < U; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
      }
      float tile_max = kNegInf;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s0 + u * TL + tl >= end) sc[u] = kNegInf;
        tile_max = fmaxf(tile_max, sc[u]);
      }
      const float new_m = fmaxf(m, tile_max);
      if (new_m == kNegInf) continue;  // this token lane has seen only masked slots
      const float alpha = FastExp2(m - new_m);
      l *= alpha;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float pr = FastExp2(sc[u] - new_m);
        l += pr;
        float v[8];
        Unpack8<DType>(vr[u], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = fmaf(pr, v[j], o[j]);
      }
      m = new_m;
    }
  }

  // Merge the token lanes (lanes c, c + VECS, ...) by log-sum-exp.
#pragma unroll
  for (int off = VECS; off < 32; off <<= 1) {
    const float m_b = __shfl_xor_sync(0xffffffffu, m, off);
    const float l_b = __shfl_xor_sync(0xffffffffu, l, off);
    float o_b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o_b[j] = __shfl_xor_sync(0xffffffffu, o[j], off);
    const float new_m = fmaxf(m, m_b);
    if (new_m != kNegInf) {
      const float wa = FastExp2(m - new_m), wb = FastExp2(m_b - new_m);
      l = l * wa + l_b * wb;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = o[j] * wa + o_b[j] * wb;
      m = new_m;
    }
  }
  float state_m = kNegInf, state_w = 0.0f;
  if (l > 0.0f) {
    const float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] *= inv;
    state_m = m + log2f(l);
    state_w = 1.0f;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = 0.0f;
  }
  // Launched with PDL behind phase 1: every thread waits before phase-1 partials are read, as in
  // the CTA kernels (the grid then completes after phase 1).
  if (p.wait_phase1) GridDependencyWait();
  if (!valid_head || tl != 0) return;
  if (out_state >= 0) {
    float* dst = p.partial_o + (static_cast<int64_t>(out_state) * hq + head) * HEAD_DIM + c * 8;
    *reinterpret_cast<float4*>(dst) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(o[4], o[5], o[6], o[7]);
    if (c == 0) p.partial_lse[static_cast<int64_t>(out_state) * hq + head] = state_m;
    return;
  }
  MergeList<HEAD_DIM>(p, t.row_merge_begin[row], t.row_merge_end[row], head, c, state_m, state_w,
                      o);
  StoreOut8(static_cast<DType*>(p.out) + (static_cast<int64_t>(row) * hq + head) * HEAD_DIM + c * 8,
            state_w, o);
}

}  // namespace banyan::kernels::cuda::tpp
