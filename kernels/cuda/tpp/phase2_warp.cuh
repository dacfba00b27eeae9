// TPP phase 2 for short private tails: one warp per (phase-2 item, kv head, group of HW <= 4
// query heads of that kv head).
//
// With tails of a few tokens (every row's first decode step has one; a decode run's rows have
// tens) the CTA kernels are latency-bound: a 128-thread CTA per (row, kv head) walks the span
// tables, fills a cp.async pipeline for one partial tile, combines its token lanes through
// shared memory at a CTA barrier, then merges the phase-1 partials: latency, not bandwidth, sets
// their time (docs/tpp.md, "Serving-regime cases"). Here a warp does all of that for its heads
// with no shared memory and no barrier, so four independent chains share each CTA and an SM
// holds several times more of them in flight (GQA: the warp's HW heads use each K/V load):
//  - lane (tl, c): c owns 16-byte vector c of head_dim, tl a token lane (2 at head_dim 128, 4 at
//    64); each step loads kUnroll tokens per token lane straight from global memory (all loads of
//    a step in flight together), reduces the dot products over the c lanes by shuffles and
//    updates the token lane's online-softmax state;
//  - the token lanes are merged by shuffles, then token lane tl finishes heads tl, tl + TL, ... as
//    Phase2Finish does (a partial state, or the merge of the row's phase-1 partials and the
//    output).
#pragma once

#include "kernels/cuda/tpp/phase2.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM, int HW>
struct Phase2WarpConfig {
  static constexpr int kWarps = 4;                 // CTA: four warps, each its own work
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kVecs = HEAD_DIM / 8;       // lanes per token
  static constexpr int kTokLanes = 32 / kVecs;     // tokens per load step
  static constexpr int kUnroll = HW <= 2 ? 4 : 2;  // load steps in flight together (registers)
  static_assert(kVecs <= 32 && 32 % kVecs == 0, "a token's vectors must tile a warp");
  static_assert(HW == 1 || HW == 2 || HW == 4, "heads per warp");
};

template <int HEAD_DIM, typename DType, int HW, bool KV8 = false>
__global__ void __launch_bounds__(128) TppPhase2WarpKernel(const __grid_constant__ TppParams p) {
  LaunchDependents();  // the merge kernel, where it follows with PDL
  using Cfg = Phase2WarpConfig<HEAD_DIM, HW>;
  constexpr int VECS = Cfg::kVecs;
  constexpr int TL = Cfg::kTokLanes;
  constexpr int U = Cfg::kUnroll;
  const int lane = threadIdx.x & 31;
  const int c = lane % VECS;
  const int tl = lane / VECS;
  const int item = blockIdx.x;
  const int hq = p.num_q_heads;
  const int g = p.group;
  const int groups = (g + HW - 1) / HW;  // warps per kv head
  const int w = blockIdx.y * Cfg::kWarps + static_cast<int>(threadIdx.x >> 5);
  const bool valid_warp = w < (hq / g) * groups;  // warp-uniform; the last CTA may be part empty
  const int kvh = valid_warp ? w / groups : 0;
  const int head0 = kvh * g + (valid_warp ? w % groups : 0) * HW;
  const int heads = min(HW, kvh * g + g - head0);
  const TppTables& t = p.t;
  const int row = t.p2_row[item];
  const int span_lo = t.p2_span_lo[item];
  const int span_hi = valid_warp ? t.p2_span_hi[item] : span_lo;
  const int out_state = t.p2_state[item];

  float q[HW][8];
  {
    const DType* qp = static_cast<const DType*>(p.q) +
                      (static_cast<int64_t>(row) * hq + head0) * HEAD_DIM + c * 8;
#pragma unroll
    for (int h = 0; h < HW; ++h) {
      if (h < heads) {
        Unpack8<DType>(*reinterpret_cast<const uint4*>(qp + h * HEAD_DIM), q[h]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[h][j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) q[h][j] *= p.scale_log2;
    }
  }

  const int64_t v_offset = p.kv.v_offset;
  const int64_t v_exp = KvFp8VExpStride(p.kv);
  float m[HW], l[HW], o[HW][8];
#pragma unroll
  for (int h = 0; h < HW; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j] = 0.0f;
  }
  for (int sp = span_lo; sp < span_hi; ++sp) {
    const int end = t.span_end[sp];
    // Element offset of this thread's vector of the span's slot 0 (bytes in an FP8 cache), and
    // the slot's exponent (an FP8 cache).
    const int64_t base = static_cast<int64_t>(t.span_chunk[sp]) * p.kv.chunk_stride +
                         static_cast<int64_t>(kvh) * p.kv.chunk_size * HEAD_DIM + c * 8;
    const int64_t exp0 = KvFp8ExpOffset(p.kv, t.span_chunk[sp], kvh, 0);
    for (int s0 = t.span_begin[sp]; s0 < end; s0 += TL * U) {
      uint4 kr[U], vr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int slot = s0 + u * TL + tl;
        if (slot < end) {
          const int64_t src = base + static_cast<int64_t>(slot) * HEAD_DIM;
          kr[u] = LoadKv8<DType, KV8>(p.kv, src, exp0 + slot);
          vr[u] = LoadKv8<DType, KV8>(p.kv, src + v_offset, exp0 + slot + v_exp);
        } else {
          kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
      float sc[U][HW];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float k[8];
        Unpack8<DType>(kr[u], k);
#pragma unroll
        for (int h = 0; h < HW; ++h) {
          float dot = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; ++j) dot = fmaf(q[h][j], k[j], dot);
          sc[u][h] = dot;
        }
      }
#pragma unroll
      for (int off = VECS / 2; off > 0; off >>= 1) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int h = 0; h < HW; ++h) sc[u][h] += __shfl_xor_sync(0xffffffffu, sc[u][h], off);
        }
      }
      if (s0 + tl >= end) continue;  // this token lane has only masked slots in this step
#pragma unroll
      for (int h = 0; h < HW; ++h) {
        float tile_max = sc[0][h];  // slot s0 + tl is valid
#pragma unroll
        for (int u = 1; u < U; ++u) {
          if (s0 + u * TL + tl >= end) sc[u][h] = kNegInf;
          tile_max = fmaxf(tile_max, sc[u][h]);
        }
        const float new_m = fmaxf(m[h], tile_max);
        const float alpha = FastExp2(m[h] - new_m);  // 0 on the first step
        l[h] *= alpha;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[h][j] *= alpha;
        m[h] = new_m;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float v[8];
        Unpack8<DType>(vr[u], v);
#pragma unroll
        for (int h = 0; h < HW; ++h) {
          const float pr = FastExp2(sc[u][h] - m[h]);
          l[h] += pr;
#pragma unroll
          for (int j = 0; j < 8; ++j) o[h][j] = fmaf(pr, v[j], o[h][j]);
        }
      }
    }
  }

  // Merge the token lanes (lanes c, c + VECS, ...) by log-sum-exp: every lane then holds the
  // warp's state for its vector c.
#pragma unroll
  for (int off = VECS; off < 32; off <<= 1) {
#pragma unroll
    for (int h = 0; h < HW; ++h) {
      const float m_b = __shfl_xor_sync(0xffffffffu, m[h], off);
      const float l_b = __shfl_xor_sync(0xffffffffu, l[h], off);
      float o_b[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) o_b[j] = __shfl_xor_sync(0xffffffffu, o[h][j], off);
      const float new_m = fmaxf(m[h], m_b);
      if (new_m != kNegInf) {
        const float wa = FastExp2(m[h] - new_m), wb = FastExp2(m_b - new_m);
        l[h] = l[h] * wa + l_b * wb;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[h][j] = o[h][j] * wa + o_b[j] * wb;
        m[h] = new_m;
      }
    }
  }
  // The merge list's head from the plan before the wait (MergeHead). Launched with PDL behind
  // phase 1: every thread waits before phase-1 partials are read, as in the CTA kernels (the
  // grid then completes after phase 1).
  MergeHead merge;
  if (valid_warp && out_state < 0) merge.Load(t, row);
  if (p.wait_phase1) GridDependencyWait();
  if (!valid_warp) return;
#pragma unroll
  for (int h = 0; h < HW; ++h) {
    if (h % TL != tl || h >= heads) continue;  // token lane tl finishes heads tl, tl + TL, ...
    float state_m = kNegInf, state_w = 0.0f;
    float acc[8];
    if (l[h] > 0.0f) {
      const float inv = 1.0f / l[h];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = o[h][j] * inv;
      state_m = m[h] + log2f(l[h]);
      state_w = 1.0f;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
    }
    const int head = head0 + h;
    if (out_state >= 0) {
      float* dst = p.partial_o + (static_cast<int64_t>(out_state) * hq + head) * HEAD_DIM + c * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (c == 0) p.partial_lse[static_cast<int64_t>(out_state) * hq + head] = state_m;
      continue;
    }
    MergeList(p, merge, HEAD_DIM, head, c, state_m, state_w, acc);
    StoreOut8(static_cast<DType*>(p.out) + (static_cast<int64_t>(row) * hq + head) * HEAD_DIM +
                  c * 8,
              state_w, acc);
  }
}

}  // namespace banyan::kernels::cuda::tpp
