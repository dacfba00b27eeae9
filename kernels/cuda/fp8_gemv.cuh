// The FP8 GEMV's device code (kernels/cuda/fp8_gemv.h says what it computes), templated on its
// tiling so that bench/fp8_gemv_bench.cu can time the variants with the same code the engine
// runs. Device code only; no host library.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {
namespace fp8_gemv {

// One block computes 16 output channels (the M = 16 side of mma.m16n8k32, weights as the A
// operand) for up to 8 tokens (the N = 8 side, activations as B): no code is converted, the
// tensor cores multiply E4M3 by E4M3 into fp32. The block's kWarps warps split K; each lane
// keeps 2 * kUnroll 16-byte weight loads in flight (kUnroll 64-byte chunks of two rows).
constexpr int kRows = 16;   // output channels per block
constexpr int kChunk = 64;  // K bytes of one step of one warp: two mma of k32

// D += A * B for A 16 x 32 and B 32 x 8, E4M3 in, fp32 out. Fragments (g = lane / 4,
// t = lane % 4): a0 / a2 row g, a1 / a3 row g + 8, a0 / a1 k 4t..4t+3, a2 / a3 k 16+4t..;
// b0 k 4t.., b1 k 16+4t.., column g; d0 / d1 row g, d2 / d3 row g + 8, columns 2t, 2t + 1.
__device__ __forceinline__ void MmaFp8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // FP8 tensor cores: sm_89 and later (Fp8Gemm refuses older devices)
#endif
}

__device__ __forceinline__ void Store(float* o, float v) { *o = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* o, float v) { *o = __float2bfloat16(v); }
__device__ __forceinline__ void Store(__half* o, float v) { *o = __float2half(v); }

struct Args {
  const uint8_t* w;
  const float* w_scales;
  int64_t w_scale_stride;
  const uint8_t* a;
  const float* a_scales;
  int M;
  int64_t N, K;
  float beta;
};

// A 64-byte chunk of K needs no particular order of its bytes within the two k32 products, so
// each lane loads 16 contiguous bytes per row (lanes 4g..4g+3 cover the chunk of row g) and the
// same 16 bytes of the activations: words 0, 1 feed the first mma as (k 4t.., k 16+4t..), words
// 2, 3 the second. A and B see the same permutation of K, so the sums are the product's.
//
// Launched early (programmatic dependent launch), a block reads its first step's weights into
// registers while the kernel before it runs, and only then waits (griddepcontrol.wait) and reads
// the activations: weights are never written by a step. Launched plainly (as the engine does:
// in the 8B decode step at one row early launch gained nothing, see bench/fp8_gemv_bench.cu) the
// wait returns at once.
template <typename Out, int kWarps, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) Kernel(const __grid_constant__ Args p, Out* out) {
  static_assert(kWarps * 32 >= kRows * 8, "one output per thread in the epilogue");
  __shared__ float partial[kWarps][kRows * 8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t N = p.N, K = p.K;
  const int M = p.M;
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const bool blocks = p.w_scale_stride > 0;
  const bool row0 = n0 + g < N, row1 = n0 + g + 8 < N, tok = g < M;
  const uint8_t* w0 = p.w + (n0 + g) * K + t * 16;
  const uint8_t* w1 = w0 + 8 * K;
  const uint8_t* ar = p.a + int64_t{g} * K + t * 16;
  const int64_t chunks = (K + kChunk - 1) / kChunk;
  constexpr int64_t kStep = int64_t{kWarps} * kUnroll;  // chunks of one step of the block
  const float* ws_row = blocks ? p.w_scales + (n0 >> 7) * p.w_scale_stride : nullptr;
  // The tokens of this lane's accumulators: columns 2t and 2t + 1.
  const int m0 = 2 * t, m1 = 2 * t + 1;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 x0[kUnroll], x1[kUnroll];
  // Weights are read once: streamed past L1 and L2's keep-lists; activations are reused.
  auto load_w = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t col = (c0 + u) * kChunk;
      const bool in = col + t * 16 < K;  // K is a multiple of 16: a vector is all in or out
      x0[u] = in && row0 ? __ldcs(reinterpret_cast<const uint4*>(w0 + col)) : zero;
      x1[u] = in && row1 ? __ldcs(reinterpret_cast<const uint4*>(w1 + col)) : zero;
    }
  };
  LaunchDependents();  // the next kernel, where it follows with PDL (a graph's edge needs none)
  int64_t c0 = int64_t{warp} * kUnroll;
  load_w(c0);
  GridDependencyWait();
  for (; c0 < chunks; c0 += kStep) {
    uint4 y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t col = (c0 + u) * kChunk;
      y[u] = col + t * 16 < K && tok ? __ldg(reinterpret_cast<const uint4*>(ar + col)) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!blocks) {
        MmaFp8(acc, x0[u].x, x1[u].x, x0[u].y, x1[u].y, y[u].x, y[u].y);
        MmaFp8(acc, x0[u].z, x1[u].z, x0[u].w, x1[u].w, y[u].z, y[u].w);
        continue;
      }
      // 128 x 128 blocks: a 64-byte chunk lies in one K group; the 16 rows in one N group.
      const int64_t col = (c0 + u) * kChunk;
      if (col >= K) break;
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      MmaFp8(part, x0[u].x, x1[u].x, x0[u].y, x1[u].y, y[u].x, y[u].y);
      MmaFp8(part, x0[u].z, x1[u].z, x0[u].w, x1[u].w, y[u].z, y[u].w);
      const int64_t grp = col >> 7;
      const float ws = ws_row[grp];
      const float s0 = m0 < M ? ws * p.a_scales[grp * M + m0] : 0.0f;
      const float s1 = m1 < M ? ws * p.a_scales[grp * M + m1] : 0.0f;
      acc[0] = fmaf(part[0], s0, acc[0]);
      acc[1] = fmaf(part[1], s1, acc[1]);
      acc[2] = fmaf(part[2], s0, acc[2]);
      acc[3] = fmaf(part[3], s1, acc[3]);
    }
    if (c0 + kStep < chunks) load_w(c0 + kStep);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane * 4 + i] = acc[i];
  __syncthreads();
  // One output per thread: lane l's accumulator i is row g(l) + 8 * (i / 2), token 2 t(l) + i % 2.
  if (threadIdx.x >= kRows * 8) return;
  const int l = threadIdx.x >> 2, i = threadIdx.x & 3;
  const int m = 2 * (l & 3) + (i & 1);
  const int64_t n = n0 + (l >> 2) + 8 * (i >> 1);
  if (m >= M || n >= N) return;
  float v = 0.0f;
#pragma unroll
  for (int wi = 0; wi < kWarps; ++wi) v += partial[wi][threadIdx.x];
  if (!blocks) v *= p.w_scales[n] * p.a_scales[m];
  Out* o = out + int64_t{m} * N + n;
  if (p.beta != 0.0f) v = fmaf(p.beta, ToFloat(*o), v);
  Store(o, v);
}

}  // namespace fp8_gemv
}  // namespace banyan::kernels::cuda
