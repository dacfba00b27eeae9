// Prefill attention on tensor cores (see attention.h): flash-attention-2 style, one CTA per
// (tile of 64 packed rows, kv head), four warps of 16 rows each. A packed row is (new token j,
// q head k of this kv head) = j * group + k, so GQA heads share every K/V tile. Per 64-key tile:
// the keys' addresses are resolved once through the sequence's spans (a cursor walking forward,
// not a search per key), K and V are staged in shared memory (rows padded by 16 bytes against
// bank conflicts), S = Q K^T and O += P V run as mma.sync m16n8k16 (bf16 or fp16 operands, fp32
// accumulators), with the online softmax on the accumulators in registers (P never touches
// shared memory). With a 16-bit cache the K/V tiles are double-buffered: tile t + 1's cp.async
// copies are in flight while tile t is used. An FP8 cache's codes are scaled and converted on
// the way into shared memory, through registers, one tile at a time.
#pragma once

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_fp8.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill/attention.h"

namespace banyan::kernels::cuda {

inline constexpr int kPrefillBlockN = 64;
inline constexpr int kPrefillThreads = 128;

template <typename T>
__device__ __forceinline__ uint32_t PackPair(float a, float b) {
  const typename PairOf<T>::Type h = FromFloat2<T>(a, b);  // a in the low half
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int HEAD_DIM, bool KV8 = false>
constexpr int PrefillSmemBytes() {
  constexpr int tile = kPrefillBlockN * (HEAD_DIM + 8) * 2;  // one K or V tile, padded rows
  static_assert(kPrefillBlockM == kPrefillBlockN, "Q tiles are sized as K/V tiles");
  // FP8 cache: the Q, K and V tiles + per key its element offset and its exponents' offset.
  // 16-bit cache: two K and two V tiles (the next tile's copies in flight while this one is
  // used), the first K tile holding Q until Q is in registers, and the two tiles' key offsets:
  // 70 KB at head_dim 128, three CTAs an SM.
  return KV8 ? 3 * tile + kPrefillBlockN * 16 : 4 * tile + 2 * kPrefillBlockN * 8;
}

// The span holding `key`: the last of the sequence's spans [lo, se) that starts at or before it,
// walking forward from `lo` (a span starting at or before key). Keys advance through a sequence
// in order, so each walk starts where the last one ended and takes a step or two.
__device__ __forceinline__ int PrefillSpanOf(const PrefillParams& p, int lo, int se, int key) {
  while (lo + 1 < se && p.span_pos[lo + 1] <= key) ++lo;
  return lo;
}

// The element offsets of the kPrefillBlockN keys from n0 into koff (threads below
// kPrefillBlockN, a key each; -1 from kv_end on), and with an FP8 cache their exponents'
// offsets into kexp. `cur`: a span starting at or before n0.
template <int HEAD_DIM, bool KV8>
__device__ __forceinline__ void PrefillKeyOffsets(const PrefillParams& p, int kvh, int cur, int se,
                                                  int n0, int kv_end, int64_t* koff,
                                                  int64_t* kexp) {
  if (threadIdx.x >= kPrefillBlockN) return;
  const int key = n0 + threadIdx.x;
  int64_t off = -1, eoff = 0;
  if (key < kv_end) {
    const int lo = PrefillSpanOf(p, cur, se, key);
    const int slot = p.span_begin[lo] + key - p.span_pos[lo];
    off = p.span_chunk[lo] * p.kv.chunk_stride +
          (static_cast<int64_t>(kvh) * p.kv.chunk_size + slot) * HEAD_DIM;
    if constexpr (KV8) eoff = KvFp8ExpOffset(p.kv, p.span_chunk[lo], kvh, slot);
  }
  koff[threadIdx.x] = off;
  if constexpr (KV8) kexp[threadIdx.x] = eoff;
}

// One warp's 16 rows against one K/V tile in shared memory (keys n0...): S = Q K^T, the causal
// mask (limit: keys visible to this thread's two rows), the online softmax on the accumulators
// in registers, O += P V.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ void PrefillAttendTile(const uint32_t (&qf)[HEAD_DIM / 16][4],
                                                  const T* ks, const T* vs, int n0,
                                                  const int (&limit)[2], float scale_log2,
                                                  float (&o)[HEAD_DIM / 8][4], float (&m)[2],
                                                  float (&l)[2]) {
  constexpr int BN = kPrefillBlockN;
  constexpr int STRIDE = HEAD_DIM + 8;
  constexpr int KSTEPS = HEAD_DIM / 16;
  constexpr int NT = BN / 8;        // n8 tiles of S per warp
  constexpr int DT = HEAD_DIM / 8;  // n8 tiles of O per warp
  const int lane = threadIdx.x % 32;
  float s[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      LdMatrixX4(
          b, ks + (np * 16 + lane % 8 + (lane / 16) * 8) * STRIDE + kk * 16 + ((lane / 8) % 2) * 8);
      Mma16816<T>(s[2 * np], qf[kk], b[0], b[1]);
      Mma16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }
  // Scale, causal mask, online softmax. Accumulator element e of tile nt is row
  // lane / 4 + 8 * (e / 2), key n0 + nt * 8 + (lane % 4) * 2 + e % 2.
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int key = n0 + nt * 8 + (lane % 4) * 2 + c;
        float v = s[nt][2 * ri + c] * scale_log2;
        if (key >= limit[ri]) v = -INFINITY;
        s[nt][2 * ri + c] = v;
        mx = fmaxf(mx, v);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float new_m = fmaxf(m[ri], mx);
    const float mu = new_m == -INFINITY ? 0.0f : new_m;  // all masked so far: p = 0, no NaN
    const float corr = exp2f(m[ri] - mu);
    float rs = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float pr = exp2f(s[nt][2 * ri + c] - mu);
        s[nt][2 * ri + c] = pr;
        rs += pr;
      }
    }
    l[ri] = l[ri] * corr + rs;  // per-thread partial sum; reduced over the quad at the end
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][2 * ri] *= corr;
      o[dt][2 * ri + 1] *= corr;
    }
    m[ri] = new_m;
  }
  // O += P V: the S accumulators of two n8 tiles are the A fragment of one k16 step.
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t a[4];
    a[0] = PackPair<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = PackPair<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      uint32_t b[4];
      LdMatrixX4Trans(
          b, vs + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * STRIDE + dp * 16 + (lane / 16) * 8);
      Mma16816<T>(o[2 * dp], a, b[0], b[1]);
      Mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// PrefillMmaKernel's shared memory: the Q tile, then K tiles and V tiles (one of each after Q
// with an FP8 cache; two of each without, buffers t & 1, the first K buffer over Q: its copies
// start once Q is in registers), then the keys' offsets and (FP8) their exponents' offsets.
template <int HEAD_DIM, typename T, bool KV8>
struct PrefillSmem {
  static constexpr int kStride = HEAD_DIM + 8;  // shared row stride in elements (16-byte pad)
  static constexpr int kBuffers = KV8 ? 1 : 2;
  T* qs;
  T* ks;
  T* vs;
  int64_t* koff;
  int64_t* kexp;
  __device__ explicit PrefillSmem(unsigned char* raw) {
    qs = reinterpret_cast<T*>(raw);
    ks = KV8 ? qs + kPrefillBlockM * kStride : qs;
    vs = ks + kBuffers * kPrefillBlockN * kStride;
    koff = reinterpret_cast<int64_t*>(vs + kBuffers * kPrefillBlockN * kStride);
    kexp = koff + kPrefillBlockN;
  }
};

// Loads the tile's 64 Q rows into shared memory (row r from element q_elem_of(r) of p.q, zeros
// where that is -1), then each warp's 16 rows into A fragments.
template <int HEAD_DIM, typename T, bool KV8, typename RowOf>
__device__ __forceinline__ void PrefillLoadQ(const PrefillParams& p,
                                             const PrefillSmem<HEAD_DIM, T, KV8>& sm, int kvh,
                                             RowOf q_elem_of, uint32_t (&qf)[HEAD_DIM / 16][4]) {
  constexpr int STRIDE = PrefillSmem<HEAD_DIM, T, KV8>::kStride, VPR = HEAD_DIM / 8;
  for (int v = threadIdx.x; v < kPrefillBlockM * VPR; v += kPrefillThreads) {
    const int r = v / VPR, c = (v % VPR) * 8;
    const int64_t qi = q_elem_of(r);
    uint4 val = make_uint4(0, 0, 0, 0);
    if (qi >= 0) val = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi + c);
    *reinterpret_cast<uint4*>(sm.qs + r * STRIDE + c) = val;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    LdMatrixX4(qf[kk], sm.qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + (lane / 16) * 8);
  }
}

// Key tiles t0, t0 + 1, ... up to the one holding kv_end - 1 (positions [64 t, 64 t + 64) of the
// spans [cur, se), zeros from kv_end on) against the warp's Q fragments, carrying each row's
// state (o, m, l) on. Every row's sums are the same whichever tile the row sits in, whatever the
// other rows, and whatever t0 the state was handed on at (see attention.cu). cur: a span
// starting at or before key 64 t0, left at one starting at or before the last tile's first key
// (so that the next call, for later keys, goes on from it).
template <int HEAD_DIM, typename T, bool KV8>
__device__ __forceinline__ void PrefillMmaTiles(
    const PrefillParams& p, const PrefillSmem<HEAD_DIM, T, KV8>& sm, int kvh, int& cur, int se,
    int t0, int kv_end, const uint32_t (&qf)[HEAD_DIM / 16][4], const int (&limit)[2],
    float scale_log2, float (&o)[HEAD_DIM / 8][4], float (&m)[2], float (&l)[2]) {
  constexpr int BN = kPrefillBlockN, STRIDE = PrefillSmem<HEAD_DIM, T, KV8>::kStride;
  constexpr int VPR = HEAD_DIM / 8;  // 16-byte vectors per row
  const int tiles = (kv_end + BN - 1) / BN;
  // 16-bit cache: cp.async copies, zero-filled past kv_end.
  [[maybe_unused]] auto issue = [&](int t) {
    T* kd = sm.ks + (t & 1) * BN * STRIDE;
    T* vd = sm.vs + (t & 1) * BN * STRIDE;
    const int64_t* ko = sm.koff + (t & 1) * BN;
    for (int v = threadIdx.x; v < BN * VPR; v += kPrefillThreads) {
      const int r = v / VPR, c = (v % VPR) * 8;
      const int64_t off = ko[r];
      const T* src = static_cast<const T*>(p.kv.base) + (off >= 0 ? off : 0) + c;
      CpAsync16(kd + r * STRIDE + c, src, off >= 0);
      CpAsync16(vd + r * STRIDE + c, src + p.kv.v_offset, off >= 0);
    }
    CpAsyncCommit();
  };
  if constexpr (!KV8) {
    if (t0 < tiles) {
      cur = PrefillSpanOf(p, cur, se, t0 * BN);
      PrefillKeyOffsets<HEAD_DIM, false>(p, kvh, cur, se, t0 * BN, kv_end, sm.koff + (t0 & 1) * BN,
                                         nullptr);
    }
    __syncthreads();  // koff is written, and every warp holds its Q (a K tile lands over it)
    if (t0 < tiles) issue(t0);
  }
  for (int t = t0; t < tiles; ++t) {
    const int n0 = t * BN;
    if constexpr (KV8) {
      // FP8 codes are scaled and converted on the way in, through registers.
      cur = PrefillSpanOf(p, cur, se, n0);
      __syncthreads();  // the previous tile is consumed
      PrefillKeyOffsets<HEAD_DIM, true>(p, kvh, cur, se, n0, kv_end, sm.koff, sm.kexp);
      __syncthreads();
      for (int v = threadIdx.x; v < BN * VPR; v += kPrefillThreads) {
        const int r = v / VPR, c = (v % VPR) * 8;
        const int64_t off = sm.koff[r];
        uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);  // zeros, never NaN
        if (off >= 0) {
          kv4 = LoadKv8<T, true>(p.kv, off + c, sm.kexp[r]);
          vv4 = LoadKv8<T, true>(p.kv, off + p.kv.v_offset + c, sm.kexp[r] + KvFp8VExpStride(p.kv));
        }
        *reinterpret_cast<uint4*>(sm.ks + r * STRIDE + c) = kv4;
        *reinterpret_cast<uint4*>(sm.vs + r * STRIDE + c) = vv4;
      }
      __syncthreads();
      PrefillAttendTile<HEAD_DIM, T>(qf, sm.ks, sm.vs, n0, limit, scale_log2, o, m, l);
    } else {
      // Tile t + 1's copies go out while tile t is used: its offsets first (into the buffer of
      // tile t - 1, whose copies were issued an iteration ago), then, once every warp is done
      // with tile t - 1's K/V, its cp.async into that buffer.
      if (t + 1 < tiles) {
        cur = PrefillSpanOf(p, cur, se, n0 + BN);
        PrefillKeyOffsets<HEAD_DIM, false>(p, kvh, cur, se, n0 + BN, kv_end,
                                           sm.koff + ((t + 1) & 1) * BN, nullptr);
      }
      __syncthreads();
      if (t + 1 < tiles) {
        issue(t + 1);
        CpAsyncWait<1>();  // this thread's copies of tile t have landed
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();  // and everyone's
      PrefillAttendTile<HEAD_DIM, T>(qf, sm.ks + (t & 1) * BN * STRIDE,
                                     sm.vs + (t & 1) * BN * STRIDE, n0, limit, scale_log2, o, m, l);
    }
  }
}

// A row's piece state at index `row` of PrefillParams::state: this thread's columns of o, its
// partial sum l (the quad's four threads hold one each), the running max.
template <int HEAD_DIM>
__device__ __forceinline__ void PrefillStoreState(float* state, int64_t row, int ri,
                                                  const float (&o)[HEAD_DIM / 8][4],
                                                  const float (&m)[2], const float (&l)[2]) {
  float* st = state + row * PrefillStateStride(HEAD_DIM);
  const int q4 = threadIdx.x % 4;
#pragma unroll
  for (int dt = 0; dt < HEAD_DIM / 8; ++dt) {
    *reinterpret_cast<float2*>(st + dt * 8 + q4 * 2) =
        make_float2(o[dt][2 * ri], o[dt][2 * ri + 1]);
  }
  st[HEAD_DIM + q4] = l[ri];
  if (q4 == 0) st[HEAD_DIM + 4] = m[ri];
}

// A tile's rows (PrefillMmaKernel and InvariantMmaKernel): Q in registers, each thread's two
// rows' visible keys (limit), the keys any row of the tile may see (the return value).
template <int HEAD_DIM, typename T, bool KV8>
__device__ __forceinline__ int PrefillTileQ(const PrefillParams& p,
                                            const PrefillSmem<HEAD_DIM, T, KV8>& sm, int seq,
                                            int m0, int kvh, uint32_t (&qf)[HEAD_DIM / 16][4],
                                            int (&limit)[2]) {
  const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
  const int pos0 = p.seq_pos0[seq], q_row = p.seq_q_row[seq];
  const int packed_total = p.seq_num_q[seq] * g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  PrefillLoadQ<HEAD_DIM, T, KV8>(
      p, sm, kvh,
      [&](int r) -> int64_t {
        const int pr = m0 + r;
        return pr < packed_total
                   ? (static_cast<int64_t>(q_row + pr / g) * hq + kvh * g + pr % g) * HEAD_DIM
                   : -1;
      },
      qf);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = m0 + warp * 16 + lane / 4 + 8 * i;
    limit[i] = pr < packed_total ? pos0 + pr / g + 1 : 0;
  }
  const int last_pr = min(packed_total, m0 + kPrefillBlockM) - 1;
  return pos0 + last_pr / g + 1;
}

// The tile's outputs: each row's o over the quad's summed l.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ void PrefillWriteRows(const PrefillParams& p, int seq, int m0, int kvh,
                                                 const float (&o)[HEAD_DIM / 8][4], float (&l)[2]) {
  const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
  const int q_row = p.seq_q_row[seq], packed_total = p.seq_num_q[seq] * g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 1);
    l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 2);
  }
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int pr = m0 + warp * 16 + lane / 4 + 8 * ri;
    if (pr >= packed_total) continue;
    const float inv = l[ri] > 0.0f ? 1.0f / l[ri] : 0.0f;
    T* dst = static_cast<T*>(p.out) +
             (static_cast<int64_t>(q_row + pr / g) * hq + kvh * g + pr % g) * HEAD_DIM;
#pragma unroll
    for (int dt = 0; dt < HEAD_DIM / 8; ++dt) {
      *reinterpret_cast<typename PairOf<T>::Type*>(dst + dt * 8 + (lane % 4) * 2) =
          FromFloat2<T>(o[dt][2 * ri] * inv, o[dt][2 * ri + 1] * inv);
    }
  }
}

template <int HEAD_DIM, typename T, bool KV8 = false>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillMmaKernel(const __grid_constant__ PrefillParams p) {
  static_assert(HEAD_DIM % 16 == 0 && kPrefillBlockM == 4 * 16, "tile shape");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const PrefillSmem<HEAD_DIM, T, KV8> sm(smem_raw);
  const int tile = blockIdx.x, kvh = blockIdx.y;
  const int seq = p.tile_seq[tile], m0 = p.tile_m0[tile];
  uint32_t qf[HEAD_DIM / 16][4];
  int limit[2];
  const int kv_end = PrefillTileQ<HEAD_DIM, T, KV8>(p, sm, seq, m0, kvh, qf, limit);
  float o[HEAD_DIM / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int cur = p.seq_span_begin[seq];
  PrefillMmaTiles<HEAD_DIM, T, KV8>(p, sm, kvh, cur, p.seq_span_end[seq], 0, kv_end, qf, limit,
                                    p.scale * kLog2e, o, m, l);
  PrefillWriteRows<HEAD_DIM, T>(p, seq, m0, kvh, o, l);
}

// The deterministic mode's pieces (attention.h, kInvariantPieceKeys). A piece's state is summed
// from an empty state over the piece's tiles; states are folded into a running total, piece by
// piece in position order, by these operations only (explicitly rounded, never contracted
// differently), in a tile's CTA (InvariantMmaKernel) and in the merge kernel alike:
//   m = max(m_t, m_p), a = 2^(m_t - m) (0 for an empty total), b = 2^(m_p - m) (0 for an empty
//   piece), and each accumulator and partial sum x_t = x_t a + (x_p b).
// An empty piece (keys a row may not see) leaves the total as it was, and the first piece
// folded into the empty total is copied exactly.
struct PieceFoldWeights {
  float a, b, m;
};
__device__ __forceinline__ PieceFoldWeights PieceWeights(float m_total, float m_piece) {
  const float mn = fmaxf(m_total, m_piece);
  return {m_total == -INFINITY ? 0.0f : exp2f(m_total - mn),
          m_piece == -INFINITY ? 0.0f : exp2f(m_piece - mn), mn};
}
__device__ __forceinline__ float PieceFold(float total, float piece, const PieceFoldWeights& w) {
  return __fmaf_rn(total, w.a, __fmul_rn(piece, w.b));
}

// Floats per thread of InvariantMmaKernel's running totals in shared memory (after
// PrefillSmemBytes): its two rows' accumulators, partial sums and maxima.
template <int HEAD_DIM>
constexpr int InvariantTotalFloats() {
  return 2 * (HEAD_DIM / 4) + 4;
}

// One item of the deterministic mode: FOLD, the first p.num_fold_items items, every piece of
// tile p.item_tile[item] folded in order into the tile's outputs; else piece p.item_piece[item]
// of the tile's keys into its rows' piece states (the items after those). The two give the same
// bits once the merge kernel has folded the states. Two kernels: the second needs neither the
// totals' shared memory nor their registers.
template <int HEAD_DIM, typename T, bool KV8, bool FOLD>
__global__ void __launch_bounds__(kPrefillThreads)
    InvariantMmaKernel(const __grid_constant__ PrefillParams p) {
  constexpr int DT = HEAD_DIM / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const PrefillSmem<HEAD_DIM, T, KV8> sm(smem_raw);
  const int item = blockIdx.x + (FOLD ? 0 : p.num_fold_items), kvh = blockIdx.y;
  const int tile = p.item_tile[item], piece = p.item_piece[item];
  if (tile < 0) return;  // padding (a captured step's grid)
  const int seq = p.tile_seq[tile], m0 = p.tile_m0[tile];
  const int sb = p.seq_span_begin[seq], se = p.seq_span_end[seq];
  const float scale_log2 = p.scale * kLog2e;
  uint32_t qf[HEAD_DIM / 16][4];
  int limit[2];
  const int kv_end = PrefillTileQ<HEAD_DIM, T, KV8>(p, sm, seq, m0, kvh, qf, limit);
  float o[DT][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  if constexpr (!FOLD) {
    int cur = sb;
    PrefillMmaTiles<HEAD_DIM, T, KV8>(p, sm, kvh, cur, se, piece * kInvariantPieceTiles,
                                      min(kv_end, (piece + 1) * kInvariantPieceKeys), qf, limit,
                                      scale_log2, o, m, l);
    const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
    const int packed_total = p.seq_num_q[seq] * g;
    const int64_t base = p.seq_state[seq], pieces = p.seq_pieces[seq];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const int pr = m0 + (threadIdx.x / 32) * 16 + (threadIdx.x % 32) / 4 + 8 * ri;
      if (pr >= packed_total) continue;
      const int64_t slot = base + (pr / g) * pieces + piece;
      PrefillStoreState<HEAD_DIM>(p.state, slot * hq + kvh * g + pr % g, ri, o, m, l);
    }
    return;
  }
  (void)piece;
  float* total = reinterpret_cast<float*>(smem_raw + PrefillSmemBytes<HEAD_DIM, KV8>());
  // Element i of this thread's totals: o of row ri at [ri * 2 DT + dt * 2 + e], l, then m.
  auto tot = [&](int i) -> float& { return total[i * kPrefillThreads + threadIdx.x]; };
  constexpr int kL = 4 * DT, kM = kL + 2;
#pragma unroll
  for (int i = 0; i < kL + 2; ++i) tot(i) = 0.0f;
  tot(kM) = tot(kM + 1) = -INFINITY;
  const int pieces = (kv_end + kInvariantPieceKeys - 1) / kInvariantPieceKeys;
  int cur = sb;  // carried from piece to piece
  for (int k = 0; k < pieces; ++k) {
    if (k > 0) {
      __syncthreads();  // every warp is done with the last piece's K/V stages
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
    }
    PrefillMmaTiles<HEAD_DIM, T, KV8>(p, sm, kvh, cur, se, k * kInvariantPieceTiles,
                                      min(kv_end, (k + 1) * kInvariantPieceKeys), qf, limit,
                                      scale_log2, o, m, l);
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const PieceFoldWeights w = PieceWeights(tot(kM + ri), m[ri]);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& t = tot(ri * 2 * DT + dt * 2 + e);
          t = PieceFold(t, o[dt][2 * ri + e], w);
        }
      }
      tot(kL + ri) = PieceFold(tot(kL + ri), l[ri], w);
      tot(kM + ri) = w.m;
    }
  }
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][2 * ri] = tot(ri * 2 * DT + dt * 2);
      o[dt][2 * ri + 1] = tot(ri * 2 * DT + dt * 2 + 1);
    }
    l[ri] = tot(kL + ri);
  }
  PrefillWriteRows<HEAD_DIM, T>(p, seq, m0, kvh, o, l);
}

// The deterministic mode's shared-prefix read: one CTA per (group tile, kv head). A group tile
// packs 64 rows of the group's members (member k's q head j of this kv head is row k x group + j
// of the group; every member has one new token) and runs piece gtile_piece of the group's first
// member's spans (the members share those positions' chunks) once for all of them, leaving each
// row's piece state where the member's own items would have left it.
template <int HEAD_DIM, typename T, bool KV8 = false>
__global__ void __launch_bounds__(kPrefillThreads)
    SharedPrefixMmaKernel(const __grid_constant__ PrefillParams p) {
  constexpr int DT = HEAD_DIM / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const PrefillSmem<HEAD_DIM, T, KV8> sm(smem_raw);
  const int tile = blockIdx.x, kvh = blockIdx.y;
  const int grp = p.gtile_group[tile], m0 = p.gtile_m0[tile], piece = p.gtile_piece[tile];
  if (grp < 0) return;  // padding (a captured step's grid)
  const int first = p.grp_first[grp];
  const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
  const int members_rows = p.grp_count[grp] * g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rep = p.grp_members[first];

  uint32_t qf[HEAD_DIM / 16][4];
  PrefillLoadQ<HEAD_DIM, T, KV8>(
      p, sm, kvh,
      [&](int r) -> int64_t {
        const int pr = m0 + r;
        if (pr >= members_rows) return -1;
        const int seq = p.grp_members[first + pr / g];
        return (static_cast<int64_t>(p.seq_q_row[seq]) * hq + kvh * g + pr % g) * HEAD_DIM;
      },
      qf);
  int limit[2];
  int64_t row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = m0 + warp * 16 + lane / 4 + 8 * i;
    limit[i] = 0;
    row[i] = -1;
    if (pr < members_rows) {
      const int seq = p.grp_members[first + pr / g];
      limit[i] = p.seq_pos0[seq] + 1;
      row[i] = (static_cast<int64_t>(p.seq_state[seq]) + piece) * hq + kvh * g + pr % g;
    }
  }
  float o[DT][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int cur = p.seq_span_begin[rep];
  PrefillMmaTiles<HEAD_DIM, T, KV8>(p, sm, kvh, cur, p.seq_span_end[rep],
                                    piece * kInvariantPieceTiles,
                                    (piece + 1) * kInvariantPieceKeys, qf, limit, p.scale * kLog2e,
                                    o, m, l);
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    if (row[ri] >= 0) PrefillStoreState<HEAD_DIM>(p.state, row[ri], ri, o, m, l);
  }
}

// The deterministic mode's merge: one CTA per sequence of p.merge_seq, a warp per (new token,
// q head) row, folding the row's piece states in position order (PieceWeights, PieceFold) and
// writing its output as the folding CTA writes it (the quad's partial sums added pairwise).
template <int HEAD_DIM, typename T>
__global__ void __launch_bounds__(kPrefillThreads)
    InvariantMergeKernel(const __grid_constant__ PrefillParams p) {
  constexpr int C = HEAD_DIM / 32;  // columns per lane: lane + 32 i
  const int s = p.merge_seq[blockIdx.x];
  if (s < 0) return;  // padding (a captured step's grid)
  const int hq = p.num_q_heads, pieces = p.seq_pieces[s], q_row = p.seq_q_row[s];
  const int rows = p.seq_num_q[s] * hq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t stride = PrefillStateStride(HEAD_DIM);
  for (int r = warp; r < rows; r += kPrefillThreads / 32) {
    const int j = r / hq, h = r % hq;
    float mt = -INFINITY, lt[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ot[C];
#pragma unroll
    for (int i = 0; i < C; ++i) ot[i] = 0.0f;
    for (int k = 0; k < pieces; ++k) {
      const int64_t slot = static_cast<int64_t>(p.seq_state[s]) + int64_t{j} * pieces + k;
      const float* st = p.state + (slot * hq + h) * stride;
      const PieceFoldWeights w = PieceWeights(mt, st[HEAD_DIM + 4]);
#pragma unroll
      for (int i = 0; i < C; ++i) ot[i] = PieceFold(ot[i], st[lane + 32 * i], w);
#pragma unroll
      for (int q = 0; q < 4; ++q) lt[q] = PieceFold(lt[q], st[HEAD_DIM + q], w);
      mt = w.m;
    }
    const float l = (lt[0] + lt[1]) + (lt[2] + lt[3]);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* dst = static_cast<T*>(p.out) + (static_cast<int64_t>(q_row + j) * hq + h) * HEAD_DIM;
#pragma unroll
    for (int i = 0; i < C; ++i) dst[lane + 32 * i] = FromFloat<T>(ot[i] * inv);
  }
}

}  // namespace banyan::kernels::cuda
