// TPP phase 2 on tensor cores, for grouped-query attention (g >= 4 query heads per kv head).
//
// The CUDA-core phase 2 (phase2.cuh) spends, per token and thread, 8 * GROUP FFMAs on q.k, the
// shuffles of the dot products' reduction and 8 * GROUP FFMAs on p.v: at GROUP 8 it is bound by
// instruction issue, under half the copy bandwidth (docs/tpp.md, "Performance"). Here the CTA's
// query heads are the M dimension of mma.sync m16n8k16 (16 rows: up to 16 heads of one kv head,
// the rest zero), so a K/V tile costs a few MMAs per warp whatever the group size:
//  - one CTA of 4 warps per (phase-2 item, kv head, group of 16 heads);
//  - K/V tiles of 64 slots through a cp.async pipeline (2 or 3 stages, TppOptions::p2_stages),
//    XOR-swizzled rows as in phase 1; warp w owns slots [16 w, 16 w + 16) of every tile and skips
//    a tile in which it has none (short tails);
//  - per warp: S = Q K^T (head_dim / 16 k-steps, two n8 tiles), online softmax on raw scores,
//    O += P V (one k16 step, head_dim / 8 n8 tiles, V by ldmatrix.trans);
//  - the four warps' states are combined and finished by Phase2Finish, as in the CUDA-core kernel.
#pragma once

#include "kernels/cuda/tpp/phase2.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM, typename DType, int STAGES>
struct Phase2MmaConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kHeads = 16;              // M: the CTA's query heads, zero-padded
  static constexpr int kBlockN = 16 * kWarps;    // slots per tile, 16 per warp
  static constexpr int kVecs = HEAD_DIM / 8;
  static constexpr int kStages = STAGES;
  static_assert(STAGES == 2 || STAGES == 3, "phase-2 pipeline depth");
  static constexpr int kSmemQ = kHeads * HEAD_DIM * sizeof(DType);
  static constexpr int kSmemTile = kBlockN * HEAD_DIM * sizeof(DType);  // K or V of one stage
  static constexpr int kSmemPipe = kSmemQ + kStages * 2 * kSmemTile;
  static constexpr int kSmemCombine = kWarps * kHeads * (HEAD_DIM + 2) * sizeof(float);
  static constexpr int kSmemBytes = kSmemPipe > kSmemCombine ? kSmemPipe : kSmemCombine;
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 64, "head_dim: multiple of 16, >= 64");
};

template <int HEAD_DIM, typename DType, int STAGES, bool KV8 = false>
__global__ void __launch_bounds__(128) TppPhase2MmaKernel(const __grid_constant__ TppParams p) {
  LaunchDependents();  // the merge kernel, where it follows with PDL
  using Cfg = Phase2MmaConfig<HEAD_DIM, DType, STAGES>;
  constexpr int BN = Cfg::kBlockN;
  constexpr int VECS = Cfg::kVecs;
  constexpr int HEADS = Cfg::kHeads;
  extern __shared__ __align__(128) uint8_t smem[];
  DType* s_q = reinterpret_cast<DType*>(smem);
  DType* s_kv = reinterpret_cast<DType*>(smem + Cfg::kSmemQ);  // [stage][k|v][BN][HEAD_DIM]

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const Phase2Work w = Phase2WorkOf<HEADS>(p);
  const int kvh = w.kvh, head0 = w.head0, heads = w.heads;
  const int row = w.row, span_lo = w.span_lo, span_hi = w.span_hi, out_state = w.out_state;
  const TppTables& t = p.t;


  // Q: the row's heads [head0, head0 + heads), zero rows after them.
  {
    const DType* q = static_cast<const DType*>(p.q) +
                     (static_cast<int64_t>(row) * p.num_q_heads + head0) * HEAD_DIM;
    for (int v = tid; v < HEADS * VECS; v += Cfg::kThreads) {
      const int h = v / VECS;
      const int c = v % VECS;
      const bool valid = h < heads;
      CpAsync16(s_q + Swizzle<HEAD_DIM, false>(h, c), valid ? q + h * HEAD_DIM + c * 8 : q, valid);
    }
    CpAsyncCommit();
  }

  auto load_tile = [&](int stage, const TileIter<BN>& it) {
    DType* s_k = s_kv + stage * 2 * BN * HEAD_DIM;
    LoadKvTile<BN, HEAD_DIM, Cfg::kThreads, KV8>(
        p, kvh, it, s_k, s_k + BN * HEAD_DIM,
        [](int r, int c) { return Swizzle<HEAD_DIM, false>(r, c); });
  };

  TileIter<BN> load_it, comp_it;
  load_it.Start(t, span_lo, span_hi);
  comp_it = load_it;
  StartPipeline<Cfg::kStages>(t, span_hi, load_it, load_tile);

  // Q's A fragments stay in registers for the whole item.
  const int j = lane >> 3;  // ldmatrix: which 8x8 matrix this lane addresses
  uint32_t qa[HEAD_DIM / 16][4];
  CpAsyncWait<Cfg::kStages - 1>();  // the Q group (committed first) has landed
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    LdMatrixX4(qa[kk], s_q + Swizzle<HEAD_DIM, false>((j & 1) * 8 + (lane & 7), kk * 2 + (j >> 1)));
  }

  float o[HEAD_DIM / 8][4] = {};  // rows lane/4 and lane/4 + 8, columns by n8 tile
  float row_max[2] = {kNegInf, kNegInf};  // raw scores q.k (unscaled)
  float row_sum[2] = {0.0f, 0.0f};        // this thread's share of the denominators
  const float scale = p.scale_log2;
  const int w0 = warp * 16;  // this warp's first slot in a tile
  int stage = 0;
  int load_stage = Cfg::kStages - 1;

  while (comp_it.span < span_hi) {
    PipelineStep<Cfg::kStages>(t, span_hi, load_it, load_stage, load_tile);
    const int nw = min(BN, t.span_end[comp_it.span] - comp_it.slot) - w0;  // warp's valid slots

    if (nw > 0) {  // warp-uniform
      const DType* s_k = s_kv + stage * 2 * BN * HEAD_DIM;
      const DType* s_v = s_k + BN * HEAD_DIM;
      float s[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        uint32_t b[4];
        LdMatrixX4(b, s_k + Swizzle<HEAD_DIM, false>(w0 + (j >> 1) * 8 + (lane & 7),
                                                    kk * 2 + (j & 1)));
        Mma16816<DType>(s[0], qa[kk], b[0], b[1]);
        Mma16816<DType>(s[1], qa[kk], b[2], b[3]);
      }
      if (nw < 16) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (nt * 8 + (lane & 3) * 2 + (e & 1) >= nw) s[nt][e] = kNegInf;
          }
        }
      }
      // Online softmax (nw >= 1: every row has a finite score in this tile).
      float neg_max[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float tile_max = fmaxf(fmaxf(s[0][2 * i], s[0][2 * i + 1]), fmaxf(s[1][2 * i], s[1][2 * i + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[i], tile_max);
        const float alpha = FastExp2((row_max[i] - new_max) * scale);  // 0 on the first tile
        neg_max[i] = -new_max * scale;
        row_max[i] = new_max;
        row_sum[i] *= alpha;
#pragma unroll
        for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
          o[dn][2 * i] *= alpha;
          o[dn][2 * i + 1] *= alpha;
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pr = FastExp2(fmaf(s[nt][e], scale, neg_max[e >> 1]));
          s[nt][e] = pr;
          row_sum[e >> 1] += pr;
        }
      }
      // O += P V over the warp's 16 slots (masked slots: P = 0 and zero-filled V).
      uint32_t a[4];
      a[0] = DTypeTraits<DType>::Pack(s[0][0], s[0][1]);
      a[1] = DTypeTraits<DType>::Pack(s[0][2], s[0][3]);
      a[2] = DTypeTraits<DType>::Pack(s[1][0], s[1][1]);
      a[3] = DTypeTraits<DType>::Pack(s[1][2], s[1][3]);
#pragma unroll
      for (int dn = 0; dn < HEAD_DIM / 16; ++dn) {
        uint32_t b[4];
        LdMatrixX4Trans(b, s_v + Swizzle<HEAD_DIM, false>(w0 + (j & 1) * 8 + (lane & 7),
                                                         dn * 2 + (j >> 1)));
        Mma16816<DType>(o[2 * dn], a, b[0], b[1]);
        Mma16816<DType>(o[2 * dn + 1], a, b[2], b[3]);
      }
    }
    comp_it.Next(t, span_hi);
    stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    load_stage = load_stage + 1 == Cfg::kStages ? 0 : load_stage + 1;
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline buffers become the combine buffers

  // The warps' states: s_o [warp][head][HEAD_DIM], s_m / s_l [warp][head] (log2-domain maxima).
  float* s_o = reinterpret_cast<float*>(smem);
  float* s_m = s_o + Cfg::kWarps * HEADS * HEAD_DIM;
  float* s_l = s_m + Cfg::kWarps * HEADS;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int h = (lane >> 2) + i * 8;
    float* dst = s_o + (warp * HEADS + h) * HEAD_DIM + (lane & 3) * 2;
#pragma unroll
    for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
      *reinterpret_cast<float2*>(dst + dn * 8) = make_float2(o[dn][2 * i], o[dn][2 * i + 1]);
    }
    if ((lane & 3) == 0) {
      // A warp that saw no slot keeps the empty state.
      s_m[warp * HEADS + h] = row_max[i] == kNegInf ? kNegInf : row_max[i] * scale;
      s_l[warp * HEADS + h] = sum;
    }
  }
  __syncthreads();
  Phase2Finish<HEAD_DIM, DType, Cfg::kWarps, HEADS, Cfg::kThreads>(p, s_o, s_m, s_l, row,
                                                                   out_state, head0, heads);
}

}  // namespace banyan::kernels::cuda::tpp
