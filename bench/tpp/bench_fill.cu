#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "bench/tpp/bench_fill.h"

namespace banyan::bench {
namespace {

__device__ __forceinline__ uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void FillKernel(__nv_bfloat16* dst, size_t count, float stddev, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = Mix(seed * 0x100000001b3ull + i);
    const float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = ((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float n = sqrtf(-2.0f * __logf(u1)) * __cosf(6.2831853f * u2);
    dst[i] = __float2bfloat16_rn(n * stddev);
  }
}

__global__ void FillKvFp8Kernel(uint8_t* dst, size_t count, int64_t chunk_stride,
                                int64_t scale_offset, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (static_cast<int64_t>(i % chunk_stride) >= scale_offset) {
      dst[i] = static_cast<uint8_t>(static_cast<int8_t>(-3));
      continue;
    }
    const uint64_t h = Mix(seed * 0x100000001b3ull + i);
    const float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);
    const float u2 = ((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float n = sqrtf(-2.0f * __logf(u1)) * __cosf(6.2831853f * u2);
    dst[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(8.0f * n, __NV_SATFINITE, __NV_E4M3));
  }
}

}  // namespace

cudaError_t FillRandomKvFp8(void* dst, int64_t chunks, int64_t chunk_stride, int64_t scale_offset,
                            uint64_t seed, cudaStream_t stream) {
  FillKvFp8Kernel<<<132 * 16, 256, 0, stream>>>(static_cast<uint8_t*>(dst),
                                                 static_cast<size_t>(chunks * chunk_stride),
                                                 chunk_stride, scale_offset, seed);
  return cudaGetLastError();
}

cudaError_t FillRandomBf16(void* dst, size_t count, float stddev, uint64_t seed,
                           cudaStream_t stream) {
  FillKernel<<<132 * 16, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), count, stddev, seed);
  return cudaGetLastError();
}

}  // namespace banyan::bench
