// TPP phase 1 on Hopper warpgroup MMAs (wgmma, sm_90a). Same work item, inputs and outputs as
// TppPhase1Kernel (phase1.cuh): one CTA per (phase-1 item, kv head), the item's M tile of the
// segment's query matrix (query m = (row - r0) * g + head-in-group) against one KV split.
//
// Each warpgroup owns 64 queries. K/V tiles of 64 token slots (one span's slots at most) land by
// cp.async in 128B-swizzled shared memory (wgmma.cuh); per tile and warpgroup:
//   S = Q K^T : head_dim / 16 wgmma m64n64k16, Q from registers (loaded once), K from shared
//               memory; issued for tile i + 1 before the softmax of tile i, so that the tensor
//               cores and the softmax overlap;
//   online softmax in registers (raw-score max, exp2 of one FFMA, lazy rescaling);
//   O += P V  : P re-packed from the S accumulators as the register A operand, V from shared
//               memory as a transposed B, one m64n64k16 per 16 tokens and 64 head dims, each
//               16 tokens' MMAs issued as soon as their probabilities are packed (under the
//               rest of the tile's exponentials).
// Two kernels:
//  - TppPhase1WgmmaKernel<.., WGS>: WGS warpgroups (M tile 64 * WGS) that all issue the cp.async
//    loads and meet at one barrier per tile;
//  - TppPhase1WgmmaWsKernel (M tile 128, warp-specialised): a producer warpgroup issues every
//    load and signals each stage's "full" mbarrier; the two consumer warpgroups wait only for
//    their stage and release it through its "empty" mbarrier, so they never wait for each other;
//    they take tiles in pairs, the even tile's P V in flight under the odd tile's softmax.
//    With an FP8 KV cache (KV8) the producer copies raw FP8 tiles into a ring two tiles ahead and
//    dequantizes each into a stage (Fp8RawTile); the other kernels' KV8 loads go through
//    registers (LoadKvTile).
// The output is a normalised partial state per (query, split): o fp32 and lse (log2 domain).
#pragma once

#include <type_traits>

#include "kernels/cuda/tpp/common.cuh"
#include "kernels/cuda/tpp/wgmma.cuh"

namespace banyan::kernels::cuda::tpp {

template <int HEAD_DIM>
struct WgmmaTile {
  static constexpr int kBlockN = 64;                    // token slots per tile
  static constexpr int kHalves = HEAD_DIM / 64;         // 64-element column blocks of a row
  static constexpr int kTileBytes = 64 * HEAD_DIM * 2;  // 64 rows of K (or V, or Q)
  static constexpr int kHalfBytes = 64 * 128;           // one 64-row x 64-element block
  static constexpr int kVecs = HEAD_DIM / 8;            // 16-byte vectors per row
  static constexpr float kLazyLog2 = 8.0f;  // lazy rescaling threshold (log2 of p's bound)
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "head_dim 64 or 128");
  // Byte offset of vector c of row r in a [halves][64 rows][128 B] swizzled tile.
  __device__ static uint32_t Off(int r, int c) { return (c >> 3) * kHalfBytes + Sw128(r, c & 7); }
};

template <int HEAD_DIM, int WGS>
struct Phase1WgmmaConfig : WgmmaTile<HEAD_DIM> {
  static constexpr int kThreads = WGS * 128;
  static constexpr int kBlockM = WGS * 64;
  // One warpgroup: three stages (two CTAs per SM); two: four (one CTA per SM, 8 warps).
  static constexpr int kStages = WGS == 1 ? 3 : 4;
  // Tiles loaded ahead of the one being computed (tile i + 1 must have landed at tile i, since
  // the next S overlaps the softmax).
  static constexpr int kAhead = kStages - 1;
  // Q of each warpgroup, then per stage K and V; +1024 to align the start to 1024 bytes.
  static constexpr int kSmemBytes = (WGS + kStages * 2) * WgmmaTile<HEAD_DIM>::kTileBytes + 1024;
};

template <int HEAD_DIM, bool KV8 = false>
struct Phase1WgmmaWsConfig : WgmmaTile<HEAD_DIM> {
  static constexpr int kConsumers = 2;                     // warpgroups, 64 queries each
  static constexpr int kThreads = kConsumers * 128 + 128;  // + the producer warpgroup
  // Registers are granted per warpgroup: the producer gives most of its share to the consumers
  // (setmaxnreg), 40 x 128 + 232 x 256 = 64,512 of the SM's 65,536.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kBlockM = kConsumers * 64;
  // An FP8 cache (KV8) gives two bf16 stages to a ring of raw FP8 tiles (Fp8RawTile): the
  // producer copies codes there asynchronously, kRing - 1 tiles ahead, and dequantizes the
  // oldest into a stage.
  static constexpr int kStages = KV8 ? (HEAD_DIM == 128 ? 3 : 6) : (HEAD_DIM == 128 ? 5 : 8);
  static constexpr int kRing = KV8 ? 3 : 0;
  static constexpr int kExpBytes = 80;  // a tile's 64 exponents from their 4-byte aligned word
  static constexpr int kRawBytes = 2 * 64 * HEAD_DIM + 2 * kExpBytes;  // K, V codes; K, V exps
  static constexpr int kBarrierBytes = 1024;  // full[kStages], empty[kStages], q_full, stage_n
  static constexpr int kSmemBytes = (kConsumers + kStages * 2) * WgmmaTile<HEAD_DIM>::kTileBytes +
                                    kRing * kRawBytes + kBarrierBytes + 1024;
};

// The per-item values every phase-1 kernel reads first.
struct Phase1Item {
  int span_lo, span_hi, m_begin, state_base, r0, num_m;
  __device__ Phase1Item(const TppParams& p, int item) {
    const TppTables& t = p.t;
    const int seg = t.p1_seg[item];
    span_lo = t.p1_span_lo[item];
    span_hi = t.p1_span_hi[item];
    m_begin = t.p1_m_begin[item];
    state_base = t.p1_state[item];
    r0 = t.seg_row_begin[seg];
    num_m = (t.seg_row_end[seg] - r0) * p.group;
  }
};

// Copies query rows [m_begin, m_begin + rows) of the item (zeros past its queries) into
// swizzled 64-row Q tiles at `dst`, threads tid = 0..threads-1.
template <int HEAD_DIM, typename DType>
__device__ __forceinline__ void LoadQTiles(const TppParams& p, const Phase1Item& it, int kvh,
                                           int rows, uint8_t* dst, int tid, int threads) {
  using T = WgmmaTile<HEAD_DIM>;
  const DType* q = static_cast<const DType*>(p.q);
  const int g = p.group;
  for (int v = tid; v < rows * T::kVecs; v += threads) {
    const int ml = v / T::kVecs;
    const int c = v % T::kVecs;
    const int m = it.m_begin + ml;
    const bool valid = m < it.num_m;
    const DType* src = q;
    if (valid) {
      const int row = it.r0 + m / g;
      const int head = kvh * g + m % g;
      src = q + (static_cast<int64_t>(row) * p.num_q_heads + head) * HEAD_DIM + c * 8;
    }
    CpAsync16(dst + (ml >> 6) * T::kTileBytes + T::Off(ml & 63, c), src, valid);
  }
}

// Issues the cp.async copies of one K/V tile (slots [slot, slot + n) of a chunk; rows past n
// zero-filled) into swizzled K and V tiles, threads tid = 0..threads-1.
template <int HEAD_DIM, typename DType, int THREADS, bool KV8>
__device__ __forceinline__ void LoadKvTile(const TppParams& p, int kvh, int chunk, int slot, int n,
                                           uint8_t* s_k, int tid) {
  using T = WgmmaTile<HEAD_DIM>;
  static_assert(THREADS % T::kVecs == 0 && (THREADS / T::kVecs) % 8 == 0,
                "each thread keeps one vector column and one row phase (row & 7)");
  constexpr int kRowStep = THREADS / T::kVecs;  // rows between a thread's copies
  const DType* k_src = static_cast<const DType*>(p.kv.base) +
                       static_cast<int64_t>(chunk) * p.kv.chunk_stride +
                       (static_cast<int64_t>(kvh) * p.kv.chunk_size + slot) * HEAD_DIM;
  // Row tid / kVecs + kRowStep i, vector tid % kVecs: the swizzled offset moves by a constant.
  const int row0 = tid / T::kVecs;
  const int c = tid % T::kVecs;
  const uint32_t off0 = T::Off(row0, c);
  const DType* src0 = k_src + row0 * HEAD_DIM + c * 8;
  uint8_t* s_v = s_k + T::kTileBytes;
  if constexpr (KV8) {
    // FP8 cache: through registers, dequantized into the same swizzled tiles (not asynchronous;
    // the writers' proxy fence and the barrier or mbarrier arrival that follow publish them).
    const int64_t k0 = static_cast<int64_t>(chunk) * p.kv.chunk_stride +
                       (static_cast<int64_t>(kvh) * p.kv.chunk_size + slot) * HEAD_DIM + c * 8;
    const int64_t e0 = KvFp8ExpOffset(p.kv, chunk, kvh, slot);
    const int64_t ve = KvFp8VExpStride(p.kv);
    // The loads of a batch of 4 rows first (one memory latency per batch), then the conversions
    // and stores. (The warp-specialised kernel's producer does not come here: Fp8RawTile.)
    constexpr int N = T::kBlockN / kRowStep;
    constexpr int B = N < 4 ? N : 4;
    const auto* codes = static_cast<const uint8_t*>(p.kv.base);
    const auto* exps = static_cast<const int8_t*>(p.kv.base);
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += B) {
      uint2 kc[B], vc[B];
      int8_t ke[B], ve8[B];
#pragma unroll
      for (int j = 0; j < B; ++j) {
        const int r = row0 + (i0 + j) * kRowStep;
        kc[j] = vc[j] = make_uint2(0, 0);
        ke[j] = ve8[j] = 0;
        if (r < n) {
          kc[j] = *reinterpret_cast<const uint2*>(codes + k0 + r * HEAD_DIM);
          vc[j] = *reinterpret_cast<const uint2*>(codes + k0 + p.kv.v_offset + r * HEAD_DIM);
          ke[j] = exps[e0 + r];
          ve8[j] = exps[e0 + ve + r];
        }
      }
#pragma unroll
      for (int j = 0; j < B; ++j) {
        const uint32_t off = off0 + (i0 + j) * kRowStep * 128;
        *reinterpret_cast<uint4*>(s_k + off) = DequantKv8<DType>(kc[j], KvFp8ScaleDev(ke[j]));
        *reinterpret_cast<uint4*>(s_v + off) = DequantKv8<DType>(vc[j], KvFp8ScaleDev(ve8[j]));
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < T::kBlockN / kRowStep; ++i) {
      const bool valid = row0 + i * kRowStep < n;
      const DType* src = valid ? src0 + i * kRowStep * HEAD_DIM : k_src;
      const uint32_t off = off0 + i * kRowStep * 128;
      CpAsync16(s_k + off, src, valid);
      CpAsync16(s_v + off, src + p.kv.v_offset, valid);
    }
  }
}

// The warp-specialised kernel's FP8 producer (KV8): a ring of raw tiles, each the 64 rows of K
// codes, of V codes, and the 4-byte aligned words holding the rows' K and V exponents. Each
// producer thread copies the same 16-byte code vectors of every tile (row v / (HEAD_DIM / 16),
// column v % (HEAD_DIM / 16), v = ptid + 128 j) and dequantizes exactly those, so its codes
// need no barrier (cp.async.wait_group suffices); the exponent words, copied by a few threads,
// are read by all after a named barrier of the producer warpgroup.
template <int HEAD_DIM>
struct Fp8RawTile {
  static constexpr int kVecs = HEAD_DIM / 16;  // 16-code vectors per row
  static constexpr int kPerThread = 64 * kVecs / 128;
  static constexpr int kExpBytes = Phase1WgmmaWsConfig<HEAD_DIM, true>::kExpBytes;
  uint8_t* base;
  __device__ uint8_t* k() const { return base; }
  __device__ uint8_t* v() const { return base + 64 * HEAD_DIM; }
  __device__ uint8_t* k_exp() const { return base + 2 * 64 * HEAD_DIM; }
  __device__ uint8_t* v_exp() const { return k_exp() + kExpBytes; }
};

// Issues the copies of one tile (slots [slot, slot + n) of chunk `chunk`, rows past n
// zero-filled) into `raw`; producer thread ptid of 128. The caller commits.
template <int HEAD_DIM>
__device__ __forceinline__ void IssueFp8RawTile(const TppParams& p, int kvh, int chunk, int slot,
                                                int n, const Fp8RawTile<HEAD_DIM>& raw, int ptid) {
  using R = Fp8RawTile<HEAD_DIM>;
  const auto* codes = static_cast<const uint8_t*>(p.kv.base);
  const int64_t k0 = static_cast<int64_t>(chunk) * p.kv.chunk_stride +
                     (static_cast<int64_t>(kvh) * p.kv.chunk_size + slot) * HEAD_DIM;
#pragma unroll
  for (int j = 0; j < R::kPerThread; ++j) {
    const int v = ptid + 128 * j;
    const int r = v / R::kVecs, c = v % R::kVecs;
    const bool valid = r < n;
    const uint8_t* src = codes + k0 + (valid ? r * HEAD_DIM + c * 16 : 0);
    CpAsync16(raw.k() + r * HEAD_DIM + c * 16, src, valid);
    CpAsync16(raw.v() + r * HEAD_DIM + c * 16, src + p.kv.v_offset, valid);
  }
  // Exponents: K rows' from e0, V rows' num_kv_heads * chunk_size later (a multiple of 8, so
  // the same alignment); words from e0 rounded down, none read past the tile's last row.
  const int64_t e0 = KvFp8ExpOffset(p.kv, chunk, kvh, slot);
  const int64_t a0 = e0 & ~int64_t{3};
  const int words = static_cast<int>((e0 + n - a0 + 3) / 4);  // at most 17
  const int w = ptid & 31;
  if (w < words && ptid < 64) {
    const bool is_v = ptid >= 32;
    const int64_t at = a0 + 4 * w + (is_v ? KvFp8VExpStride(p.kv) : 0);
    const int64_t end = e0 + n + (is_v ? KvFp8VExpStride(p.kv) : 0);
    const int bytes = end - at < 4 ? static_cast<int>(end - at) : 4;
    CpAsync4((is_v ? raw.v_exp() : raw.k_exp()) + 4 * w, codes + at, bytes);
  }
}

// Dequantizes this thread's vectors of a landed raw tile (n valid rows; exponents readable)
// into the swizzled bf16 / fp16 K and V tiles at s_k (V a tile later).
template <int HEAD_DIM, typename DType>
__device__ __forceinline__ void ConvertFp8RawTile(const TppParams& p, int kvh, int chunk,
                                                  int slot, int n,
                                                  const Fp8RawTile<HEAD_DIM>& raw, uint8_t* s_k,
                                                  int ptid) {
  using R = Fp8RawTile<HEAD_DIM>;
  using T = WgmmaTile<HEAD_DIM>;
  const int lead = static_cast<int>(KvFp8ExpOffset(p.kv, chunk, kvh, slot) & 3);
  const auto* ke = reinterpret_cast<const int8_t*>(raw.k_exp()) + lead;
  const auto* ve = reinterpret_cast<const int8_t*>(raw.v_exp()) + lead;
#pragma unroll 1
  for (int j = 0; j < R::kPerThread; ++j) {
    const int v = ptid + 128 * j;
    const int r = v / R::kVecs, c = v % R::kVecs;
    // Rows past n hold zero codes; their exponent words are not copied, so scale 1 (0 * 1 = 0).
    const float sk = r < n ? KvFp8ScaleDev(ke[r]) : 1.0f;
    const float sv = r < n ? KvFp8ScaleDev(ve[r]) : 1.0f;
    const uint4 kc = *reinterpret_cast<const uint4*>(raw.k() + r * HEAD_DIM + c * 16);
    const uint4 vc = *reinterpret_cast<const uint4*>(raw.v() + r * HEAD_DIM + c * 16);
    // 16 codes -> two 8-element vectors of the tile: columns 2c and 2c + 1 (of 8 elements).
    *reinterpret_cast<uint4*>(s_k + T::Off(r, 2 * c)) = DequantKv8<DType>(make_uint2(kc.x, kc.y), sk);
    *reinterpret_cast<uint4*>(s_k + T::Off(r, 2 * c + 1)) =
        DequantKv8<DType>(make_uint2(kc.z, kc.w), sk);
    uint8_t* s_v = s_k + T::kTileBytes;
    *reinterpret_cast<uint4*>(s_v + T::Off(r, 2 * c)) = DequantKv8<DType>(make_uint2(vc.x, vc.y), sv);
    *reinterpret_cast<uint4*>(s_v + T::Off(r, 2 * c + 1)) =
        DequantKv8<DType>(make_uint2(vc.z, vc.w), sv);
  }
}

// One warpgroup's running state: O accumulators (head dims 64h + 8i + 2(lane%4) + 0..1 of rows
// lane/4 and lane/4 + 8 of the warp's 16), and per row the running max (raw scores) and sum.
template <int HEAD_DIM>
struct WgAcc {
  float o[HEAD_DIM / 64][8][4] = {};
  float row_max[2] = {kNegInf, kNegInf};
  float row_sum[2] = {0.0f, 0.0f};
};

// Q fragments in registers from a swizzled 64-row Q tile (the mma.sync A layout, which is also
// wgmma's register-A layout).
template <int HEAD_DIM>
__device__ __forceinline__ void LoadQFragments(uint32_t (&qf)[HEAD_DIM / 16][4],
                                               const uint8_t* q_tile, int warp_in_wg, int lane) {
  using T = WgmmaTile<HEAD_DIM>;
  const int j = lane >> 3;
  const int qrow = warp_in_wg * 16 + (j & 1) * 8 + (lane & 7);
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    LdMatrixX4(qf[kk], q_tile + T::Off(qrow, kk * 2 + (j >> 1)));
  }
}

// Number of tiles (of at most TILE slots, never crossing a span) in spans [lo, hi), the same
// sequence TileIter walks; every lane of the warp returns it.
template <int TILE>
__device__ __forceinline__ int CountTiles(const TppTables& t, int lo, int hi, int lane) {
  int count = 0;
  for (int s = lo + lane; s < hi; s += 32) {
    const int len = t.span_end[s] - t.span_begin[s];
    if (len > 0) count += (len + TILE - 1) / TILE;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  return count;
}

// S = Q K^T of the K tile at shared address k_addr into d (issued and committed, not waited):
// 16 head dims per step, 32 bytes into a 128-byte swizzled K row.
template <int HEAD_DIM, typename DType>
__device__ __forceinline__ void IssueS(float (&d)[8][4], const uint32_t (&qf)[HEAD_DIM / 16][4],
                                       uint32_t k_addr) {
  using T = WgmmaTile<HEAD_DIM>;
  const uint64_t k_desc = SwizzledDesc(k_addr);  // + byte offset / 16 moves its start address
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    WgmmaRS<DType>(d, qf[kk], k_desc + (((kk >> 2) * T::kHalfBytes + (kk & 3) * 32) >> 4), kk > 0);
  }
  WgmmaCommit();
}

// The softmax of one tile's scores s (n valid slots) and O += P V with the V tile at v_addr.
// The running max and sum move first (O rescaled when the max moves); then P is made and
// multiplied 16 tokens at a time: the two MMAs of one 16-token step (one per 64 head dims) are
// issued as soon as its 8 probabilities per thread are packed, so the tensor cores run P V
// under the rest of the exponentials instead of after all of them.
// Wait groups (the S of the next tile is the group committed just before this call):
//  - PRIOR_PV: the previous tile's P V may still be in flight (the group before that S); it is
//    waited for only if O has to be rescaled, together with that S (a wait_group 1 there, which
//    would leave the S in flight, makes ptxas serialise every wgmma of the kernel: C7514);
//  - WAIT_PV: on return every wgmma of the warpgroup is complete; otherwise only the S issued
//    before (this tile's P V stays in flight, and so does its V tile's use of shared memory).
template <int HEAD_DIM, typename DType, bool PRIOR_PV = false, bool WAIT_PV = true>
__device__ __forceinline__ void SoftmaxPv(WgAcc<HEAD_DIM>& acc, float (&s)[8][4], int n,
                                          float scale, uint32_t v_addr, int lane,
                                          uint32_t (&a)[4][4]) {
  using T = WgmmaTile<HEAD_DIM>;
  if (n < T::kBlockN) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (nt * 8 + (lane & 3) * 2 + (e & 1) >= n) s[nt][e] = kNegInf;
      }
    }
  }
  float tile_max[2] = {fmaxf(s[0][0], s[0][1]), fmaxf(s[0][2], s[0][3])};
#pragma unroll
  for (int nt = 1; nt < 8; ++nt) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[nt][0], s[nt][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[nt][2], s[nt][3]));
  }
  // Lazy rescaling: the running max moves (and O and the sum are rescaled) only when a row's
  // tile max exceeds it by more than 2^kLazyLog2 in p; otherwise p <= 2^kLazyLog2 against the
  // stale max, which the final normalisation and lse use consistently (exact).
  bool grow = false;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
    // -inf running max (first tile): +inf > kLazyLog2.
    grow |= (tile_max[i] - acc.row_max[i]) * scale > T::kLazyLog2;
  }
  if (__any_sync(0xffffffffu, grow)) {  // warp-uniform
    if constexpr (PRIOR_PV) {
      WgmmaWait<0>();  // the previous P V (O's writer), and the S just issued
#pragma unroll
      for (int h = 0; h < T::kHalves; ++h) FenceRegs(acc.o[h]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float new_max = fmaxf(acc.row_max[i], tile_max[i]);
      const float alpha = FastExp2((acc.row_max[i] - new_max) * scale);  // 0 on the first tile
      acc.row_max[i] = new_max;
      acc.row_sum[i] *= alpha;
#pragma unroll
      for (int h = 0; h < T::kHalves; ++h) {
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
          acc.o[h][dn][2 * i] *= alpha;
          acc.o[h][dn][2 * i + 1] *= alpha;
        }
      }
    }
  }
  const float neg_max[2] = {-acc.row_max[0] * scale, -acc.row_max[1] * scale};
  const uint64_t v_desc = SwizzledDesc(v_addr);
  // (No register fence on O while a P V may be in flight: ptxas counts it as a read of the
  // accumulators and serialises every wgmma, C7514.)
  if constexpr (!PRIOR_PV) {
#pragma unroll
    for (int h = 0; h < T::kHalves; ++h) FenceRegs(acc.o[h]);
  }
  // Per 16 tokens (kk): P's A fragment (the S accumulators of columns 16 kk .. 16 kk + 15),
  // then its MMAs. The partial sums of a step are added to the row sums once.
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    float part[2];  // started from the step's first p of each row (no add of a zero)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = FastExp2(fmaf(s[2 * kk + j][e], scale, neg_max[e >> 1]));
        s[2 * kk + j][e] = pr;
        if (j == 0 && (e & 1) == 0) {
          part[e >> 1] = pr;
        } else {
          part[e >> 1] += pr;
        }
      }
    }
    acc.row_sum[0] += part[0];
    acc.row_sum[1] += part[1];
    a[kk][0] = DTypeTraits<DType>::Pack(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = DTypeTraits<DType>::Pack(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = DTypeTraits<DType>::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = DTypeTraits<DType>::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    WgmmaFence();
#pragma unroll
    for (int h = 0; h < T::kHalves; ++h) {
      WgmmaRSTransB<DType>(acc.o[h], a[kk], v_desc + ((h * T::kHalfBytes + kk * 2048) >> 4));
    }
  }
  WgmmaCommit();
  if constexpr (WAIT_PV) {
    WgmmaWait<0>();
#pragma unroll
    for (int h = 0; h < HEAD_DIM / 64; ++h) FenceRegs(acc.o[h]);
  } else {
    WgmmaWait<1>();
  }
}

// Writes the warp's 16 rows of a warpgroup's 64 (query m0 + ...) as normalised partial states.
template <int HEAD_DIM>
__device__ __forceinline__ void StorePartials(const TppParams& p, const Phase1Item& it, int kvh,
                                              const WgAcc<HEAD_DIM>& acc, int warp_m0, int lane) {
  const int g = p.group;
  const int hq = p.num_q_heads;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = acc.row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int m = it.m_begin + warp_m0 + (lane >> 2) + i * 8;
    if (m >= it.num_m) continue;
    const int state = it.state_base + m / g;
    const int head = kvh * g + m % g;
    const bool empty = !(sum > 0.0f);  // an empty split stays the empty state
    const float inv = empty ? 0.0f : 1.0f / sum;
    float* dst =
        p.partial_o + (static_cast<int64_t>(state) * hq + head) * HEAD_DIM + (lane & 3) * 2;
#pragma unroll
    for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
      *reinterpret_cast<float2*>(dst + dn * 8) =
          make_float2(acc.o[dn >> 3][dn & 7][2 * i] * inv, acc.o[dn >> 3][dn & 7][2 * i + 1] * inv);
    }
    if ((lane & 3) == 0) {
      p.partial_lse[static_cast<int64_t>(state) * hq + head] =
          empty ? kNegInf : acc.row_max[i] * p.scale_log2 + log2f(sum);
    }
  }
}

// Every warpgroup runs every wgmma, also one whose queries are all past the segment (zero Q,
// output not written), and the S of a next tile is issued even after the last one (on a stale
// stage, result unused): a wgmma under a branch, or left in flight across the CTA barrier, made
// ptxas serialize them (C7514 / C7515 / C7518 in its resource report).
template <int HEAD_DIM, typename DType, int WGS, bool KV8 = false>
__global__ void __launch_bounds__(WGS * 128)
    TppPhase1WgmmaKernel(const __grid_constant__ TppParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Phase1WgmmaConfig<HEAD_DIM, WGS>;
  constexpr int BN = Cfg::kBlockN;
  constexpr int TILE = Cfg::kTileBytes;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - SmemAddr(smem_raw));
  // [Q of wg 0..WGS-1][stage][K | V], each TILE bytes.
  auto k_tile = [&](int stage) { return smem + (WGS + 2 * stage) * TILE; };

  LaunchDependents();

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int wg = tid >> 7;
  const int warp_in_wg = (tid >> 5) & 3;
  const int kvh = blockIdx.y;
  const TppTables& t = p.t;
  const Phase1Item it(p, blockIdx.x);
  const int span_hi = it.span_hi;

  LoadQTiles<HEAD_DIM, DType>(p, it, kvh, Cfg::kBlockM, smem, tid, Cfg::kThreads);
  CpAsyncCommit();

  TileIter<BN> load_it, comp_it;
  load_it.Start(t, it.span_lo, span_hi);
  comp_it = load_it;
  auto load_next = [&](int stage) {
    if (load_it.span < span_hi) {
      LoadKvTile<HEAD_DIM, DType, Cfg::kThreads, KV8>(p, kvh, t.span_chunk[load_it.span], load_it.slot,
                                                 min(BN, t.span_end[load_it.span] - load_it.slot),
                                                 k_tile(stage), tid);
      load_it.Next(t, span_hi);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int st = 0; st < Cfg::kAhead; ++st) load_next(st);

  WgAcc<HEAD_DIM> acc;
  int stage = 0;
  int load_stage = Cfg::kAhead % Cfg::kStages;
  uint32_t qf[HEAD_DIM / 16][4];

  // Q and tile 0 landed: Q fragments to registers, S of tile 0.
  CpAsyncWait<Cfg::kAhead - 1>();
  FenceProxyAsync();
  __syncthreads();
  float s_a[8][4], s_b[8][4];  // S of tiles i and i + 1, alternating
  LoadQFragments<HEAD_DIM>(qf, smem + wg * TILE, warp_in_wg, lane);
  IssueS<HEAD_DIM, DType>(s_a, qf, SmemAddr(k_tile(0)));
  WgmmaWait<0>();
  FenceRegs(s_a);

  // Tile i, S_i in `cur`: S_{i+1} into `nxt` runs on the tensor cores under the softmax of tile
  // i; then O += P_i V_i. Both complete before the next barrier, which frees the stage of tile
  // i - 1 for a load.
  auto step = [&](float(&cur)[8][4], float(&nxt)[8][4]) {
    TileIter<BN> next_it = comp_it;
    next_it.Next(t, span_hi);
    CpAsyncWait<Cfg::kAhead - 2>();  // tile i + 1 landed
    FenceProxyAsync();
    __syncthreads();
    load_next(load_stage);
    const int n = min(BN, t.span_end[comp_it.span] - comp_it.slot);
    const int next_stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    IssueS<HEAD_DIM, DType>(nxt, qf, SmemAddr(k_tile(next_stage)));
    uint32_t a[4][4];
    SoftmaxPv<HEAD_DIM, DType>(acc, cur, n, p.scale_log2, SmemAddr(k_tile(stage)) + TILE, lane, a);
    FenceRegs(nxt);
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
  StorePartials<HEAD_DIM>(p, it, kvh, acc, wg * 64 + warp_in_wg * 16, lane);
#else
  __trap();  // built only for sm_90a; the launcher never selects it elsewhere
#endif
}

// The consumer warpgroups of the warp-specialised kernels (this file's and the wgmma prefill,
// kernels/cuda/prefill/prefill_wgmma.cuh): num_tiles K/V tiles from a ring of STAGES stages at
// `stages` (stage s: K at stages + 2 s kTileBytes, V a tile later), tile i in stage i % STAGES,
// each awaited on its full barrier and released on its empty one (one arrival per warp), into
// acc with the Q fragments qf. tile_n(i, stage): tile i's valid slots (SoftmaxPv's n); mask(i, s):
// edits tile i's scores before its softmax (the prefill's causal mask). Tiles run in pairs: the
// even tile's P V stays in flight under the odd tile's softmax (its own P registers, a_even, stay
// untouched until then); every wgmma is complete at the end of the pair, so none is in flight
// across the loop's back edge (ptxas would serialise them); the even tile's stage is released
// with the odd one's. The S of a tile past the last is issued on a stale stage and not used (a
// wgmma under a branch serialises them all). On return every wgmma is complete.
template <int HEAD_DIM, typename DType, int STAGES, typename TileN, typename Mask>
__device__ __forceinline__ void ConsumeTilesWs(WgAcc<HEAD_DIM>& acc,
                                               const uint32_t (&qf)[HEAD_DIM / 16][4],
                                               int num_tiles, uint8_t* stages, uint64_t* full,
                                               uint64_t* empty, float scale_log2, int lane,
                                               TileN tile_n, Mask mask) {
  constexpr int TILE = WgmmaTile<HEAD_DIM>::kTileBytes;
  auto k_tile = [&](int stage) { return stages + 2 * stage * TILE; };
  float s_a[8][4], s_b[8][4];  // S of tiles i and i + 1, alternating
  if (num_tiles > 0) {
    MbarWait(&full[0], 0);
    FenceProxyAsync();
  }
  IssueS<HEAD_DIM, DType>(s_a, qf, SmemAddr(k_tile(0)));
  WgmmaWait<0>();
  FenceRegs(s_a);
  int i = 0;  // tile index
  uint32_t a_even[4][4], a_odd[4][4];
  auto step = [&](float(&cur)[8][4], float(&nxt)[8][4], uint32_t(&a)[4][4], auto odd) {
    constexpr bool kOdd = decltype(odd)::value;
    const int stage = i % STAGES;
    const int next_stage = (i + 1) % STAGES;
    const int n = tile_n(i, stage);
    if (i + 1 < num_tiles) {
      MbarWait(&full[next_stage], ((i + 1) / STAGES) & 1);
      FenceProxyAsync();
    }
    IssueS<HEAD_DIM, DType>(nxt, qf, SmemAddr(k_tile(next_stage)));
    mask(i, cur);
    SoftmaxPv<HEAD_DIM, DType, /*PRIOR_PV=*/kOdd, /*WAIT_PV=*/kOdd>(
        acc, cur, n, scale_log2, SmemAddr(k_tile(stage)) + TILE, lane, a);
    FenceRegs(nxt);
    if constexpr (kOdd) {
      __syncwarp();
      if (lane == 0) {  // this warp is done with tiles i - 1 and i (K, V and n)
        MbarArrive(&empty[(i + STAGES - 1) % STAGES]);
        MbarArrive(&empty[stage]);
      }
    }
    ++i;
  };
  while (i < num_tiles) {
    step(s_a, s_b, a_even, std::false_type{});
    if (i >= num_tiles) break;
    step(s_b, s_a, a_odd, std::true_type{});
  }
  WgmmaWait<0>();  // an even last tile's P V
#pragma unroll
  for (int h = 0; h < HEAD_DIM / 64; ++h) FenceRegs(acc.o[h]);
}

// The producer also writes each stage's valid slot count (stage_n) and arrives on its full
// barrier once more after that store (release), so the consumers read the tile sizes from shared
// memory; they count the split's tiles once up front instead of walking the span tables in
// global memory between tiles (which ncu showed as long-scoreboard stalls).
template <int HEAD_DIM, typename DType, bool KV8 = false>
__global__ void __launch_bounds__(Phase1WgmmaWsConfig<HEAD_DIM>::kThreads, 1)
    TppPhase1WgmmaWsKernel(const __grid_constant__ TppParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Phase1WgmmaWsConfig<HEAD_DIM, KV8>;
  constexpr int BN = Cfg::kBlockN;
  constexpr int TILE = Cfg::kTileBytes;
  constexpr int STAGES = Cfg::kStages;
  constexpr int CONSUMER_WARPS = Cfg::kConsumers * 4;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - SmemAddr(smem_raw));
  // [Q of consumer 0, 1][stage][K | V], each TILE bytes; with KV8 the raw FP8 ring
  // (Fp8RawTile, kRawBytes each); then the barriers.
  auto k_tile = [&](int stage) { return smem + (Cfg::kConsumers + 2 * stage) * TILE; };
  uint8_t* ring = smem + (Cfg::kConsumers + 2 * STAGES) * TILE;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + Cfg::kRing * Cfg::kRawBytes);
  uint64_t* empty = full + STAGES;
  uint64_t* q_full = empty + STAGES;
  int32_t* stage_n = reinterpret_cast<int32_t*>(q_full + 1);  // valid slots of each stage's tile

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
    // Producer warpgroup: Q, then every K/V tile, each into the next free stage.
    SetMaxRegs<Cfg::kProducerRegs, false>();
    const int ptid = tid - CONSUMER_WARPS * 32;
    LoadQTiles<HEAD_DIM, DType>(p, it, kvh, Cfg::kBlockM, smem, ptid, 128);
    CpAsyncMbarArrive(q_full);
    TileIter<BN> load_it;
    load_it.Start(t, it.span_lo, span_hi);
    if constexpr (KV8) {
      // Raw tiles copied kRing - 1 ahead; tile i dequantized into stage i % STAGES once its
      // copies (this thread's codes: the wait; the exponent words: the barrier) have landed.
      // The barrier also orders every thread's conversion of tile i - 1 before the copies into
      // its ring slot, which the issue after it refills.
      static_assert(Cfg::kRing == 3, "two tiles in flight");
      auto raw = [&](int j) { return Fp8RawTile<HEAD_DIM>{ring + (j % Cfg::kRing) * Cfg::kRawBytes}; };
      TileIter<BN> issue_it = load_it;
      int issued = 0;
      auto issue = [&]() {
        IssueFp8RawTile<HEAD_DIM>(p, kvh, t.span_chunk[issue_it.span], issue_it.slot,
                                  min(BN, t.span_end[issue_it.span] - issue_it.slot), raw(issued),
                                  ptid);
        CpAsyncCommit();
        issue_it.Next(t, span_hi);
        ++issued;
      };
      if (issue_it.span < span_hi) issue();
      if (issue_it.span < span_hi) issue();
      for (int i = 0; load_it.span < span_hi; ++i) {
        if (issued - i >= 2) {
          CpAsyncWait<1>();  // tile i landed, tile i + 1 may still be in flight
        } else {
          CpAsyncWait<0>();
        }
        NamedBarrierSync(1, 128);
        if (issue_it.span < span_hi) issue();
        const int stage = i % STAGES;
        if (i >= STAGES) MbarWait(&empty[stage], ((i / STAGES) + 1) & 1);
        const int n = min(BN, t.span_end[load_it.span] - load_it.slot);
        if (ptid == 0) stage_n[stage] = n;
        ConvertFp8RawTile<HEAD_DIM, DType>(p, kvh, t.span_chunk[load_it.span], load_it.slot, n,
                                           raw(i), k_tile(stage), ptid);
        FenceProxyAsync();  // stored, not copied: published by a fence and a plain arrival
        MbarArrive(&full[stage]);
        if (ptid == 0) MbarArrive(&full[stage]);  // publishes stage_n[stage]
        load_it.Next(t, span_hi);
      }
      CpAsyncWait<0>();
    } else {
      for (int i = 0; load_it.span < span_hi; ++i) {
        const int stage = i % STAGES;
        if (i >= STAGES) MbarWait(&empty[stage], ((i / STAGES) + 1) & 1);
        const int n = min(BN, t.span_end[load_it.span] - load_it.slot);
        if (ptid == 0) stage_n[stage] = n;
        LoadKvTile<HEAD_DIM, DType, 128, false>(p, kvh, t.span_chunk[load_it.span], load_it.slot,
                                                n, k_tile(stage), ptid);
        CpAsyncMbarArrive(&full[stage]);
        if (ptid == 0) MbarArrive(&full[stage]);  // publishes stage_n[stage]
        load_it.Next(t, span_hi);
      }
      CpAsyncCommit();
      CpAsyncWait<0>();
    }
    return;
  }

  // Consumer warpgroups.
  SetMaxRegs<Cfg::kConsumerRegs, true>();
  const int wg = warp >> 2;
  const int warp_in_wg = warp & 3;
  WgAcc<HEAD_DIM> acc;
  uint32_t qf[HEAD_DIM / 16][4];
  MbarWait(q_full, 0);
  FenceProxyAsync();
  LoadQFragments<HEAD_DIM>(qf, smem + wg * TILE, warp_in_wg, lane);

  const int num_tiles = CountTiles<BN>(t, it.span_lo, span_hi, lane);
  ConsumeTilesWs<HEAD_DIM, DType, STAGES>(
      acc, qf, num_tiles, k_tile(0), full, empty, p.scale_log2, lane,
      [&](int, int stage) { return stage_n[stage]; }, [](int, float(&)[8][4]) {});
  StorePartials<HEAD_DIM>(p, it, kvh, acc, wg * 64 + warp_in_wg * 16, lane);
#else
  __trap();  // built only for sm_90a; the launcher never selects it elsewhere
#endif
}

}  // namespace banyan::kernels::cuda::tpp
