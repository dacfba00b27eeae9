// TPP phase 1 on Hopper warpgroup MMAs (wgmma, sm_90a). Same work item, inputs and outputs as
// TppPhase1Kernel (phase1.cuh): one CTA per (phase-1 item, kv head), the item's M tile of the
// segment's query matrix (query m = (row - r0) * g + head-in-group) against one KV split.
//
// WGS warpgroups (1 or 2), each owning 64 queries (M tile 64 * WGS). All threads stage K/V tiles
// of 64 token slots (one span's slots at most) through a cp.async pipeline into 128B-swizzled
// shared memory (wgmma.cuh); per tile and warpgroup:
//   S = Q K^T : head_dim / 16 wgmma m64n64k16, Q from registers (loaded once), K from shared
//               memory; issued for tile i + 1 before the softmax of tile i, so that the tensor
//               cores and the softmax overlap;
//   online softmax in registers (as phase1.cuh: raw-score max, exp2 of one FFMA);
//   O += P V  : P re-packed from the S accumulators as the register A operand, V from shared
//               memory as a transposed B, one m64n64k16 per 16 tokens and 64 head dims.
// The output is a normalised partial state per (query, split): o fp32 and lse (log2 domain).
#pragma once

#include "kernels/cuda/tpp/common.cuh"
#include "kernels/cuda/tpp/wgmma.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM, int WGS>
struct Phase1WgmmaConfig {
  static constexpr int kWarpgroups = WGS;
  static constexpr int kThreads = WGS * 128;
  static constexpr int kBlockM = WGS * 64;
  static constexpr int kBlockN = 64;                 // token slots per tile
  static constexpr int kHalves = HEAD_DIM / 64;      // 64-element column blocks of a row
  static constexpr int kTileBytes = 64 * HEAD_DIM * 2;  // 64 rows of K (or V, or Q)
  // One warpgroup: three stages (two CTAs per SM); two: four (one CTA per SM, 8 warps).
  static constexpr int kStages = WGS == 1 ? 3 : 4;
  // Tiles loaded ahead of the one being computed (tile i + 1 must have landed at tile i, since
  // the next S overlaps the softmax).
  static constexpr int kAhead = kStages - 1;
  static constexpr float kLazyLog2 = 8.0f;  // lazy rescaling threshold (log2 of p's bound)
  // Q of each warpgroup, then per stage K and V; +1024 to align the start to 1024 bytes.
  static constexpr int kSmemBytes = (WGS + kStages * 2) * kTileBytes + 1024;
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "head_dim 64 or 128");
};

template <int HEAD_DIM, typename DType, int WGS>
__global__ void __launch_bounds__(WGS * 128)
    TppPhase1WgmmaKernel(const __grid_constant__ TppParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Phase1WgmmaConfig<HEAD_DIM, WGS>;
  constexpr int BN = Cfg::kBlockN;
  constexpr int VECS = HEAD_DIM / 8;   // 16-byte vectors per row
  constexpr int TILE = Cfg::kTileBytes;
  constexpr int HALF = 64 * 128;       // bytes of one 64-row x 64-element block
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - SmemAddr(smem_raw));
  // [Q of wg 0..WGS-1][stage][K | V], each TILE bytes.
  auto q_tile = [&](int wg) { return smem + wg * TILE; };
  auto k_tile = [&](int stage) { return smem + (WGS + 2 * stage) * TILE; };

  LaunchDependents();

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int wg = tid >> 7;
  const int warp_in_wg = (tid >> 5) & 3;
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
  const DType* kv_base = static_cast<const DType*>(p.kv.base);
  const int64_t chunk_stride = p.kv.chunk_stride;
  const int64_t v_offset = p.kv.v_offset;
  const int chunk_size = p.kv.chunk_size;

  // Byte offset of vector c of row r in a [halves][64 rows][128 B] swizzled tile.
  auto tile_off = [](int r, int c) { return (c >> 3) * HALF + Sw128(r, c & 7); };

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
    CpAsync16(q_tile(ml >> 6) + tile_off(ml & 63, c), src, valid);
  }
  CpAsyncCommit();

  auto load_tile = [&](int stage, const TileIter<BN>& it) {
    const int n = min(BN, t.span_end[it.span] - it.slot);
    const DType* k_src = kv_base + static_cast<int64_t>(t.span_chunk[it.span]) * chunk_stride +
                         (static_cast<int64_t>(kvh) * chunk_size + it.slot) * HEAD_DIM;
    uint8_t* s_k = k_tile(stage);
    uint8_t* s_v = s_k + TILE;
#pragma unroll
    for (int i = 0; i < BN * VECS / Cfg::kThreads; ++i) {
      const int v = tid + i * Cfg::kThreads;
      const int row = v / VECS;
      const int c = v % VECS;
      const bool valid = row < n;
      const DType* src = valid ? k_src + row * HEAD_DIM + c * 8 : k_src;
      const uint32_t off = tile_off(row, c);
      CpAsync16(s_k + off, src, valid);
      CpAsync16(s_v + off, src + v_offset, valid);
    }
  };

  TileIter<BN> load_it, comp_it;
  load_it.Start(t, span_lo, span_hi);
  comp_it = load_it;
#pragma unroll
  for (int st = 0; st < Cfg::kAhead; ++st) {
    if (load_it.span < span_hi) {
      load_tile(st, load_it);
      load_it.Next(t, span_hi);
    }
    CpAsyncCommit();
  }

  float o[Cfg::kHalves][8][4] = {};  // O accumulators: head dims 64h + 8i + 2(lane%4) + 0..1
  float row_max[2] = {kNegInf, kNegInf};
  float row_sum[2] = {0.0f, 0.0f};
  const bool wg_active = m_begin + wg * 64 < num_m;  // warpgroup-uniform
  int stage = 0;
  int load_stage = Cfg::kAhead % Cfg::kStages;

  // S = Q K^T of the tile in `st` into d: Q from registers, 16 head dims per step (32 bytes into
  // a 128-byte swizzled K row).
  uint32_t qf[HEAD_DIM / 16][4];
  auto issue_s = [&](float (&d)[8][4], int st) {
    const uint32_t k_addr = SmemAddr(k_tile(st));
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      WgmmaRS<DType>(d, qf[kk], SwizzledDesc(k_addr + (kk >> 2) * HALF + (kk & 3) * 32), kk > 0);
    }
    WgmmaCommit();
  };

  // Q and tile 0 landed: Q fragments to registers (the mma.sync A layout), S of tile 0.
  CpAsyncWait<Cfg::kAhead - 1>();
  FenceProxyAsync();
  __syncthreads();
  float s_a[8][4], s_b[8][4];  // S of tiles i and i + 1, alternating
  {
    const int j = lane >> 3;
    const int qrow = warp_in_wg * 16 + (j & 1) * 8 + (lane & 7);
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      LdMatrixX4(qf[kk], q_tile(wg) + tile_off(qrow, kk * 2 + (j >> 1)));
    }
    // Issued unconditionally (as is the next tile's S below, on a stale stage after the last
    // tile, its result unused): a wgmma under a branch makes ptxas serialize all of them.
    issue_s(s_a, 0);
    WgmmaWait<0>();
    FenceRegs(s_a);
  }

  // Tile i, S_i in `cur`: S_{i+1} into `nxt` runs on the tensor cores under the softmax of tile
  // i; then O += P_i V_i. Both complete before the next barrier, which frees the stage of tile
  // i - 1 for a load. (Leaving P_i V_i in flight across the barrier, one stage more, made ptxas
  // serialize the wgmmas: C7514.)
  auto step = [&](float (&cur)[8][4], float (&nxt)[8][4]) {
    TileIter<BN> next_it = comp_it;
    next_it.Next(t, span_hi);
    CpAsyncWait<Cfg::kAhead - 2>();  // tile i + 1 landed
    FenceProxyAsync();
    __syncthreads();
    if (load_it.span < span_hi) {
      load_tile(load_stage, load_it);
      load_it.Next(t, span_hi);
    }
    CpAsyncCommit();
    const int n = min(BN, t.span_end[comp_it.span] - comp_it.slot);
    const int next_stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;

    // Every warpgroup computes, also one whose queries are all past the segment (zero Q, output
    // not written): a wgmma in flight across a branch makes ptxas serialize them.
    {
      issue_s(nxt, next_stage);

      if (n < BN) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (nt * 8 + (lane & 3) * 2 + (e & 1) >= n) cur[nt][e] = kNegInf;
          }
        }
      }
      const float scale = p.scale_log2;
      float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        tile_max[0] = fmaxf(tile_max[0], fmaxf(cur[nt][0], cur[nt][1]));
        tile_max[1] = fmaxf(tile_max[1], fmaxf(cur[nt][2], cur[nt][3]));
      }
      // Lazy rescaling: the running max moves (and O and the sum are rescaled) only when a row's
      // tile max exceeds it by more than 2^kLazyLog2 in p; otherwise p <= 2^kLazyLog2 against
      // the stale max, which the final normalisation and lse use consistently (exact).
      bool grow = false;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
        // -inf running max (first tile): +inf > kLazyLog2.
        grow |= (tile_max[i] - row_max[i]) * scale > Cfg::kLazyLog2;
      }
      if (__any_sync(0xffffffffu, grow)) {  // warp-uniform
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float new_max = fmaxf(row_max[i], tile_max[i]);
          const float alpha = FastExp2((row_max[i] - new_max) * scale);  // 0 on the first tile
          row_max[i] = new_max;
          row_sum[i] *= alpha;
#pragma unroll
          for (int h = 0; h < Cfg::kHalves; ++h) {
#pragma unroll
            for (int dn = 0; dn < 8; ++dn) {
              o[h][dn][2 * i] *= alpha;
              o[h][dn][2 * i + 1] *= alpha;
            }
          }
        }
      }
      const float neg_max[2] = {-row_max[0] * scale, -row_max[1] * scale};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pr = FastExp2(fmaf(cur[nt][e], scale, neg_max[e >> 1]));
          cur[nt][e] = pr;
          row_sum[e >> 1] += pr;
        }
      }

      // O += P V: 16 tokens per step (2048 bytes of V rows), one MMA per 64 head dims.
      uint32_t a[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        a[kk][0] = DTypeTraits<DType>::Pack(cur[2 * kk][0], cur[2 * kk][1]);
        a[kk][1] = DTypeTraits<DType>::Pack(cur[2 * kk][2], cur[2 * kk][3]);
        a[kk][2] = DTypeTraits<DType>::Pack(cur[2 * kk + 1][0], cur[2 * kk + 1][1]);
        a[kk][3] = DTypeTraits<DType>::Pack(cur[2 * kk + 1][2], cur[2 * kk + 1][3]);
      }
      const uint32_t v_addr = SmemAddr(k_tile(stage)) + TILE;
#pragma unroll
      for (int h = 0; h < Cfg::kHalves; ++h) FenceRegs(o[h]);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int h = 0; h < Cfg::kHalves; ++h) {
          WgmmaRSTransB<DType>(o[h], a[kk], SwizzledDesc(v_addr + h * HALF + kk * 2048));
        }
      }
      WgmmaCommit();
      WgmmaWait<0>();
#pragma unroll
      for (int h = 0; h < Cfg::kHalves; ++h) FenceRegs(o[h]);
      FenceRegs(nxt);
    }
    comp_it = next_it;
    stage = next_stage;
    load_stage = load_stage + 1 == Cfg::kStages ? 0 : load_stage + 1;
  };
  while (comp_it.span < span_hi) {
    step(s_a, s_b);
    if (comp_it.span >= span_hi) break;
    step(s_b, s_a);
  }
  CpAsyncWait<0>();

  if (!wg_active) return;
  const int warp_m0 = wg * 64 + warp_in_wg * 16;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int m = m_begin + warp_m0 + (lane >> 2) + i * 8;
    if (m >= num_m) continue;
    const int state = state_base + m / g;
    const int head = kvh * g + m % g;
    const bool empty = !(sum > 0.0f);  // an empty split stays the empty state
    const float inv = empty ? 0.0f : 1.0f / sum;
    float* dst =
        p.partial_o + (static_cast<int64_t>(state) * hq + head) * HEAD_DIM + (lane & 3) * 2;
#pragma unroll
    for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
      *reinterpret_cast<float2*>(dst + dn * 8) =
          make_float2(o[dn >> 3][dn & 7][2 * i] * inv, o[dn >> 3][dn & 7][2 * i + 1] * inv);
    }
    if ((lane & 3) == 0) {
      p.partial_lse[static_cast<int64_t>(state) * hq + head] =
          empty ? kNegInf : row_max[i] * p.scale_log2 + log2f(sum);
    }
  }
#else
  __trap();  // built only for sm_90a; the launcher never selects it elsewhere
#endif
}

}  // namespace banyan::kernels::cuda::tpp
