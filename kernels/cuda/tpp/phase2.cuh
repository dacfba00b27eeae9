// TPP phase 2 (also the plain paged decode kernel) and the final merge.
//
// Phase 2: one CTA of 128 threads per (phase-2 item, kv head, head group).
// (The pipeline below has 3 stages, or 2 for plans of short tails: TppOptions::p2_stages.) An item is a row and
// a range of its private spans. The CTA attends GROUP query heads of the kv head at once, so
// each K/V element is loaded once for all of them (GQA). Memory-bound path:
//  - K/V tiles of 4 slots per token lane (32 slots at head_dim 128) go through a 3-stage
//    cp.async pipeline, 16-byte vectors, two tiles in flight while one is computed;
//  - thread (tx, ty): tx owns 8 of head_dim (one 16-byte vector), ty a token lane; logits are
//    reduced across the tx lanes by shuffles; each token lane keeps its own online-softmax state
//    (m, l, o) and the lanes are combined through shared memory at the end.
// A `final` item (the row's only private piece) then merges the row's phase-1 partials by
// log-sum-exp, normalises and writes the output; otherwise it writes a partial state and
// TppMergeKernel finishes the row.
//
// Merge rule (Hydragen eq. 5, in the log2 domain): for states (o_i, lse_i), M = max lse_i,
// w_i = 2^(lse_i - M), o = sum w_i o_i / sum w_i. States with lse = -inf weigh 0; when every
// state is empty the output is 0 (max() of -inf keeps -inf and the weights are never computed,
// so no -inf - -inf NaN appears).
#pragma once

#include "kernels/cuda/tpp/common.cuh"
#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM, typename DType, int GROUP, int STAGES = 3>
struct Phase2Config {
  static constexpr int kThreads = 128;
  static constexpr int kVecs = HEAD_DIM / 8;        // tx lanes: one 16-byte vector each
  static constexpr int kLanesY = kThreads / kVecs;  // token lanes
  static constexpr int kTokPerLane = 4;
  static constexpr int kTile = kLanesY * kTokPerLane;  // slots per tile
  // 3: 48 KB at head_dim 128, four CTAs per SM; 2: 32 KB, seven (TppOptions::p2_stages).
  static constexpr int kStages = STAGES;
  static_assert(STAGES == 2 || STAGES == 3, "phase-2 pipeline depth");
  static constexpr int kSmemTile = kTile * HEAD_DIM * sizeof(DType);  // K or V of one stage
  static constexpr int kSmemPipe = kStages * 2 * kSmemTile;
  static constexpr int kSmemCombine = kLanesY * GROUP * (HEAD_DIM + 2) * sizeof(float);
  static constexpr int kSmemBytes = kSmemPipe > kSmemCombine ? kSmemPipe : kSmemCombine;
  static_assert(kVecs <= 32 && 32 % kVecs == 0, "tx lanes must tile a warp");
  static_assert(GROUP * kVecs <= kThreads || GROUP * kVecs % kThreads == 0, "combine mapping");
};

// Running log-sum-exp merge of normalised states into (m, w, acc[8]).
__device__ __forceinline__ void MergeState8(float& m, float& w, float (&acc)[8], float lse_b,
                                            const float (&o_b)[8]) {
  const float new_m = fmaxf(m, lse_b);
  if (new_m == kNegInf) return;  // both empty
  const float wa = FastExp2(m - new_m);
  const float wb = FastExp2(lse_b - new_m);
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = acc[j] * wa + o_b[j] * wb;
  w = w * wa + wb;
  m = new_m;
}

__device__ __forceinline__ void LoadState8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// The state indices of the merge-list entries [i, i + kTppMergeAhead) below `end` (0 past it).
__device__ __forceinline__ void LoadMergeIndices(const TppTables& t, int i, int end,
                                                 int32_t (&states)[kTppMergeAhead]) {
#pragma unroll
  for (int k = 0; k < kTppMergeAhead; ++k) states[k] = i + k < end ? t.merge_states[i + k] : 0;
}

// A row's merge list and the states of its first round (up to kTppMergeAhead), read from the
// plan's tables before phase 1 is waited for (they are not phase 1's output), so that after the
// wait the first round's loads go out at once instead of behind two dependent table reads.
struct MergeHead {
  int begin = 0, end = 0;
  int32_t first[kTppMergeAhead];
  __device__ __forceinline__ void Load(const TppTables& t, int row) {
    begin = t.row_merge_begin[row];
    end = t.row_merge_end[row];
    LoadMergeIndices(t, begin, end, first);
  }
};

// Loads up to kTppMergeAhead states (states[k] for k < count) at once, then merges them into
// (m, w, acc) in order. head_dim: a compile-time constant where the caller has one.
__device__ __forceinline__ void MergeRound(const TppParams& p, const int32_t (&states)[kTppMergeAhead],
                                           int count, int head_dim, int head, int c, float& m,
                                           float& w, float (&acc)[8]) {
  constexpr int kAhead = kTppMergeAhead;
  float lse[kAhead];
  float ob[kAhead][8];
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    if (k < count) {
      const int64_t st = states[k];
      lse[k] = p.partial_lse[st * p.num_q_heads + head];
      LoadState8(p.partial_o + (st * p.num_q_heads + head) * head_dim + c * 8, ob[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    if (k < count) MergeState8(m, w, acc, lse[k], ob[k]);
  }
}

// Merges the row's listed partial states into (m, w, acc) for (head, vector c), in rounds of
// kTppMergeAhead states loaded at once, so that their latencies overlap: a list of n states
// takes ceil(n / kTppMergeAhead) rounds of loads (the split model counts them). The first
// round's state indices come with the head; each round reads the next round's indices before
// its own state loads, so a round waits for one memory latency, not two.
__device__ __forceinline__ void MergeList(const TppParams& p, const MergeHead& mh, int head_dim,
                                          int head, int c, float& m, float& w, float (&acc)[8]) {
  constexpr int kAhead = kTppMergeAhead;
  int32_t states[kAhead];
#pragma unroll
  for (int k = 0; k < kAhead; ++k) states[k] = mh.first[k];
  for (int i = mh.begin; i < mh.end; i += kAhead) {
    int32_t next[kAhead];
    LoadMergeIndices(p.t, i + kAhead, mh.end, next);
    MergeRound(p, states, min(kAhead, mh.end - i), head_dim, head, c, m, w, acc);
#pragma unroll
    for (int k = 0; k < kAhead; ++k) states[k] = next[k];
  }
}

template <typename DType>
__device__ __forceinline__ void StoreOut8(DType* dst, float w, const float (&acc)[8]) {
  const float inv = w > 0.0f ? 1.0f / w : 0.0f;  // no context at all: zeros
  uint4 v;
  v.x = DTypeTraits<DType>::Pack(acc[0] * inv, acc[1] * inv);
  v.y = DTypeTraits<DType>::Pack(acc[2] * inv, acc[3] * inv);
  v.z = DTypeTraits<DType>::Pack(acc[4] * inv, acc[5] * inv);
  v.w = DTypeTraits<DType>::Pack(acc[6] * inv, acc[7] * inv);
  *reinterpret_cast<uint4*>(dst) = v;
}

template <typename DType>
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&v)[8]) {
  const float2 a = DTypeTraits<DType>::Unpack(raw.x);
  const float2 b = DTypeTraits<DType>::Unpack(raw.y);
  const float2 c = DTypeTraits<DType>::Unpack(raw.z);
  const float2 d = DTypeTraits<DType>::Unpack(raw.w);
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  v[4] = c.x, v[5] = c.y, v[6] = d.x, v[7] = d.y;
}

// What a phase-2 CTA (either CTA kernel) works on: its item (row, private spans
// [span_lo, span_hi), output state or -1 = final) and q heads [head0, head0 + heads) of kv head
// kvh, HEADS per CTA (blockIdx.y: kv head x group of HEADS heads).
struct Phase2Work {
  int row, span_lo, span_hi, out_state, kvh, head0, heads;
};
template <int HEADS>
__device__ __forceinline__ Phase2Work Phase2WorkOf(const TppParams& p) {
  const int groups = (p.group + HEADS - 1) / HEADS;
  const int item = blockIdx.x;
  Phase2Work w;
  w.kvh = blockIdx.y / groups;
  w.head0 = w.kvh * p.group + (blockIdx.y % groups) * HEADS;
  w.heads = min(HEADS, w.kvh * p.group + p.group - w.head0);
  w.row = p.t.p2_row[item];
  w.span_lo = p.t.p2_span_lo[item];
  w.span_hi = p.t.p2_span_hi[item];
  w.out_state = p.t.p2_state[item];
  return w;
}

// The end of a phase-2 CTA, shared by both phase-2 kernels: LANES partial online-softmax states
// per head (s_o [LANES][GROUP][HEAD_DIM] unnormalised, s_m [LANES][GROUP] their maxima in the log2
// domain, s_l the sums) are combined into one normalised state per (head, 16-byte vector); a
// partial item writes it to its state, a final item merges the row's phase-1 partials into it
// and writes the output. Called by every thread after the states are in shared memory.
template <int HEAD_DIM, typename DType, int LANES, int GROUP, int THREADS>
__device__ __forceinline__ void Phase2Finish(const TppParams& p, const float* s_o,
                                             const float* s_m, const float* s_l, int row,
                                             int out_state, int head0, int heads) {
  constexpr int VECS = HEAD_DIM / 8;
  const TppTables& t = p.t;
  const int hq = p.num_q_heads;
  const bool final_item = out_state < 0;
  MergeHead merge;
  if (final_item) merge.Load(t, row);
  // Launched with PDL behind phase 1: phase-1 partials are visible only after the wait. Every
  // CTA waits (not only those that read partials), so that this grid completes after phase 1
  // and a kernel queued after it (the merge) sees phase 1's output too.
  if (p.wait_phase1) GridDependencyWait();

  for (int idx = static_cast<int>(threadIdx.x); idx < GROUP * VECS; idx += THREADS) {
    const int h = idx / VECS;
    const int c = idx % VECS;
    if (h >= heads) continue;
    float mm = kNegInf;
#pragma unroll
    for (int y = 0; y < LANES; ++y) mm = fmaxf(mm, s_m[y * GROUP + h]);
    float w = 0.0f;
    float acc[8] = {};
    if (mm != kNegInf) {
      for (int y = 0; y < LANES; ++y) {
        const float my = s_m[y * GROUP + h];
        if (my == kNegInf) continue;
        const float wy = FastExp2(my - mm);
        w += s_l[y * GROUP + h] * wy;
        float oy[8];
        LoadState8(s_o + (y * GROUP + h) * HEAD_DIM + c * 8, oy);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] = fmaf(oy[j], wy, acc[j]);
      }
    }
    // (mm, w, acc): unnormalised state with sum of weights w. Normalise to a state of weight 1.
    float state_m = kNegInf, state_w = 0.0f;
    if (w > 0.0f) {
      const float inv = 1.0f / w;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] *= inv;
      state_m = mm + log2f(w);
      state_w = 1.0f;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
    }
    const int head = head0 + h;
    if (!final_item) {
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

template <int HEAD_DIM, typename DType, int GROUP, int STAGES, bool KV8 = false>
__global__ void __launch_bounds__(128) TppPhase2Kernel(const __grid_constant__ TppParams p) {
  LaunchDependents();  // the merge kernel, where it follows with PDL
  using Cfg = Phase2Config<HEAD_DIM, DType, GROUP, STAGES>;
  constexpr int VECS = Cfg::kVecs;
  constexpr int LANES_Y = Cfg::kLanesY;
  constexpr int TILE = Cfg::kTile;
  extern __shared__ __align__(128) uint8_t smem[];
  DType* s_kv = reinterpret_cast<DType*>(smem);  // [stage][k|v][TILE][HEAD_DIM]

  const int tid = threadIdx.x;
  const int tx = tid % VECS;
  const int ty = tid / VECS;
  const Phase2Work w = Phase2WorkOf<GROUP>(p);
  const int kvh = w.kvh, head0 = w.head0, heads = w.heads;
  const int row = w.row, span_lo = w.span_lo, span_hi = w.span_hi, out_state = w.out_state;
  const TppTables& t = p.t;
  const int hq = p.num_q_heads;


  auto load_tile = [&](int stage, const TileIter<TILE>& it) {
    DType* s_k = s_kv + stage * 2 * TILE * HEAD_DIM;
    LoadKvTile<TILE, HEAD_DIM, Cfg::kThreads, KV8>(p, kvh, it, s_k, s_k + TILE * HEAD_DIM,
                                              [](int r, int c) { return r * HEAD_DIM + c * 8; });
  };

  TileIter<TILE> load_it, comp_it;
  load_it.Start(t, span_lo, span_hi);
  comp_it = load_it;
  StartPipeline<Cfg::kStages>(t, span_hi, load_it, load_tile);

  // This thread's 8 elements of each head's query, pre-scaled into the log2 domain.
  float qv[GROUP][8];
  {
    const DType* q = static_cast<const DType*>(p.q) + (static_cast<int64_t>(row) * hq) * HEAD_DIM;
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      if (h < heads) {
        const uint4 raw =
            *reinterpret_cast<const uint4*>(q + static_cast<int64_t>(head0 + h) * HEAD_DIM + tx * 8);
        Unpack8<DType>(raw, qv[h]);
#pragma unroll
        for (int j = 0; j < 8; ++j) qv[h][j] *= p.scale_log2;
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) qv[h][j] = 0.0f;
      }
    }
  }

  float m[GROUP], l[GROUP], o[GROUP][8];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j] = 0.0f;
  }

  int stage = 0;
  int load_stage = Cfg::kStages - 1;
  while (comp_it.span < span_hi) {
    PipelineStep<Cfg::kStages>(t, span_hi, load_it, load_stage, load_tile);
    const int n = min(TILE, t.span_end[comp_it.span] - comp_it.slot);
    const DType* s_k = s_kv + stage * 2 * TILE * HEAD_DIM;
    const DType* s_v = s_k + TILE * HEAD_DIM;

    float sc[Cfg::kTokPerLane][GROUP];
#pragma unroll
    for (int i = 0; i < Cfg::kTokPerLane; ++i) {
      const int tok = i * LANES_Y + ty;
      float k[8];
      Unpack8<DType>(*reinterpret_cast<const uint4*>(s_k + tok * HEAD_DIM + tx * 8), k);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(qv[h][j], k[j], dot);
#pragma unroll
        for (int off = VECS / 2; off > 0; off >>= 1) {
          dot += __shfl_xor_sync(0xffffffffu, dot, off);
        }
        sc[i][h] = tok < n ? dot : kNegInf;
      }
    }
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float tile_max = sc[0][h];
#pragma unroll
      for (int i = 1; i < Cfg::kTokPerLane; ++i) tile_max = fmaxf(tile_max, sc[i][h]);
      const float new_m = fmaxf(m[h], tile_max);
      // A token lane that has seen only masked slots keeps the empty state (and no NaN).
      const bool empty = new_m == kNegInf;
      const float alpha = empty ? 1.0f : FastExp2(m[h] - new_m);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < Cfg::kTokPerLane; ++i) {
        const float pr = empty ? 0.0f : FastExp2(sc[i][h] - new_m);
        sc[i][h] = pr;
        sum += pr;
      }
      l[h] = l[h] * alpha + sum;
      m[h] = new_m;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[h][j] *= alpha;
    }
#pragma unroll
    for (int i = 0; i < Cfg::kTokPerLane; ++i) {
      const int tok = i * LANES_Y + ty;
      float v[8];
      Unpack8<DType>(*reinterpret_cast<const uint4*>(s_v + tok * HEAD_DIM + tx * 8), v);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
#pragma unroll
        for (int j = 0; j < 8; ++j) o[h][j] = fmaf(sc[i][h], v[j], o[h][j]);
      }
    }
    comp_it.Next(t, span_hi);
    stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    load_stage = load_stage + 1 == Cfg::kStages ? 0 : load_stage + 1;
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline buffers become the combine buffers

  // Combine the token lanes: s_o [LANES_Y][GROUP][HEAD_DIM], s_m / s_l [LANES_Y][GROUP].
  float* s_o = reinterpret_cast<float*>(smem);
  float* s_m = s_o + LANES_Y * GROUP * HEAD_DIM;
  float* s_l = s_m + LANES_Y * GROUP;
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    float* dst = s_o + (ty * GROUP + h) * HEAD_DIM + tx * 8;
    *reinterpret_cast<float4*>(dst) = make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(o[h][4], o[h][5], o[h][6], o[h][7]);
    if (tx == 0) {
      s_m[ty * GROUP + h] = m[h];
      s_l[ty * GROUP + h] = l[h];
    }
  }
  __syncthreads();
  Phase2Finish<HEAD_DIM, DType, LANES_Y, GROUP, Cfg::kThreads>(p, s_o, s_m, s_l, row, out_state,
                                                               head0, heads);
}

inline constexpr int kTppMergeThreads = 128;

// Finishes rows whose private tail was split: merges the row's phase-1 partials and its
// phase-2 pieces, normalises, writes the output. Grid (TppMergeGrid, launch.cuh): (merge row,
// block of kTppMergeThreads (head, 8 head dims) pairs), one pair per thread, so that a row's
// merges run side by side (with 32 heads, one CTA of 128 threads per row took four pairs per
// thread, one after another, each a chain of dependent loads).
// HEAD_DIM 0: the head dim of the KV view (the generic family's).
template <int HEAD_DIM, typename DType>
__global__ void __launch_bounds__(kTppMergeThreads)
    TppMergeKernel(const __grid_constant__ TppParams p) {
  const int d = HEAD_DIM > 0 ? HEAD_DIM : p.kv.head_dim;
  const int VECS = d / 8;
  const int row = p.t.merge_rows[blockIdx.x];
  MergeHead merge;
  merge.Load(p.t, row);
  if (p.wait_phase2) GridDependencyWait();  // PDL behind phase 2: its pieces, and phase 1's
  for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < p.num_q_heads * VECS;
       idx += blockDim.x * gridDim.y) {
    const int head = idx / VECS;
    const int c = idx % VECS;
    float m = kNegInf, w = 0.0f;
    float acc[8] = {};
    MergeList(p, merge, d, head, c, m, w, acc);
    StoreOut8(static_cast<DType*>(p.out) +
                  (static_cast<int64_t>(row) * p.num_q_heads + head) * d + c * 8,
              w, acc);
  }
}

}  // namespace banyan::kernels::cuda::tpp
