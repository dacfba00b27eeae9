// Small helpers shared by the TPP kernels (sm_80+ instructions, built for sm_90). The PTX
// wrappers (cp.async with zero fill, ldmatrix, mma.sync m16n8k16) are mma.cuh's; the
// programmatic-dependent-launch controls device_utils.cuh's.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/device_utils.cuh"  // GridDependencyWait, LaunchDependents
#include "kernels/cuda/kv_fp8.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/paged_views.h"

namespace banyan::kernels::cuda::tpp {

// Device-side tables: the uploaded plan image, unpacked into pointers on the host.
struct TppTables {
  const int32_t* span_chunk;
  const int32_t* span_begin;
  const int32_t* span_end;
  const int32_t* seg_row_begin;
  const int32_t* seg_row_end;
  const int32_t* p1_seg;
  const int32_t* p1_span_lo;
  const int32_t* p1_span_hi;
  const int32_t* p1_m_begin;
  const int32_t* p1_state;
  const int32_t* p2_row;
  const int32_t* p2_span_lo;
  const int32_t* p2_span_hi;
  const int32_t* p2_state;
  const int32_t* row_merge_begin;
  const int32_t* row_merge_end;
  const int32_t* merge_states;
  const int32_t* merge_rows;
};

// One Params struct for all three kernels, passed by value as a __grid_constant__.
struct TppParams {
  const void* q;      // [rows][num_q_heads][head_dim]
  void* out;          // [rows][num_q_heads][head_dim]
  KvViewDev kv;
  TppTables t;
  float* partial_o;   // [states][num_q_heads][head_dim], normalised
  float* partial_lse; // [states][num_q_heads], log2 domain; -inf: empty state
  float scale_log2;   // softmax scale * log2(e): logits are kept in the log2 domain
  int32_t num_q_heads;
  int32_t group;      // g = num_q_heads / num_kv_heads
  int32_t wait_phase1;  // phase 2 was launched with PDL behind phase 1: every CTA waits for it
  int32_t wait_phase2;  // the merge kernel was launched with PDL behind phase 2: it waits for it
};

template <typename T>
struct DTypeTraits;

template <>
struct DTypeTraits<__nv_bfloat16> {
  __device__ static uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static float2 Unpack(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
};

template <>
struct DTypeTraits<__half> {
  __device__ static uint32_t Pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static float2 Unpack(uint32_t v) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  }
};


constexpr float kNegInf = -__builtin_huge_valf();

// 2^x on the special-function unit; ex2.approx(-inf) = +0, which the online softmax relies on.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Element offset of 16-byte vector c of row `row` in a shared-memory tile, laid out so that
// eight consecutive rows' vector c land in eight distinct 16-byte bank groups: rows padded by 16
// bytes, or unpadded rows with the vector index XOR-swizzled by row & 7.
template <int HEAD_DIM, bool PADDED>
__device__ __forceinline__ int Swizzle(int row, int c) {
  if constexpr (PADDED) {
    return row * (HEAD_DIM + 8) + c * 8;
  } else {
    return row * HEAD_DIM + ((c ^ (row & 7)) << 3);
  }
}

// Walks a span list in tiles of at most TILE tokens, never crossing a span (a tile is one chunk's
// slots). All threads of a CTA hold identical iterators.
template <int TILE>
struct TileIter {
  int32_t span;  // current span; == span_hi: done
  int32_t slot;  // first slot of the tile
  __device__ __forceinline__ void Start(const TppTables& t, int32_t lo, int32_t hi) {
    span = lo;
    slot = lo < hi ? t.span_begin[lo] : 0;
    Skip(t, hi);
  }
  // Skips empty spans.
  __device__ __forceinline__ void Skip(const TppTables& t, int32_t hi) {
    while (span < hi && slot >= t.span_end[span]) {
      ++span;
      if (span < hi) slot = t.span_begin[span];
    }
  }
  __device__ __forceinline__ void Next(const TppTables& t, int32_t hi) {
    slot += TILE;
    Skip(t, hi);
  }
};

// Issues one K/V tile's cp.async copies: TILE slots of span it.span from slot it.slot, kv head
// kvh, into s_k / s_v, vector c of row r at element offset layout(r, c); slots past the span's
// end are zero-filled. Called by all THREADS threads of the CTA.
template <int TILE, int HEAD_DIM, int THREADS, bool KV8, typename DType, typename Layout>
__device__ __forceinline__ void LoadKvTile(const TppParams& p, int kvh, const TileIter<TILE>& it,
                                           DType* s_k, DType* s_v, const Layout& layout) {
  constexpr int VECS = HEAD_DIM / 8;
  const TppTables& t = p.t;
  const int n = min(TILE, t.span_end[it.span] - it.slot);
  const DType* k_src = static_cast<const DType*>(p.kv.base) +
                       static_cast<int64_t>(t.span_chunk[it.span]) * p.kv.chunk_stride +
                       (static_cast<int64_t>(kvh) * p.kv.chunk_size + it.slot) * HEAD_DIM;
  const int64_t v_offset = p.kv.v_offset;
  if constexpr (KV8) {
    // FP8 cache: through registers, dequantized into the same tile layout (not asynchronous:
    // the pipeline's waits and barriers cover these stores as they cover the copies).
    const int64_t chunk = t.span_chunk[it.span];
    const int64_t k0 = chunk * p.kv.chunk_stride +
                       (static_cast<int64_t>(kvh) * p.kv.chunk_size + it.slot) * HEAD_DIM;
    const int64_t e0 = KvFp8ExpOffset(p.kv, chunk, kvh, it.slot);
    const int64_t ve = KvFp8VExpStride(p.kv);
    // Every load of the tile first (one memory latency per tile, not one per vector), then the
    // conversions and stores.
    constexpr int N = TILE * VECS / THREADS;
    uint2 kc[N], vc[N];
    int8_t ke[N], ve8[N];
    const auto* codes = static_cast<const uint8_t*>(p.kv.base);
    const auto* exps = static_cast<const int8_t*>(p.kv.base);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * THREADS;
      const int r = v / VECS;
      const int c = v % VECS;
      kc[i] = vc[i] = make_uint2(0, 0);
      ke[i] = ve8[i] = 0;
      if (r < n) {
        kc[i] = *reinterpret_cast<const uint2*>(codes + k0 + r * HEAD_DIM + c * 8);
        vc[i] = *reinterpret_cast<const uint2*>(codes + k0 + v_offset + r * HEAD_DIM + c * 8);
        ke[i] = exps[e0 + r];
        ve8[i] = exps[e0 + ve + r];
      }
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * THREADS;
      const int off = layout(v / VECS, v % VECS);
      *reinterpret_cast<uint4*>(s_k + off) = DequantKv8<DType>(kc[i], KvFp8ScaleDev(ke[i]));
      *reinterpret_cast<uint4*>(s_v + off) = DequantKv8<DType>(vc[i], KvFp8ScaleDev(ve8[i]));
    }
  } else {
#pragma unroll
    for (int i = 0; i < TILE * VECS / THREADS; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * THREADS;
      const int r = v / VECS;
      const int c = v % VECS;
      const bool valid = r < n;
      const DType* src = valid ? k_src + r * HEAD_DIM + c * 8 : k_src;
      const int off = layout(r, c);
      CpAsync16(s_k + off, src, valid);
      CpAsync16(s_v + off, src + v_offset, valid);
    }
  }
}

// Fills the first STAGES - 1 stages of a cp.async pipeline (one commit group per stage, empty
// past the end of the spans), advancing load_it; load(stage, it) issues one tile.
template <int STAGES, int TILE, typename Load>
__device__ __forceinline__ void StartPipeline(const TppTables& t, int span_hi,
                                              TileIter<TILE>& load_it, const Load& load) {
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (load_it.span < span_hi) {
      load(st, load_it);
      load_it.Next(t, span_hi);
    }
    CpAsyncCommit();
  }
}

// One step of a STAGES-deep pipeline, at the top of each tile's computation: waits until the tile
// to compute has landed and every thread is done with the stage about to be refilled, then
// issues the next tile (if any) into load_stage and commits its group.
template <int STAGES, int TILE, typename Load>
__device__ __forceinline__ void PipelineStep(const TppTables& t, int span_hi,
                                             TileIter<TILE>& load_it, int load_stage,
                                             const Load& load) {
  CpAsyncWait<STAGES - 2>();
  __syncthreads();
  if (load_it.span < span_hi) {
    load(load_stage, load_it);
    load_it.Next(t, span_hi);
  }
  CpAsyncCommit();
}

}  // namespace banyan::kernels::cuda::tpp
