// TPP phase 1: one CTA per (phase-1 item, kv head). An item is one KV split (a range of the
// segment's spans) and one M tile of the segment's query matrix: the queries of rows
// [r0, r1) x the g query heads of the kv head, query m = (row - r0) * g + head-in-group.
//
// Four warps; each owns 16 * M_TILES queries (M_TILES m16 MMA tiles: every K/V fragment loaded by
// ldmatrix feeds M_TILES MMAs, which keeps shared-memory traffic under the tensor-core rate). The
// CTA streams the split's K/V in tiles of 64 token slots (one span's slots at most) through a
// cp.async pipeline in shared memory (padded or XOR-swizzled rows, so ldmatrix is
// conflict-free). Per tile:
//   S = Q K^T   : mma.sync m16n8k16, Q and K fragments by ldmatrix;
//   online softmax in registers (raw-score max, exp2 of one FFMA; masked slots are -inf);
//   O += P V    : P re-packed from the S accumulators, V by ldmatrix.trans.
// The output is a normalised partial state per (query, split): o fp32 and lse (log2 domain).
#pragma once

#include "kernels/cuda/tpp/common.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM, typename DType, int M_TILES>
struct Phase1Config {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMTiles = M_TILES;           // m16 tiles per warp: each K/V fragment
                                                    // loaded by ldmatrix feeds M_TILES MMAs
  static constexpr int kBlockM = kWarps * 16 * M_TILES;  // queries per CTA
  static constexpr int kBlockN = 64;                     // token slots per tile
  static constexpr int kStages = M_TILES == 1 ? 3 : 2;
  static constexpr int kVecs = HEAD_DIM / 8;  // 16-byte vectors per K/V/Q row
  // Shared-memory rows: M_TILES == 2 pads each row by 16 bytes (ldmatrix addresses stay affine,
  // which the register-bound 2-tile kernel needs); M_TILES == 1 XOR-swizzles unpadded rows
  // (less shared memory: two CTAs per SM with three stages). Both are bank-conflict free.
  static constexpr bool kPadded = M_TILES == 2;
  static constexpr int kRow = kPadded ? HEAD_DIM + 8 : HEAD_DIM;  // elements per smem row
  static constexpr int kSmemQ = kBlockM * kRow * sizeof(DType);
  static constexpr int kSmemTile = kBlockN * kRow * sizeof(DType);  // K or V of one stage
  static constexpr int kSmemBytes = kSmemQ + kStages * 2 * kSmemTile;
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 64, "head_dim: multiple of 16, >= 64");
  static_assert(kBlockN % 16 == 0, "tile: whole k16 steps");
};

template <int HEAD_DIM, typename DType, int M_TILES, bool KV8 = false>
__global__ void __launch_bounds__(128)
    TppPhase1Kernel(const __grid_constant__ TppParams p) {
  using Cfg = Phase1Config<HEAD_DIM, DType, M_TILES>;
  constexpr int MT = M_TILES;
  constexpr int BN = Cfg::kBlockN;
  constexpr int VECS = Cfg::kVecs;
  extern __shared__ __align__(128) uint8_t smem[];
  DType* s_q = reinterpret_cast<DType*>(smem);
  DType* s_kv = reinterpret_cast<DType*>(smem + Cfg::kSmemQ);  // [stage][k|v][BN][kRow]
  constexpr int ROW = Cfg::kRow;

  // Let phase 2 start early: it waits for this grid before it reads the partials.
  LaunchDependents();

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int item = blockIdx.x;
  const int kvh = blockIdx.y;
  const TppTables& t = p.t;
  const int seg = t.p1_seg[item];
  const int span_lo = t.p1_span_lo[item];
  const int span_hi = t.p1_span_hi[item];
  const int m_begin = t.p1_m_begin[item];
  const int state_base = t.p1_state[item];
  const int g = p.group;
  const int r0 = t.seg_row_begin[seg];
  const int num_m = (t.seg_row_end[seg] - r0) * g;
  const int hq = p.num_q_heads;

  const DType* q = static_cast<const DType*>(p.q);

  // Q tile, zero rows past the segment's queries.
  for (int v = tid; v < Cfg::kBlockM * VECS; v += Cfg::kThreads) {
    const int ml = v / VECS;
    const int c = v % VECS;
    const int m = m_begin + ml;
    const bool valid = m < num_m;
    const DType* src = q;
    if (valid) {
      const int row = r0 + m / g;
      const int head = kvh * g + m % g;
      src = q + (static_cast<int64_t>(row) * hq + head) * HEAD_DIM + c * 8;
    }
    CpAsync16(s_q + Swizzle<HEAD_DIM, Cfg::kPadded>(ml, c), src, valid);
  }
  CpAsyncCommit();

  auto load_tile = [&](int stage, const TileIter<BN>& it) {
    DType* s_k = s_kv + stage * 2 * BN * ROW;
    LoadKvTile<BN, HEAD_DIM, Cfg::kThreads, KV8>(
        p, kvh, it, s_k, s_k + BN * ROW,
        [](int r, int c) { return Swizzle<HEAD_DIM, Cfg::kPadded>(r, c); });
  };

  TileIter<BN> load_it, comp_it;
  load_it.Start(t, span_lo, span_hi);
  comp_it = load_it;
  StartPipeline<Cfg::kStages>(t, span_hi, load_it, load_tile);

  float o[MT][HEAD_DIM / 8][4] = {};  // O accumulators: rows lane/4 and lane/4 + 8 of tile mt
  float row_max[MT][2];                // running max of the raw scores q.k (unscaled)
  float row_sum[MT][2];                // this thread's share of the softmax denominator
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = kNegInf;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }
  const int warp_m0 = warp * 16 * MT;
  const bool warp_active = m_begin + warp_m0 < num_m;  // warp-uniform
  const int j = lane >> 3;  // ldmatrix: which 8x8 matrix this lane addresses
  int stage = 0;
  int load_stage = Cfg::kStages - 1;

  while (comp_it.span < span_hi) {
    PipelineStep<Cfg::kStages>(t, span_hi, load_it, load_stage, load_tile);
    const int n = min(BN, t.span_end[comp_it.span] - comp_it.slot);

    if (warp_active) {
      const DType* s_k = s_kv + stage * 2 * BN * ROW;
      const DType* s_v = s_k + BN * ROW;

      // S = Q K^T over the whole tile (slots past n are zero-filled, masked below). The kk loop
      // is outermost so that the 2 * MT * BN / 16 accumulator chains interleave.
      float s[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
        }
      }
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          LdMatrixX4(a[mt], s_q + Swizzle<HEAD_DIM, Cfg::kPadded>(warp_m0 + mt * 16 + (j & 1) * 8 + (lane & 7),
                                                    kk * 2 + (j >> 1)));
        }
#pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
          uint32_t b[4];
          LdMatrixX4(b, s_k + Swizzle<HEAD_DIM, Cfg::kPadded>(nn * 16 + (j >> 1) * 8 + (lane & 7),
                                                kk * 2 + (j & 1)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma16816<DType>(s[mt][2 * nn], a[mt], b[0], b[1]);
            Mma16816<DType>(s[mt][2 * nn + 1], a[mt], b[2], b[3]);
          }
        }
      }

      // Online softmax on raw scores (the scale is folded into one FFMA before exp2). Columns
      // past n are -inf (only partial tiles pay for the mask); n >= 1 keeps the max finite.
      if (n < BN) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (nt * 8 + (lane & 3) * 2 + (e & 1) >= n) s[mt][nt][e] = kNegInf;
            }
          }
        }
      }
      const float scale = p.scale_log2;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          tile_max[0] = fmaxf(tile_max[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
          tile_max[1] = fmaxf(tile_max[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
        }
        float neg_max[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
          tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
          const float new_max = fmaxf(row_max[mt][i], tile_max[i]);
          // (-inf - finite) * scale = -inf: alpha = 0 on the first tile.
          const float alpha = FastExp2((row_max[mt][i] - new_max) * scale);
          neg_max[i] = -new_max * scale;
          row_max[mt][i] = new_max;
          row_sum[mt][i] *= alpha;
#pragma unroll
          for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
            o[mt][dn][2 * i] *= alpha;
            o[mt][dn][2 * i + 1] *= alpha;
          }
        }
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float pr = FastExp2(fmaf(s[mt][nt][e], scale, neg_max[e >> 1]));
            s[mt][nt][e] = pr;
            row_sum[mt][e >> 1] += pr;
          }
        }
      }

      // O += P V (masked slots have P = 0 and zero-filled V).
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][0] = DTypeTraits<DType>::Pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          a[mt][1] = DTypeTraits<DType>::Pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          a[mt][2] = DTypeTraits<DType>::Pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          a[mt][3] = DTypeTraits<DType>::Pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dn = 0; dn < HEAD_DIM / 16; ++dn) {
          uint32_t b[4];
          LdMatrixX4Trans(b, s_v + Swizzle<HEAD_DIM, Cfg::kPadded>(kk * 16 + (j & 1) * 8 + (lane & 7),
                                                     dn * 2 + (j >> 1)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma16816<DType>(o[mt][2 * dn], a[mt], b[0], b[1]);
            Mma16816<DType>(o[mt][2 * dn + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    comp_it.Next(t, span_hi);
    stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    load_stage = load_stage + 1 == Cfg::kStages ? 0 : load_stage + 1;
  }
  CpAsyncWait<0>();

  if (!warp_active) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = row_sum[mt][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int m = m_begin + warp_m0 + mt * 16 + (lane >> 2) + i * 8;
      if (m >= num_m) continue;
      const int state = state_base + m / g;
      const int head = kvh * g + m % g;
      // An empty split (no slots) stays the empty state: o = 0, lse = -inf.
      const bool empty = !(sum > 0.0f);
      const float inv = empty ? 0.0f : 1.0f / sum;
      float* dst =
          p.partial_o + (static_cast<int64_t>(state) * hq + head) * HEAD_DIM + (lane & 3) * 2;
#pragma unroll
      for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
        *reinterpret_cast<float2*>(dst + dn * 8) =
            make_float2(o[mt][dn][2 * i] * inv, o[mt][dn][2 * i + 1] * inv);
      }
      if ((lane & 3) == 0) {
        p.partial_lse[static_cast<int64_t>(state) * hq + head] =
            empty ? kNegInf : row_max[mt][i] * p.scale_log2 + log2f(sum);
      }
    }
  }
}

}  // namespace banyan::kernels::cuda::tpp
