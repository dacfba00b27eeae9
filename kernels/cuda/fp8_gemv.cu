#include "kernels/cuda/fp8_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {
namespace {

constexpr int kWarps = 8;  // output channels per block

// 16 E4M3 codes (one 16-byte load, the lowest byte first) as floats.
__device__ __forceinline__ void Decode16(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * h));
      const __half2 x = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
      const float2 x2 = __half22float2(x);
      f[4 * i + 2 * h] = x2.x;
      f[4 * i + 2 * h + 1] = x2.y;
    }
  }
}

__device__ __forceinline__ void Store(float* o, float v) { *o = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* o, float v) { *o = __float2bfloat16(v); }
__device__ __forceinline__ void Store(__half* o, float v) { *o = __float2half(v); }

template <int M, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    Fp8GemvKernel(const uint8_t* __restrict__ w, const float* __restrict__ w_scales,
                  int64_t w_scale_stride, const uint8_t* __restrict__ a,
                  const float* __restrict__ a_scales, int64_t N, int64_t K, Out* __restrict__ out,
                  float beta) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const bool blocks = w_scale_stride > 0;
  const uint8_t* wr = w + n * K;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int64_t k = int64_t{lane} * 16; k < K; k += 32 * 16) {
    float wf[16];
    Decode16(__ldcs(reinterpret_cast<const uint4*>(wr + k)), wf);  // read once: streamed
    const float ws = blocks ? w_scales[(n >> 7) * w_scale_stride + (k >> 7)] : 1.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float af[16];
      Decode16(__ldg(reinterpret_cast<const uint4*>(a + m * K + k)), af);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) dot = fmaf(wf[i], af[i], dot);
      // 16 elements never straddle a 128-group: block scales apply per piece.
      acc[m] = blocks ? fmaf(dot, ws * a_scales[(k >> 7) * M + m], acc[m]) : acc[m] + dot;
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = blocks ? acc[m] : acc[m] * w_scales[n] * a_scales[m];
    Out* o = out + m * N + n;
    if (beta != 0.0f) v = fmaf(beta, ToFloat(*o), v);
    Store(o, v);
  }
}

template <int M>
absl::Status LaunchRows(const Fp8GemvParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kWarps - 1) / kWarps));
  switch (p.out_type) {
    case Fp8GemvOut::kF32:
      Fp8GemvKernel<M><<<grid, kWarps * 32, 0, stream>>>(
          p.w, p.w_scales, p.w_scale_stride, p.a, p.a_scales, p.N, p.K,
          static_cast<float*>(p.out), p.beta);
      break;
    case Fp8GemvOut::kBf16:
      Fp8GemvKernel<M><<<grid, kWarps * 32, 0, stream>>>(
          p.w, p.w_scales, p.w_scale_stride, p.a, p.a_scales, p.N, p.K,
          static_cast<__nv_bfloat16*>(p.out), p.beta);
      break;
    case Fp8GemvOut::kF16:
      Fp8GemvKernel<M><<<grid, kWarps * 32, 0, stream>>>(
          p.w, p.w_scales, p.w_scale_stride, p.a, p.a_scales, p.N, p.K,
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
  switch (p.M) {
    case 1: return LaunchRows<1>(p, stream);
    case 2: return LaunchRows<2>(p, stream);
    case 3: return LaunchRows<3>(p, stream);
    default: return LaunchRows<4>(p, stream);
  }
}

}  // namespace banyan::kernels::cuda
