// TPP phase 1 with 128-token K/V tiles (wgmma, sm_90a, warp-specialised; p1_wgmma = 3). Same
// work item, inputs and outputs as TppPhase1WgmmaWsKernel (phase1_wgmma.cuh): M tile 128, a
// producer warpgroup and two consumer warpgroups of 64 queries each.
//
// What differs is the consumers' loop. A tile is two consecutive 64-slot pieces of the item's
// spans (TileIter<64>'s sequence; the second may be absent), in rows 0-63 and 64-127 of a
// 128-row K / V stage. Per tile i and warpgroup:
//   S_{i+1} = Q K_{i+1}^T : head_dim / 16 wgmma m64n128k16 (Q in registers), then
//   O += P_i V_i          : 8 x head_dim / 64 wgmma m64n64k16 (P_i packed in registers),
// both issued back to back; the warpgroup waits for S_{i+1} alone and runs its softmax (the row
// max over 128 tokens, the exponentials, the row sums) while P_i V_i runs on the tensor cores;
// then it waits for P_i V_i, rescales O if the max moved, and packs P_{i+1} over P_i. Registers:
// one S (64), one P (32), O (64) and Q (32) per thread, against two S and two P sets in the
// 64-token kernel; and a tile's fixed costs (barrier waits, the max's shuffles and vote, the
// wgmma fences, commits and waits) are paid once per 128 tokens.
#pragma once

#include "kernels/cuda/tpp/phase1_wgmma.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM>
struct Phase1WgmmaWideConfig : WgmmaTile<HEAD_DIM> {
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = kConsumers * 128 + 128;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kBlockM = kConsumers * 64;
  static constexpr int kRows = 128;                        // token slots per tile
  static constexpr int kHalfBytes = kRows * 128;           // one 128-row x 64-element block
  static constexpr int kKvBytes = kRows * HEAD_DIM * 2;    // K (or V) of one stage
  static constexpr int kQBytes = kConsumers * WgmmaTile<HEAD_DIM>::kTileBytes;
  static constexpr int kStages = HEAD_DIM == 128 ? 3 : 6;
  static constexpr int kBarrierBytes = 1024;  // full[kStages], empty[kStages], q_full, stage_n
  static constexpr int kSmemBytes = kQBytes + kStages * 2 * kKvBytes + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};

// The softmax of one 128-token tile's scores s (n_a valid slots in columns 0-63, n_b in
// 64-127), in place: s becomes p. The running max moves lazily (as SoftmaxPv's); when it moves,
// the row sums are rescaled here and alpha is what O must be multiplied by once the P V in
// flight has completed. Returns whether any row of the warp moved (warp-uniform).
template <int HEAD_DIM>
__device__ __forceinline__ bool WideSoftmax(WgAcc<HEAD_DIM>& acc, float (&s)[16][4], int n_a,
                                            int n_b, float scale, int lane, float (&alpha)[2]) {
  using T = WgmmaTile<HEAD_DIM>;
  if (n_a < 64 || n_b < 64) {
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = (nt & 7) * 8 + (lane & 3) * 2 + (e & 1);
        if (col >= (nt < 8 ? n_a : n_b)) s[nt][e] = kNegInf;
      }
    }
  }
  // Two independent chains per row, joined at the end.
  float mx[2][2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[0][j] = fmaxf(s[j][0], s[j][1]);
    mx[1][j] = fmaxf(s[j][2], s[j][3]);
  }
#pragma unroll
  for (int nt = 2; nt < 16; ++nt) {
    mx[0][nt & 1] = fmaxf(mx[0][nt & 1], fmaxf(s[nt][0], s[nt][1]));
    mx[1][nt & 1] = fmaxf(mx[1][nt & 1], fmaxf(s[nt][2], s[nt][3]));
  }
  float tile_max[2] = {fmaxf(mx[0][0], mx[0][1]), fmaxf(mx[1][0], mx[1][1])};
  bool grow = false;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
    grow |= (tile_max[i] - acc.row_max[i]) * scale > T::kLazyLog2;  // -inf max: +inf
  }
  const bool any = __any_sync(0xffffffffu, grow);
  alpha[0] = alpha[1] = 1.0f;
  if (any) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float new_max = fmaxf(acc.row_max[i], tile_max[i]);
      alpha[i] = FastExp2((acc.row_max[i] - new_max) * scale);  // 0 on the first tile
      acc.row_max[i] = new_max;
      acc.row_sum[i] *= alpha[i];
    }
  }
  const float neg_max[2] = {-acc.row_max[0] * scale, -acc.row_max[1] * scale};
  float part[2][2] = {};
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = FastExp2(fmaf(s[nt][e], scale, neg_max[e >> 1]));
      part[e >> 1][nt & 1] += s[nt][e];
    }
  }
  acc.row_sum[0] += part[0][0] + part[0][1];
  acc.row_sum[1] += part[1][0] + part[1][1];
  return any;
}

// P (the probabilities in s) as the register A operands of the 8 16-token steps of P V.
template <typename DType>
__device__ __forceinline__ void PackP(const float (&s)[16][4], uint32_t (&a)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    a[kk][0] = DTypeTraits<DType>::Pack(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = DTypeTraits<DType>::Pack(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = DTypeTraits<DType>::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = DTypeTraits<DType>::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// S = Q K^T over the 128-row K tile at k_addr (issued and committed, not waited).
template <int HEAD_DIM, typename DType>
__device__ __forceinline__ void IssueWideS(float (&s)[16][4],
                                           const uint32_t (&qf)[HEAD_DIM / 16][4],
                                           uint32_t k_addr) {
  constexpr int kHalfBytes = Phase1WgmmaWideConfig<HEAD_DIM>::kHalfBytes;
  const uint64_t k_desc = SwizzledDesc(k_addr);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    WgmmaRS128<DType>(s, qf[kk], k_desc + (((kk >> 2) * kHalfBytes + (kk & 3) * 32) >> 4), kk > 0);
  }
  WgmmaCommit();
}

// O += P V over the 128-row V tile at v_addr (issued and committed, not waited).
template <int HEAD_DIM, typename DType>
__device__ __forceinline__ void IssueWidePv(WgAcc<HEAD_DIM>& acc, const uint32_t (&a)[8][4],
                                            uint32_t v_addr) {
  constexpr int kHalfBytes = Phase1WgmmaWideConfig<HEAD_DIM>::kHalfBytes;
  const uint64_t v_desc = SwizzledDesc(v_addr);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
    for (int h = 0; h < HEAD_DIM / 64; ++h) {
      WgmmaRSTransB<DType>(acc.o[h], a[kk], v_desc + ((h * kHalfBytes + kk * 2048) >> 4));
    }
  }
  WgmmaCommit();
}

// As TppPhase1WgmmaWsKernel, the producer writes each stage's two piece sizes (stage_n) and
// arrives on its full barrier once more after that store. Every wgmma is issued unconditionally
// (an S after the last tile reads a stale stage and is not used) and none stays in flight across
// the loop's back edge: otherwise ptxas serialises them (C7514 / C7515).
template <int HEAD_DIM, typename DType>
__global__ void __launch_bounds__(Phase1WgmmaWideConfig<HEAD_DIM>::kThreads, 1)
    TppPhase1WgmmaWideKernel(const __grid_constant__ TppParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Phase1WgmmaWideConfig<HEAD_DIM>;
  constexpr int STAGES = Cfg::kStages;
  constexpr int CONSUMER_WARPS = Cfg::kConsumers * 4;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - SmemAddr(smem_raw));
  // [Q of consumer 0, 1 (64-row tiles)][stage][K | V (128-row tiles)]; then the barriers.
  auto k_tile = [&](int stage) { return smem + Cfg::kQBytes + 2 * stage * Cfg::kKvBytes; };
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::kQBytes + 2 * STAGES * Cfg::kKvBytes);
  uint64_t* empty = full + STAGES;
  uint64_t* q_full = empty + STAGES;
  int32_t* stage_n = reinterpret_cast<int32_t*>(q_full + 1);  // [stage][piece] valid slots

  LaunchDependents();

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int kvh = blockIdx.y;
  const TppTables& t = p.t;
  const Phase1Item it(p, blockIdx.x);
  const int span_hi = it.span_hi;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      MbarInit(&full[s], 129);              // a cp.async arrival per producer thread + stage_n's
      MbarInit(&empty[s], CONSUMER_WARPS);  // one arrival per consumer warp
    }
    MbarInit(q_full, 128);
  }
  __syncthreads();

  if (warp >= CONSUMER_WARPS) {
    SetMaxRegs<Cfg::kProducerRegs, false>();
    const int ptid = tid - CONSUMER_WARPS * 32;
    LoadQTiles<HEAD_DIM, DType>(p, it, kvh, Cfg::kBlockM, smem, ptid, 128);
    CpAsyncMbarArrive(q_full);
    TileIter<64> load_it;
    load_it.Start(t, it.span_lo, span_hi);
    for (int i = 0; load_it.span < span_hi; ++i) {
      const int stage = i % STAGES;
      if (i >= STAGES) MbarWait(&empty[stage], ((i / STAGES) + 1) & 1);
      // Two pieces; an absent second one is zero-filled (its columns are masked, and a stage
      // never loaded before must not hold NaN bit patterns that a zero p would multiply).
      int n[2] = {0, 0};
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) {
        int chunk = 0, slot = 0;
        if (load_it.span < span_hi) {
          chunk = t.span_chunk[load_it.span];
          slot = load_it.slot;
          n[piece] = min(64, t.span_end[load_it.span] - slot);
          load_it.Next(t, span_hi);
        }
        LoadKvTile<HEAD_DIM, DType, 128, Cfg::kRows>(p, kvh, chunk, slot, n[piece], k_tile(stage),
                                                     ptid, piece * 64);
      }
      if (ptid == 0) {
        stage_n[2 * stage] = n[0];
        stage_n[2 * stage + 1] = n[1];
      }
      CpAsyncMbarArrive(&full[stage]);
      if (ptid == 0) MbarArrive(&full[stage]);  // publishes stage_n[stage]
    }
    CpAsyncCommit();
    CpAsyncWait<0>();
    return;
  }

  SetMaxRegs<Cfg::kConsumerRegs, true>();
  const int wg = warp >> 2;
  const int warp_in_wg = warp & 3;
  WgAcc<HEAD_DIM> acc;
  uint32_t qf[HEAD_DIM / 16][4];
  MbarWait(q_full, 0);
  FenceProxyAsync();
  LoadQFragments<HEAD_DIM>(qf, smem + wg * WgmmaTile<HEAD_DIM>::kTileBytes, warp_in_wg, lane);

  const int num_tiles = (CountTiles<64>(t, it.span_lo, span_hi, lane) + 1) / 2;
  float s[16][4];
  uint32_t a[8][4];
  float alpha[2];
  if (num_tiles > 0) {
    MbarWait(&full[0], 0);
    FenceProxyAsync();
  }
  IssueWideS<HEAD_DIM, DType>(s, qf, SmemAddr(k_tile(0)));
  WgmmaWait<0>();
  FenceRegs(s);
  if (num_tiles > 0) {
    WideSoftmax<HEAD_DIM>(acc, s, stage_n[0], stage_n[1], p.scale_log2, lane, alpha);  // O is 0
    PackP<DType>(s, a);
  }
  // The two consumer warpgroups take turns at issuing their MMAs (named barriers 1 and 2, over
  // both warpgroups' 256 threads): the tensor cores run one warpgroup's S and P V, then the
  // other's, so each one's S comes back early and its softmax runs under the other's MMAs.
  // Consumer 0 goes first; consumer 1's last turn hands over to nobody.
  constexpr int kTurnThreads = Cfg::kConsumers * 128;
  const int my_turn = 1 + wg;
  const int other_turn = 2 - wg;
  if (wg == 1 && num_tiles > 0) NamedBarrierArrive(other_turn, kTurnThreads);
  for (int i = 0; i < num_tiles; ++i) {
    const int stage = i % STAGES;
    const int next_stage = (i + 1) % STAGES;
    const bool has_next = i + 1 < num_tiles;
    if (has_next) {
      MbarWait(&full[next_stage], ((i + 1) / STAGES) & 1);
      FenceProxyAsync();
    }
    NamedBarrierSync(my_turn, kTurnThreads);
    IssueWideS<HEAD_DIM, DType>(s, qf, SmemAddr(k_tile(next_stage)));
    IssueWidePv<HEAD_DIM, DType>(acc, a, SmemAddr(k_tile(stage)) + Cfg::kKvBytes);
    if (wg == 0 || has_next) NamedBarrierArrive(other_turn, kTurnThreads);
    WgmmaWait<1>();  // S_{i+1}; P_i V_i stays in flight under its softmax
    FenceRegs(s);
    bool moved = false;
    if (has_next) {
      moved = WideSoftmax<HEAD_DIM>(acc, s, stage_n[2 * next_stage], stage_n[2 * next_stage + 1],
                                    p.scale_log2, lane, alpha);
    }
    WgmmaWait<0>();
#pragma unroll
    for (int h = 0; h < HEAD_DIM / 64; ++h) FenceRegs(acc.o[h]);
    __syncwarp();
    if (lane == 0) MbarArrive(&empty[stage]);  // this warp is done with tile i's K, V and sizes
    if (moved) {
#pragma unroll
      for (int h = 0; h < HEAD_DIM / 64; ++h) {
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
          acc.o[h][dn][0] *= alpha[0];
          acc.o[h][dn][1] *= alpha[0];
          acc.o[h][dn][2] *= alpha[1];
          acc.o[h][dn][3] *= alpha[1];
        }
      }
    }
    if (has_next) PackP<DType>(s, a);
  }
  StorePartials<HEAD_DIM>(p, it, kvh, acc, wg * 64 + warp_in_wg * 16, lane);
#else
  __trap();  // built only for sm_90a; the launcher never selects it elsewhere
#endif
}

}  // namespace banyan::kernels::cuda::tpp
