#include "kernels/cuda/fp8_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {
namespace {

// One block computes 16 output channels (the M = 16 side of mma.m16n8k32, weights as the A
// operand) for up to 8 tokens (the N = 8 side, activations as B): no code is converted, the
// tensor cores multiply E4M3 by E4M3 into fp32. The block's warps split K; each lane keeps
// 2 * kUnroll 16-byte weight loads in flight (kUnroll 64-byte chunks of two rows).
constexpr int kWarps = 4;
constexpr int kRows = 16;    // output channels per block
constexpr int kChunk = 64;   // K bytes of one step of one warp: two mma of k32
constexpr int kUnroll = 8;   // chunks per warp per step

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

// A 64-byte chunk of K needs no particular order of its bytes within the two k32 products, so
// each lane loads 16 contiguous bytes per row (lanes 4g..4g+3 cover the chunk of row g) and the
// same 16 bytes of the activations: words 0, 1 feed the first mma as (k 4t.., k 16+4t..), words
// 2, 3 the second. A and B see the same permutation of K, so the sums are the product's.
template <typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    Fp8GemvKernel(const uint8_t* __restrict__ w, const float* __restrict__ w_scales,
                  int64_t w_scale_stride, const uint8_t* __restrict__ a,
                  const float* __restrict__ a_scales, int M, int64_t N, int64_t K,
                  Out* __restrict__ out, float beta) {
  __shared__ float partial[kWarps][kRows * 8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const bool blocks = w_scale_stride > 0;
  const bool row0 = n0 + g < N, row1 = n0 + g + 8 < N, tok = g < M;
  const uint8_t* w0 = w + (n0 + g) * K + t * 16;
  const uint8_t* w1 = w0 + 8 * K;
  const uint8_t* ar = a + int64_t{g} * K + t * 16;
  const int64_t chunks = (K + kChunk - 1) / kChunk;
  const float* ws_row = blocks ? w_scales + (n0 >> 7) * w_scale_stride : nullptr;
  // The tokens of this lane's accumulators: columns 2t and 2t + 1.
  const int m0 = 2 * t, m1 = 2 * t + 1;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t c0 = int64_t{warp} * kUnroll; c0 < chunks; c0 += kWarps * kUnroll) {
    uint4 x0[kUnroll], x1[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t col = (c0 + u) * kChunk;
      const bool in = col + t * 16 < K;  // K is a multiple of 16: a vector is all in or out
      // Weights are read once: streamed past L1 and L2's keep-lists; activations are reused.
      x0[u] = in && row0 ? __ldcs(reinterpret_cast<const uint4*>(w0 + col)) : zero;
      x1[u] = in && row1 ? __ldcs(reinterpret_cast<const uint4*>(w1 + col)) : zero;
      y[u] = in && tok ? __ldg(reinterpret_cast<const uint4*>(ar + col)) : zero;
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
      const float s0 = m0 < M ? ws * a_scales[grp * M + m0] : 0.0f;
      const float s1 = m1 < M ? ws * a_scales[grp * M + m1] : 0.0f;
      acc[0] = fmaf(part[0], s0, acc[0]);
      acc[1] = fmaf(part[1], s1, acc[1]);
      acc[2] = fmaf(part[2], s0, acc[2]);
      acc[3] = fmaf(part[3], s1, acc[3]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane * 4 + i] = acc[i];
  __syncthreads();
  // One output per thread: lane l's accumulator i is row g(l) + 8 * (i / 2), token 2 t(l) + i % 2.
  const int l = threadIdx.x >> 2, i = threadIdx.x & 3;
  const int m = 2 * (l & 3) + (i & 1);
  const int64_t n = n0 + (l >> 2) + 8 * (i >> 1);
  if (m >= M || n >= N) return;
  float v = 0.0f;
#pragma unroll
  for (int wi = 0; wi < kWarps; ++wi) v += partial[wi][threadIdx.x];
  if (!blocks) v *= w_scales[n] * a_scales[m];
  Out* o = out + int64_t{m} * N + n;
  if (beta != 0.0f) v = fmaf(beta, ToFloat(*o), v);
  Store(o, v);
}

absl::Status Launch(const Fp8GemvParams& p, cudaStream_t stream) {
  static_assert(kWarps * 32 == kRows * 8, "one output per thread in the epilogue");
  const dim3 grid(static_cast<unsigned>((p.N + kRows - 1) / kRows));
  const int M = static_cast<int>(p.M);
  switch (p.out_type) {
    case Fp8GemvOut::kF32:
      Fp8GemvKernel<<<grid, kWarps * 32, 0, stream>>>(p.w, p.w_scales, p.w_scale_stride, p.a,
                                                      p.a_scales, M, p.N, p.K,
                                                      static_cast<float*>(p.out), p.beta);
      break;
    case Fp8GemvOut::kBf16:
      Fp8GemvKernel<<<grid, kWarps * 32, 0, stream>>>(p.w, p.w_scales, p.w_scale_stride, p.a,
                                                      p.a_scales, M, p.N, p.K,
                                                      static_cast<__nv_bfloat16*>(p.out), p.beta);
      break;
    case Fp8GemvOut::kF16:
      Fp8GemvKernel<<<grid, kWarps * 32, 0, stream>>>(p.w, p.w_scales, p.w_scale_stride, p.a,
                                                      p.a_scales, M, p.N, p.K,
                                                      static_cast<__half*>(p.out), p.beta);
      break;
  }
  return CudaStatus(cudaGetLastError(), "Fp8GemvKernel");
}

}  // namespace

absl::Status Fp8Gemv(const Fp8GemvParams& p, cudaStream_t stream) {
  if (p.M < 0 || p.M > kFp8GemvMaxRows) {
    return absl::InvalidArgumentError("Fp8Gemv: M must be at most kFp8GemvMaxRows");
  }
  if (p.K <= 0 || p.K % 16 != 0 || p.N <= 0) {
    return absl::InvalidArgumentError("Fp8Gemv: K must be a positive multiple of 16");
  }
  if (p.M == 0) return absl::OkStatus();
  if (p.w == nullptr || p.w_scales == nullptr || p.a == nullptr || p.a_scales == nullptr ||
      p.out == nullptr) {
    return absl::InvalidArgumentError("Fp8Gemv: empty operand");
  }
  return Launch(p, stream);
}

}  // namespace banyan::kernels::cuda
