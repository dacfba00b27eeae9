// Prefill attention on Hopper's warpgroup MMAs (wgmma, sm_90a): the same work and output as
// PrefillMmaKernel (prefill_attention.cuh) with tiles of 128 packed rows, on the machinery of
// TPP's warp-specialised phase 1 (tpp/phase1_wgmma.cuh: swizzled tiles, S = Q K^T with Q from
// registers, the online softmax overlapped with the next tile's S, P V from registers).
//
// One CTA per (tile of 128 packed rows, kv head); a packed row is (new token j, q head k of the
// kv head) = j * group + k. Three warpgroups:
//  - the producer copies Q, then the K/V tiles of keys [64 i, 64 i + 64) of the sequence for
//    i = 0, 1, ... up to the last key any row of the tile sees, into a ring of stages. Tiles are
//    cut by position, not by span: a tile inside one span (chunks of 64 slots or more from
//    position 0 make every tile so) is 64 consecutive slots of one chunk; any other tile's rows
//    are found one by one (PrefillProduceKv). So any chunk size, partly filled chunks and spans
//    that start mid-chunk give full tiles. An FP8 cache is dequantized on the way in;
//  - two consumer warpgroups of 64 rows each run the tiles in pairs as TPP's phase 1 does, and
//    mask a tile's scores causally (key position > the row's token position) where the tile
//    reaches past the smallest position of the thread's rows. The output is normalised and
//    written in the cache dtype, as the other prefill kernels write it.
#pragma once

#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/tpp/phase1_wgmma.cuh"

namespace banyan::kernels::cuda {

template <int HEAD_DIM, bool KV8 = false>
struct PrefillWgmmaConfig : tpp::WgmmaTile<HEAD_DIM> {
  static constexpr int kConsumers = 2;  // warpgroups of 64 packed rows
  static constexpr int kBlockM = kConsumers * 64;
  static constexpr int kThreads = kConsumers * 128 + 128;
  // Registers move from the producer to the consumers within the 168 a thread launches with
  // (384 threads): 56 x 128 + 224 x 256 = 168 x 384. (TPP's producer keeps 40; this one finds
  // rows' slots and, with an FP8 cache, holds a batch of rows' codes.)
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * kThreads, "register budget");
  static constexpr int kStages = HEAD_DIM == 128 ? 5 : 8;
  static constexpr int kBarrierBytes = 1024;       // full[kStages], empty[kStages], q_full
  static constexpr int kTableBytes = 4 * 64 * 8;   // two tables of 64 rows' offsets; FP8: exps
  static constexpr int kSmemBytes = (kConsumers + 2 * kStages) * tpp::WgmmaTile<HEAD_DIM>::kTileBytes +
                                    kBarrierBytes + kTableBytes + 1024;
};

// The producer's K/V copies of one CTA: tile i (keys [64 i, 64 i + 64), rows past kv_end zero)
// into the K and V tiles of stage i % STAGES at `stages`, after the consumers released it. A tile
// inside one span is 64 consecutive slots of one chunk; any other tile's rows are found one by
// one, producer thread r < 64 walking the spans forward for row r (its keys only grow) into one
// of two shared tables of row offsets (and, FP8, of exponent offsets), used in turn (a barrier
// of the producer between two uses of one table). A 16-bit cache is copied with cp.async (an arrival on the stage's full barrier
// once this thread's copies land); an FP8 cache goes through registers, four rows' codes and
// exponents loaded at once, dequantized into the same swizzled tiles and published by a proxy
// fence and a plain arrival.
template <int HEAD_DIM, typename DType, bool KV8, int STAGES>
__device__ __forceinline__ void PrefillProduceKv(const PrefillParams& p, int seq, int kvh,
                                                 int kv_end, int num_tiles, int ptid,
                                                 uint8_t* stages, uint64_t* full, uint64_t* empty,
                                                 int64_t* tables) {
  using T = tpp::WgmmaTile<HEAD_DIM>;
  constexpr int BN = T::kBlockN;
  constexpr int TILE = T::kTileBytes;
  constexpr int kRowStep = 128 / T::kVecs;  // rows between a thread's copies
  constexpr int kRows = BN / kRowStep;      // rows a thread copies per tile
  const int row0 = ptid / T::kVecs, c = ptid % T::kVecs;
  const int se = p.seq_span_end[seq];
  int cur = p.seq_span_begin[seq];  // a span starting at or before this thread's next key
  int slow_tiles = 0;
  for (int i = 0; i < num_tiles; ++i) {
    const int stage = i % STAGES;
    if (i >= STAGES) tpp::MbarWait(&empty[stage], ((i / STAGES) + 1) & 1);
    uint8_t* s_k = stages + 2 * stage * TILE;
    const int n0 = i * BN;
    while (cur + 1 < se && p.span_pos[cur + 1] <= n0) ++cur;
    const int sp = p.span_pos[cur], sb = p.span_begin[cur];
    const bool one_span = sp + p.span_end[cur] - sb >= min(n0 + BN, kv_end);
    // Copies the tile's rows; row_at(r): the element (FP8: byte) offset of row r's K row, -1
    // past kv_end. Instantiated for each way of finding rows, so that a tile in one span costs
    // an add per row.
    auto copy_rows = [&](auto row_at, auto row_exp) {
      if constexpr (!KV8) {
        const DType* base = static_cast<const DType*>(p.kv.base);
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int r = row0 + j * kRowStep;
          const int64_t off = row_at(r);
          const DType* src = base + (off >= 0 ? off + c * 8 : 0);
          CpAsync16(s_k + T::Off(r, c), src, off >= 0);
          CpAsync16(s_k + TILE + T::Off(r, c), src + p.kv.v_offset, off >= 0);
        }
        tpp::CpAsyncMbarArrive(&full[stage]);
      } else {
        // row_exp(r): the byte offset of row r's K exponent (KvFp8ExpOffset).
        const auto* codes = static_cast<const uint8_t*>(p.kv.base);
        const auto* exps = static_cast<const int8_t*>(p.kv.base);
        constexpr int B = kRows < 4 ? kRows : 4;
#pragma unroll
        for (int j0 = 0; j0 < kRows; j0 += B) {
          uint2 kc[B], vc[B];
          int ke[B], ve[B];
#pragma unroll
          for (int j = 0; j < B; ++j) {  // zero codes, exponent 0 (scale 1): zeros past kv_end
            const int64_t off = row_at(row0 + (j0 + j) * kRowStep);
            kc[j] = vc[j] = make_uint2(0, 0);
            ke[j] = ve[j] = 0;
            if (off >= 0) {
              kc[j] = *reinterpret_cast<const uint2*>(codes + off + c * 8);
              vc[j] = *reinterpret_cast<const uint2*>(codes + off + c * 8 + p.kv.v_offset);
              const int64_t eo = row_exp(row0 + (j0 + j) * kRowStep);
              ke[j] = exps[eo];
              ve[j] = exps[eo + KvFp8VExpStride(p.kv)];
            }
          }
#pragma unroll
          for (int j = 0; j < B; ++j) {
            const uint32_t o = T::Off(row0 + (j0 + j) * kRowStep, c);
            *reinterpret_cast<uint4*>(s_k + o) = DequantKv8<DType>(kc[j], KvFp8ScaleDev(ke[j]));
            *reinterpret_cast<uint4*>(s_k + TILE + o) = DequantKv8<DType>(vc[j], KvFp8ScaleDev(ve[j]));
          }
        }
        tpp::FenceProxyAsync();  // stored, not copied: published by a fence and a plain arrival
        tpp::MbarArrive(&full[stage]);
      }
    };
    if (one_span) {
      const int64_t row_base = static_cast<int64_t>(p.span_chunk[cur]) * p.kv.chunk_stride +
                               (static_cast<int64_t>(kvh) * p.kv.chunk_size + sb + n0 - sp) * HEAD_DIM;
      if constexpr (!KV8) {
        // The common case written out: the producer's instructions per row bound the kernel
        // (through copy_rows it ran 8-15 % slower, one H100, the same run).
        const DType* base = static_cast<const DType*>(p.kv.base) + row_base + c * 8;
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int r = row0 + j * kRowStep;
          const bool valid = n0 + r < kv_end;
          const DType* src = valid ? base + r * HEAD_DIM : base;
          CpAsync16(s_k + T::Off(r, c), src, valid);
          CpAsync16(s_k + TILE + T::Off(r, c), src + p.kv.v_offset, valid);
        }
        tpp::CpAsyncMbarArrive(&full[stage]);
      } else {
        const int64_t exp_base = KvFp8ExpOffset(p.kv, p.span_chunk[cur], kvh, sb + n0 - sp);
        copy_rows([&](int r) -> int64_t { return n0 + r < kv_end ? row_base + r * HEAD_DIM : -1; },
                  [&](int r) -> int64_t { return exp_base + r; });
      }
    } else {
      int64_t* table = tables + (slow_tiles & 1) * BN;
      int64_t* exp_table = table + 2 * BN;  // (FP8 only)
      ++slow_tiles;
      if (ptid < BN) {
        const int key = n0 + ptid;
        int64_t off = -1;
        if (key < kv_end) {
          while (cur + 1 < se && p.span_pos[cur + 1] <= key) ++cur;
          const int slot = p.span_begin[cur] + key - p.span_pos[cur];
          off = static_cast<int64_t>(p.span_chunk[cur]) * p.kv.chunk_stride +
                (static_cast<int64_t>(kvh) * p.kv.chunk_size + slot) * HEAD_DIM;
          if constexpr (KV8) exp_table[ptid] = KvFp8ExpOffset(p.kv, p.span_chunk[cur], kvh, slot);
        }
        table[ptid] = off;
      }
      tpp::NamedBarrierSync(1, 128);
      copy_rows([&](int r) -> int64_t { return table[r]; },
                [&](int r) -> int64_t { return exp_table[r]; });
    }
  }
  if constexpr (!KV8) {
    CpAsyncCommit();
    CpAsyncWait<0>();
  }
}

template <int HEAD_DIM, typename DType, bool KV8>
__global__ void __launch_bounds__(PrefillWgmmaConfig<HEAD_DIM, KV8>::kThreads, 1)
    PrefillWgmmaKernel(const __grid_constant__ PrefillParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace tpp;
  using Cfg = PrefillWgmmaConfig<HEAD_DIM, KV8>;
  using T = WgmmaTile<HEAD_DIM>;
  constexpr int BN = T::kBlockN;
  constexpr int TILE = T::kTileBytes;
  constexpr int STAGES = Cfg::kStages;
  constexpr int CONSUMER_WARPS = Cfg::kConsumers * 4;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - SmemAddr(smem_raw));
  // [Q of consumer 0, 1][stage][K | V], each TILE bytes; then the barriers.
  auto k_tile = [&](int stage) { return smem + (Cfg::kConsumers + 2 * stage) * TILE; };
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + (Cfg::kConsumers + 2 * STAGES) * TILE);
  uint64_t* empty = full + STAGES;
  uint64_t* q_full = empty + STAGES;
  // The producer's two tables of rows' offsets, for tiles of several spans.
  int64_t* tables =
      reinterpret_cast<int64_t*>(smem + (Cfg::kConsumers + 2 * STAGES) * TILE + Cfg::kBarrierBytes);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int kvh = blockIdx.y;
  const int seq = p.tile_seq[blockIdx.x], m0 = p.tile_m0[blockIdx.x];
  const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
  const int pos0 = p.seq_pos0[seq], q_row = p.seq_q_row[seq];
  const int packed_total = p.seq_num_q[seq] * g;
  const int kv_end = pos0 + (min(packed_total, m0 + Cfg::kBlockM) - 1) / g + 1;  // keys seen
  const int num_tiles = (kv_end + BN - 1) / BN;                                  // >= 1

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      MbarInit(&full[s], 128);              // an arrival per producer thread
      MbarInit(&empty[s], CONSUMER_WARPS);  // one arrival per consumer warp
    }
    MbarInit(q_full, 128);
  }
  __syncthreads();

  if (warp >= CONSUMER_WARPS) {
    SetMaxRegs<Cfg::kProducerRegs, false>();
    const int ptid = tid - CONSUMER_WARPS * 32;
    const DType* q = static_cast<const DType*>(p.q);
    for (int v = ptid; v < Cfg::kBlockM * T::kVecs; v += 128) {
      const int ml = v / T::kVecs, c = v % T::kVecs;
      const int pr = m0 + ml;
      const bool valid = pr < packed_total;
      const DType* src =
          valid ? q + (static_cast<int64_t>(q_row + pr / g) * hq + kvh * g + pr % g) * HEAD_DIM + c * 8
                : q;
      CpAsync16(smem + (ml >> 6) * TILE + T::Off(ml & 63, c), src, valid);
    }
    CpAsyncMbarArrive(q_full);
    PrefillProduceKv<HEAD_DIM, DType, KV8, STAGES>(p, seq, kvh, kv_end, num_tiles, ptid,
                                                    k_tile(0), full, empty, tables);
    return;
  }

  // Consumer warpgroups.
  SetMaxRegs<Cfg::kConsumerRegs, true>();
  const int wg = warp >> 2;
  const int warp_in_wg = warp & 3;
  const int row_in_tile = wg * 64 + warp_in_wg * 16 + (lane >> 2);  // + 8 i
  int limit[2];  // keys [0, limit) visible to this thread's rows i = 0, 1
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = m0 + row_in_tile + 8 * i;
    limit[i] = pr < packed_total ? pos0 + pr / g + 1 : kv_end;
  }
  const int min_limit = min(limit[0], limit[1]);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  WgAcc<HEAD_DIM> acc;
  uint32_t qf[HEAD_DIM / 16][4];
  MbarWait(q_full, 0);
  FenceProxyAsync();
  LoadQFragments<HEAD_DIM>(qf, smem + wg * TILE, warp_in_wg, lane);

  // A tile's scores are masked causally where it reaches past the smallest position of the
  // thread's rows (the diagonal, and keys past kv_end, which are zero-filled).
  ConsumeTilesWs<HEAD_DIM, DType, STAGES>(
      acc, qf, num_tiles, k_tile(0), full, empty, scale_log2, lane,
      [](int, int) { return BN; },
      [&](int i, float(&s)[8][4]) {
        const int n0 = i * BN;
        if (n0 + BN <= min_limit) return;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (n0 + nt * 8 + (lane & 3) * 2 + (e & 1) >= limit[e >> 1]) s[nt][e] = kNegInf;
          }
        }
      });

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = acc.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int pr = m0 + row_in_tile + 8 * r;
    if (pr >= packed_total) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    DType* dst = static_cast<DType*>(p.out) +
                 (static_cast<int64_t>(q_row + pr / g) * hq + kvh * g + pr % g) * HEAD_DIM +
                 (lane & 3) * 2;
#pragma unroll
    for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dst + dn * 8) = DTypeTraits<DType>::Pack(
          acc.o[dn >> 3][dn & 7][2 * r] * inv, acc.o[dn >> 3][dn & 7][2 * r + 1] * inv);
    }
  }
#else
  __trap();  // built only for sm_90a; the dispatch never selects it elsewhere
#endif
}

}  // namespace banyan::kernels::cuda
