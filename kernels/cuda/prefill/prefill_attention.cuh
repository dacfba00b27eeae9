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

#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_fp8.cuh"
#include "kernels/cuda/mma.cuh"

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
      LdMatrixX4(b, ks + (np * 16 + lane % 8 + (lane / 16) * 8) * STRIDE + kk * 16 +
                        ((lane / 8) % 2) * 8);
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
      LdMatrixX4Trans(b, vs + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * STRIDE + dp * 16 +
                             (lane / 16) * 8);
      Mma16816<T>(o[2 * dp], a, b[0], b[1]);
      Mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

template <int HEAD_DIM, typename T, bool KV8 = false>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillMmaKernel(const __grid_constant__ PrefillParams p) {
  constexpr int BM = kPrefillBlockM, BN = kPrefillBlockN;
  constexpr int STRIDE = HEAD_DIM + 8;  // shared row stride in elements (16-byte pad)
  constexpr int KSTEPS = HEAD_DIM / 16;
  constexpr int DT = HEAD_DIM / 8;   // n8 tiles of O per warp
  constexpr int VPR = HEAD_DIM / 8;  // 16-byte vectors per row
  static_assert(HEAD_DIM % 16 == 0 && BM == 4 * 16, "tile shape");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  // K tiles, then V tiles: one of each after Q with an FP8 cache; two of each (buffers t & 1)
  // without, the first K buffer over Q (its copies start once Q is in registers).
  constexpr int kBuffers = KV8 ? 1 : 2;
  T* ks = KV8 ? qs + BM * STRIDE : qs;
  T* vs = ks + kBuffers * BN * STRIDE;
  int64_t* koff = reinterpret_cast<int64_t*>(vs + kBuffers * BN * STRIDE);  // keys' offsets
  int64_t* kexp = koff + BN;  // their exponents' offsets (KV8 only)

  const int tile = blockIdx.x, kvh = blockIdx.y;
  const int seq = p.tile_seq[tile], m0 = p.tile_m0[tile];
  const int hq = p.num_q_heads, g = hq / p.kv.num_kv_heads;
  const int pos0 = p.seq_pos0[seq], q_row = p.seq_q_row[seq];
  const int packed_total = p.seq_num_q[seq] * g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale_log2 = p.scale * kLog2e;
  const int last_pr = min(packed_total, m0 + BM) - 1;
  const int kv_end = pos0 + last_pr / g + 1;  // keys any row of this tile may see
  const int sb = p.seq_span_begin[seq], se = p.seq_span_end[seq];
  int cur = sb;  // a span starting at or before the next tile's first key

  // 16-bit cache: cp.async copies, zero-filled past kv_end.
  [[maybe_unused]] auto issue = [&](int t) {
    T* kd = ks + (t & 1) * BN * STRIDE;
    T* vd = vs + (t & 1) * BN * STRIDE;
    const int64_t* ko = koff + (t & 1) * BN;
    for (int v = threadIdx.x; v < BN * VPR; v += kPrefillThreads) {
      const int r = v / VPR, c = (v % VPR) * 8;
      const int64_t off = ko[r];
      const T* src = static_cast<const T*>(p.kv.base) + (off >= 0 ? off : 0) + c;
      CpAsync16(kd + r * STRIDE + c, src, off >= 0);
      CpAsync16(vd + r * STRIDE + c, src + p.kv.v_offset, off >= 0);
    }
    CpAsyncCommit();
  };
  for (int v = threadIdx.x; v < BM * VPR; v += kPrefillThreads) {
    const int r = v / VPR, c = (v % VPR) * 8;
    const int pr = m0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (pr < packed_total) {
      const int64_t qi = (static_cast<int64_t>(q_row + pr / g) * hq + kvh * g + pr % g) * HEAD_DIM;
      val = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi + c);
    }
    *reinterpret_cast<uint4*>(qs + r * STRIDE + c) = val;
  }
  int limit[2];  // keys visible to this thread's two rows
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = m0 + warp * 16 + lane / 4 + 8 * i;
    limit[i] = pr < packed_total ? pos0 + pr / g + 1 : 0;
  }
  __syncthreads();
  uint32_t qf[KSTEPS][4];
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    LdMatrixX4(qf[kk], qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + (lane / 16) * 8);
  }
  if constexpr (!KV8) {
    PrefillKeyOffsets<HEAD_DIM, false>(p, kvh, cur, se, 0, kv_end, koff, nullptr);
    __syncthreads();  // koff is written, and every warp holds its Q (tile 0's K lands over it)
    issue(0);
  }

  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int tiles = (kv_end + BN - 1) / BN;

  for (int t = 0; t < tiles; ++t) {
    const int n0 = t * BN;
    if constexpr (KV8) {
      // FP8 codes are scaled and converted on the way in, through registers.
      cur = PrefillSpanOf(p, cur, se, n0);
      __syncthreads();  // the previous tile is consumed
      PrefillKeyOffsets<HEAD_DIM, true>(p, kvh, cur, se, n0, kv_end, koff, kexp);
      __syncthreads();
      for (int v = threadIdx.x; v < BN * VPR; v += kPrefillThreads) {
        const int r = v / VPR, c = (v % VPR) * 8;
        const int64_t off = koff[r];
        uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);  // zeros, never NaN
        if (off >= 0) {
          kv4 = LoadKv8<T, true>(p.kv, off + c, kexp[r]);
          vv4 = LoadKv8<T, true>(p.kv, off + p.kv.v_offset + c, kexp[r] + KvFp8VExpStride(p.kv));
        }
        *reinterpret_cast<uint4*>(ks + r * STRIDE + c) = kv4;
        *reinterpret_cast<uint4*>(vs + r * STRIDE + c) = vv4;
      }
      __syncthreads();
      PrefillAttendTile<HEAD_DIM, T>(qf, ks, vs, n0, limit, scale_log2, o, m, l);
    } else {
      // Tile t + 1's copies go out while tile t is used: its offsets first (into the buffer of
      // tile t - 1, whose copies were issued an iteration ago), then, once every warp is done
      // with tile t - 1's K/V, its cp.async into that buffer.
      if (t + 1 < tiles) {
        cur = PrefillSpanOf(p, cur, se, n0 + BN);
        PrefillKeyOffsets<HEAD_DIM, false>(p, kvh, cur, se, n0 + BN, kv_end,
                                           koff + ((t + 1) & 1) * BN, nullptr);
      }
      __syncthreads();
      if (t + 1 < tiles) {
        issue(t + 1);
        CpAsyncWait<1>();  // this thread's copies of tile t have landed
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();  // and everyone's
      PrefillAttendTile<HEAD_DIM, T>(qf, ks + (t & 1) * BN * STRIDE, vs + (t & 1) * BN * STRIDE,
                                     n0, limit, scale_log2, o, m, l);
    }
  }

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
    for (int dt = 0; dt < DT; ++dt) {
      *reinterpret_cast<typename PairOf<T>::Type*>(dst + dt * 8 + (lane % 4) * 2) =
          FromFloat2<T>(o[dt][2 * ri] * inv, o[dt][2 * ri + 1] * inv);
    }
  }
}

}  // namespace banyan::kernels::cuda
