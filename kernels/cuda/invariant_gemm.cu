// InvariantGemm (invariant_gemm.h): a 64 x 64 tile per CTA of four warps, each warp 32 x 32 of it
// as 2 x 4 mma.sync m16n8k16 tiles; K in slices of 32 through a three-stage shared-memory ring.
#include "kernels/cuda/invariant_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma.cuh"

namespace banyan::kernels::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32;
constexpr int kLd = kBK + 8;  // row stride in elements: 80 bytes, so ldmatrix rows miss bank conflicts
constexpr int kStages = 3;
constexpr int kThreads = 128;

// Rows [row0, row0 + 64) x K [k0, k0 + 32) of src ([rows, K] row-major) into dst, zero outside.
template <typename T, bool VEC>
__device__ __forceinline__ void LoadTile(T (*dst)[kLd], const T* src, int64_t rows, int64_t row0,
                                         int64_t K, int64_t k0) {
  for (int v = threadIdx.x; v < kBM * (kBK / 8); v += kThreads) {
    const int r = v / (kBK / 8), c = (v % (kBK / 8)) * 8;
    const int64_t row = row0 + r, k = k0 + c;
    T* d = &dst[r][c];
    if constexpr (VEC) {
      const bool valid = row < rows && k < K;  // K % 8 == 0: all 8 elements or none
      CpAsync16(d, valid ? src + row * K + k : src, valid);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        d[e] = row < rows && k + e < K ? src[row * K + k + e] : FromFloat<T>(0.0f);
      }
    }
  }
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads)
    InvariantGemmKernel(const __grid_constant__ InvariantGemmParams p) {
  __shared__ alignas(16) T As[kStages][kBM][kLd];
  __shared__ alignas(16) T Bs[kStages][kBN][kLd];
  const T* a = static_cast<const T*>(p.a);
  const T* w = static_cast<const T*>(p.w);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int nk = static_cast<int>((p.K + kBK - 1) / kBK);
  auto load = [&](int kt) {
    LoadTile<T, VEC>(As[kt % kStages], a, p.M, m0, p.K, static_cast<int64_t>(kt) * kBK);
    LoadTile<T, VEC>(Bs[kt % kStages], w, p.N, n0, p.K, static_cast<int64_t>(kt) * kBK);
  };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load(s);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    CpAsyncWait<kStages - 2>();  // slice kt has landed
    __syncthreads();             // and every warp is done with the stage the prefetch reuses
    if (kt + kStages - 1 < nk) load(kt + kStages - 1);
    CpAsyncCommit();
    const int st = kt % kStages;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        LdMatrixX4(af[mi], &As[st][wm + mi * 16 + lane % 16][kk + (lane / 16) * 8]);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t bf[4];  // n-tile 2 nj: bf[0..1], 2 nj + 1: bf[2..3]
        LdMatrixX4(bf, &Bs[st][wn + nj * 16 + lane % 8 + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          Mma16816<T>(acc[mi][2 * nj], af[mi], bf[0], bf[1]);
          Mma16816<T>(acc[mi][2 * nj + 1], af[mi], bf[2], bf[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = m0 + wm + mi * 16 + lane / 4 + (e / 2) * 8;
        const int64_t col = n0 + wn + ni * 8 + (lane % 4) * 2 + e % 2;
        if (row >= p.M || col >= p.N) continue;
        const int64_t i = row * p.N + col;
        const float v = acc[mi][ni][e];
        if (p.out_f32) {
          float* o = static_cast<float*>(p.out);
          o[i] = p.beta != 0.0f ? v + p.beta * o[i] : v;
        } else {
          T* o = static_cast<T*>(p.out);
          o[i] = FromFloat<T>(p.beta != 0.0f ? v + p.beta * ToFloat(o[i]) : v);
        }
      }
}

template <typename T>
cudaError_t Launch(const InvariantGemmParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kBN - 1) / kBN),
                  static_cast<unsigned>((p.M + kBM - 1) / kBM));
  const bool vec = p.K % 8 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
  if (vec) {
    InvariantGemmKernel<T, true><<<grid, kThreads, 0, stream>>>(p);
  } else {
    InvariantGemmKernel<T, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

absl::Status InvariantGemm(DType dtype, const InvariantGemmParams& p, cudaStream_t stream) {
  constexpr int64_t kMax = int64_t{1} << 31;
  if (p.M < 0 || p.N < 0 || p.K < 0 || p.M >= kMax || p.N >= kMax || p.K >= kMax ||
      (p.M + kBM - 1) / kBM > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("InvariantGemm: M, N, K = ", p.M, ", ", p.N, ", ", p.K, " out of range"));
  }
  if (p.M == 0 || p.N == 0) return absl::OkStatus();
  if (p.out == nullptr || (p.K > 0 && (p.a == nullptr || p.w == nullptr))) {
    return absl::InvalidArgumentError("InvariantGemm: a null operand");
  }
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(Launch<__nv_bfloat16>(p, stream), "InvariantGemm");
    case DType::kFp16:
      return CudaStatus(Launch<__half>(p, stream), "InvariantGemm");
  }
  return absl::InvalidArgumentError("InvariantGemm: unsupported dtype");
}

}  // namespace banyan::kernels::cuda
