#include "kernels/cuda/weight_kernels.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr int64_t kStreamElements = int64_t{1} << 20;  // elements per splitmix64 stream

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
}

__device__ __forceinline__ uint64_t SplitMixOutput(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// dummy_weights.cc's Mix(a, b): one splitmix64 step from state a ^ (b * constant).
__device__ __forceinline__ uint64_t Mix(uint64_t a, uint64_t b) {
  return SplitMixOutput((a ^ (b * 0xd1b54a32d192ed03ull)) + kGolden);
}

__device__ __forceinline__ float DummyValue(const DummyFillParams& p, int64_t e) {
  const uint64_t s0 = Mix(Mix(p.seed, static_cast<uint64_t>(p.slot) + 1),
                          static_cast<uint64_t>(e / kStreamElements) + 1);
  const uint64_t r =
      SplitMixOutput(s0 + static_cast<uint64_t>(e % kStreamElements + 1) * kGolden);
  const uint64_t isum = (r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
  const float sum = __fadd_rn(static_cast<float>(isum), 2.0f);
  constexpr float kScale = 1.7320508f / 65536.0f;
  const float normal = __fmul_rn(__fadd_rn(sum, -2.0f * 65536.0f), kScale);
  return __fadd_rn(p.offset, __fmul_rn(p.scale, normal));
}

template <typename T>
__global__ void DummyFillKernel(const __grid_constant__ DummyFillParams p) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = DummyValue(p, e);
    if (p.to_f32) {
      static_cast<float*>(p.dst)[e] = v;
    } else {
      static_cast<T*>(p.dst)[e] = FromFloat<T>(v);
    }
  }
}

template <typename T>
__global__ void ConvertKernel(const float* __restrict__ src, int64_t n, T* __restrict__ dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = FromFloat<T>(src[e]);
  }
}

template <typename T>
cudaError_t ConvertDispatched(const float* src, int64_t n, void* dst, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  ConvertKernel<T><<<GridFor(n), kThreads, 0, s>>>(src, n, static_cast<T*>(dst));
  return cudaGetLastError();
}

template <typename T>
cudaError_t DummyFillDispatched(const DummyFillParams& p, cudaStream_t s) {
  if (p.n == 0) return cudaSuccess;
  DummyFillKernel<T><<<GridFor(p.n), kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

absl::Status ConvertFromF32(DType dtype, const float* src, int64_t n, void* dst,
                            cudaStream_t stream) {
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(ConvertDispatched<__nv_bfloat16>(src, n, dst, stream), "ConvertFromF32");
    case DType::kFp16:
      return CudaStatus(ConvertDispatched<__half>(src, n, dst, stream), "ConvertFromF32");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ConvertFromF32: unsupported dtype ", static_cast<int>(dtype)));
}

absl::Status DummyFill(DType dtype, const DummyFillParams& p, cudaStream_t stream) {
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(DummyFillDispatched<__nv_bfloat16>(p, stream), "DummyFill");
    case DType::kFp16:
      return CudaStatus(DummyFillDispatched<__half>(p, stream), "DummyFill");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DummyFill: unsupported dtype ", static_cast<int>(dtype)));
}

}  // namespace banyan::kernels::cuda
