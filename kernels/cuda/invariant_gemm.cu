// InvariantGemm (invariant_gemm.h): mma.sync m16n8k16 tiles, K through a cp.async ring.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/invariant_gemm.h"
#include "kernels/cuda/mma.cuh"

namespace banyan::kernels::cuda {
namespace {

// A CTA tile of BM x BN outputs, WARPS_M x WARPS_N warps of (BM / WARPS_M) x (BN / WARPS_N)
// each, K in slices of BK through STAGES shared-memory buffers. Every configuration runs the same
// sequence of mma.sync k16 steps for an output element (k = 0, 16, 32, ... into one accumulator),
// so which one a product uses never changes a bit of it; the launch picks by M (few rows: narrow
// tiles, more CTAs and a deeper pipeline, since the weights' streaming is then the whole cost).
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int BK_, int STAGES_>
struct GemmConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int MI = BM / WARPS_M / 16;  // m16 tiles per warp
  static constexpr int NI = BN / WARPS_N / 8;   // n8 tiles per warp (pairs: one ldmatrix.x4)
  static constexpr int kLd =
      BK + 8;  // row stride: 16 bytes past a multiple of 128, no bank conflicts
  static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0 && BK % 16 == 0, "tile shape");
  static constexpr int kSmemBytes = STAGES * (BM + BN) * kLd * 2;
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory");
};
using SmallM = GemmConfig<16, 32, 1, 2, 64, 6>;   // M <= 16
using MediumM = GemmConfig<32, 32, 2, 2, 64, 5>;  // M <= 32
using LargeM = GemmConfig<64, 64, 2, 2, 32, 3>;  // M <= 256
using HugeM = GemmConfig<128, 128, 2, 4, 32, 2>;  // M > 256: 8 warps of 64 x 32

// Rows [row0, row0 + ROWS) x K [k0, k0 + BK) of src ([rows, K] row-major) into dst (row stride
// LD), zero outside.
template <typename T, bool VEC, int ROWS, int BK, int LD, int THREADS>
__device__ __forceinline__ void LoadTile(T* dst, const T* src, int64_t rows, int64_t row0,
                                         int64_t K, int64_t k0) {
  for (int v = threadIdx.x; v < ROWS * (BK / 8); v += THREADS) {
    const int r = v / (BK / 8), c = (v % (BK / 8)) * 8;
    const int64_t row = row0 + r, k = k0 + c;
    T* d = dst + r * LD + c;
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

template <typename T, bool VEC, typename C>
__global__ void __launch_bounds__(C::kThreads)
    InvariantGemmKernel(const __grid_constant__ InvariantGemmParams p) {
  constexpr int LD = C::kLd;
  __shared__ alignas(16) T As[C::STAGES][C::BM * LD];
  __shared__ alignas(16) T Bs[C::STAGES][C::BN * LD];
  const T* a = static_cast<const T*>(p.a);
  const T* w = static_cast<const T*>(p.w);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * C::BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * C::BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / C::WARPS_N) * (C::BM / C::WARPS_M);
  const int wn = (warp % C::WARPS_N) * (C::BN / C::WARPS_N);
  float acc[C::MI][C::NI][4];
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int j = 0; j < C::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int nk = static_cast<int>((p.K + C::BK - 1) / C::BK);
  auto load = [&](int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * C::BK;
    LoadTile<T, VEC, C::BM, C::BK, LD, C::kThreads>(As[kt % C::STAGES], a, p.M, m0, p.K, k0);
    LoadTile<T, VEC, C::BN, C::BK, LD, C::kThreads>(Bs[kt % C::STAGES], w, p.N, n0, p.K, k0);
  };
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < nk) load(s);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    CpAsyncWait<C::STAGES - 2>();  // slice kt has landed
    __syncthreads();               // and every warp is done with the stage the prefetch reuses
    if (kt + C::STAGES - 1 < nk) load(kt + C::STAGES - 1);
    CpAsyncCommit();
    const T* as = As[kt % C::STAGES];
    const T* bs = Bs[kt % C::STAGES];
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 16) {
      uint32_t af[C::MI][4];
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi) {
        LdMatrixX4(af[mi], as + (wm + mi * 16 + lane % 16) * LD + kk + (lane / 16) * 8);
      }
#pragma unroll
      for (int nj = 0; nj < C::NI / 2; ++nj) {
        uint32_t bf[4];  // n-tile 2 nj: bf[0..1], 2 nj + 1: bf[2..3]
        LdMatrixX4(
            bf, bs + (wn + nj * 16 + lane % 8 + (lane / 16) * 8) * LD + kk + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi) {
          Mma16816<T>(acc[mi][2 * nj], af[mi], bf[0], bf[1]);
          Mma16816<T>(acc[mi][2 * nj + 1], af[mi], bf[2], bf[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni)
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

template <typename T, typename C>
cudaError_t LaunchConfig(const InvariantGemmParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + C::BN - 1) / C::BN),
                  static_cast<unsigned>((p.M + C::BM - 1) / C::BM));
  const bool vec = p.K % 8 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
  if (vec) {
    InvariantGemmKernel<T, true, C><<<grid, C::kThreads, 0, stream>>>(p);
  } else {
    InvariantGemmKernel<T, false, C><<<grid, C::kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Launch(const InvariantGemmParams& p, cudaStream_t stream) {
  if (p.M <= SmallM::BM) return LaunchConfig<T, SmallM>(p, stream);
  if (p.M <= MediumM::BM) return LaunchConfig<T, MediumM>(p, stream);
  if (p.M <= 256) return LaunchConfig<T, LargeM>(p, stream);
  return LaunchConfig<T, HugeM>(p, stream);
}

}  // namespace

absl::Status InvariantGemm(DType dtype, const InvariantGemmParams& p, cudaStream_t stream) {
  constexpr int64_t kMax = int64_t{1} << 31;
  if (p.M < 0 || p.N < 0 || p.K < 0 || p.M >= kMax || p.N >= kMax || p.K >= kMax ||
      (p.M + 15) / 16 > 65535) {
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
