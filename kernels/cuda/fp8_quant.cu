#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_quant.h"

namespace banyan::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per (row, group): the group's amax (a strided pass and a block reduction), its
// scale, then its codes (a second pass; the group is re-read from L2).
template <typename T>
__global__ void QuantizeRowsFp8Kernel(const T* __restrict__ in, int64_t in_stride, int64_t rows,
                                      int64_t cols, int32_t group, int32_t groups, int64_t group_ld,
                                      uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int64_t row = blockIdx.x;
  const int64_t begin = int64_t{blockIdx.y} * group;
  const int64_t end = min(cols, begin + group);
  float* scale_at =
      group_ld > 0 ? scales + blockIdx.y * group_ld + row : scales + row * groups + blockIdx.y;
  if (row >= rows) {  // a padding row: zero codes, scale 1
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) codes[row * cols + i] = 0;
    if (threadIdx.x == 0) *scale_at = 1.0f;
    return;
  }
  const T* x = in + row * in_stride;
  float amax = 0.0f;  // fmaxf skips NaN: a NaN element leaves the scale to the others
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    amax = fmaxf(amax, fabsf(ToFloat(x[i])));
  }
  __shared__ float warp_max[kThreads / 32];
  amax = WarpMax(amax);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float m = threadIdx.x < blockDim.x / 32 ? warp_max[threadIdx.x] : 0.0f;
    m = WarpMax(m);
    if (threadIdx.x == 0) warp_max[0] = m;
  }
  __syncthreads();
  float scale = __fdiv_rn(warp_max[0], kFp8E4M3Max);
  if (!(scale > 0.0f)) scale = 1.0f;
  if (threadIdx.x == 0) *scale_at = scale;
  uint8_t* out = codes + row * cols;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float q = __fdiv_rn(ToFloat(x[i]), scale);
    out[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
  }
}

// Per token, 16-byte loads: one block per row, each thread holding its kMaxVec vectors of 8
// elements in registers between the amax and the codes (one read of the row), codes stored 8 at
// a time. For rows of cols % 8 == 0 whose vectors fit kThreadsV x kMaxVec; the rule is the one
// above, element for element.
constexpr int kMaxVec = 8;

template <typename T>
__device__ __forceinline__ uint2 CodesOf8(const uint4& v, float scale) {
  const T* e = reinterpret_cast<const T*>(&v);
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    lo |= uint32_t{__nv_cvt_float_to_fp8(__fdiv_rn(ToFloat(e[j]), scale), __NV_SATFINITE,
                                         __NV_E4M3)} << (8 * j);
    hi |= uint32_t{__nv_cvt_float_to_fp8(__fdiv_rn(ToFloat(e[j + 4]), scale), __NV_SATFINITE,
                                         __NV_E4M3)} << (8 * j);
  }
  return make_uint2(lo, hi);
}

template <typename T, int kThreadsV>
__global__ void __launch_bounds__(kThreadsV)
    QuantizeTokensFp8VecKernel(const T* __restrict__ in, int64_t in_stride, int64_t rows,
                               int64_t cols, uint8_t* __restrict__ codes,
                               float* __restrict__ scales) {
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / 8;
  uint2* out = reinterpret_cast<uint2*>(codes + row * cols);
  if (row >= rows) {  // a padding row: zero codes, scale 1
    for (int64_t i = threadIdx.x; i < nvec; i += kThreadsV) out[i] = make_uint2(0, 0);
    if (threadIdx.x == 0) scales[row] = 1.0f;
    return;
  }
  const uint4* x = reinterpret_cast<const uint4*>(in + row * in_stride);
  uint4 v[kMaxVec];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kThreadsV;
    if (i < nvec) {
      v[k] = __ldg(x + i);
      const T* e = reinterpret_cast<const T*>(&v[k]);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(ToFloat(e[j])));
    }
  }
  __shared__ float warp_max[kThreadsV / 32];
  amax = WarpMax(amax);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float m = threadIdx.x < kThreadsV / 32 ? warp_max[threadIdx.x] : 0.0f;
    m = WarpMax(m);
    if (threadIdx.x == 0) warp_max[0] = m;
  }
  __syncthreads();
  float scale = __fdiv_rn(warp_max[0], kFp8E4M3Max);
  if (!(scale > 0.0f)) scale = 1.0f;
  if (threadIdx.x == 0) scales[row] = scale;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kThreadsV;
    if (i < nvec) out[i] = CodesOf8<T>(v[k], scale);
  }
}

// Per 128 elements, 8-byte loads: a warp per group (4 elements a lane), 8 groups a block. For
// rows of cols % 128 == 0.
template <typename T>
__global__ void __launch_bounds__(256)
    QuantizeGroupsFp8VecKernel(const T* __restrict__ in, int64_t in_stride, int64_t rows,
                               int64_t cols, int32_t groups, int64_t group_ld,
                               uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int64_t row = blockIdx.x;
  const int32_t g = blockIdx.y * 8 + (threadIdx.x >> 5);
  if (g >= groups) return;
  const int lane = threadIdx.x & 31;
  float* scale_at = group_ld > 0 ? scales + g * group_ld + row : scales + row * groups + g;
  uint32_t* out = reinterpret_cast<uint32_t*>(codes + row * cols + int64_t{g} * kFp8Group) + lane;
  if (row >= rows) {
    *out = 0;
    if (lane == 0) *scale_at = 1.0f;
    return;
  }
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(in + row * in_stride +
                                                       int64_t{g} * kFp8Group) + lane);
  const T* e = reinterpret_cast<const T*>(&v);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(ToFloat(e[j])));
  amax = WarpMax(amax);
  float scale = __fdiv_rn(amax, kFp8E4M3Max);
  if (!(scale > 0.0f)) scale = 1.0f;
  if (lane == 0) *scale_at = scale;
  uint32_t c = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    c |= uint32_t{__nv_cvt_float_to_fp8(__fdiv_rn(ToFloat(e[j]), scale), __NV_SATFINITE,
                                        __NV_E4M3)} << (8 * j);
  }
  *out = c;
}

// Launches the vectorized kernels where the shape and alignment allow; false: not launched.
template <typename T>
bool LaunchVec(const QuantizeFp8Params& p, int64_t all_rows, int64_t stride, int64_t groups,
               int64_t group_ld, cudaStream_t stream) {
  const auto in_addr = reinterpret_cast<uintptr_t>(p.in);
  const auto codes_addr = reinterpret_cast<uintptr_t>(p.codes);
  if (p.group == p.cols) {
    const int64_t nvec = p.cols / 8;
    if (p.cols % 8 != 0 || stride % 8 != 0 || in_addr % 16 != 0 || codes_addr % 8 != 0) {
      return false;
    }
    if (nvec <= 256 * kMaxVec) {
      QuantizeTokensFp8VecKernel<T, 256><<<static_cast<unsigned>(all_rows), 256, 0, stream>>>(
          static_cast<const T*>(p.in), stride, p.rows, p.cols, p.codes, p.scales);
    } else if (nvec <= 1024 * kMaxVec) {
      QuantizeTokensFp8VecKernel<T, 1024><<<static_cast<unsigned>(all_rows), 1024, 0, stream>>>(
          static_cast<const T*>(p.in), stride, p.rows, p.cols, p.codes, p.scales);
    } else {
      return false;
    }
    return true;
  }
  if (p.cols % kFp8Group != 0 || stride % 4 != 0 || in_addr % 8 != 0 || codes_addr % 4 != 0) {
    return false;
  }
  const dim3 grid(static_cast<unsigned>(all_rows), static_cast<unsigned>((groups + 7) / 8));
  QuantizeGroupsFp8VecKernel<T><<<grid, 256, 0, stream>>>(
      static_cast<const T*>(p.in), stride, p.rows, p.cols, static_cast<int32_t>(groups),
      group_ld, p.codes, p.scales);
  return true;
}

}  // namespace

absl::Status QuantizeRowsFp8(DType dtype, const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.in == nullptr || p.codes == nullptr || p.scales == nullptr || p.rows < 0 || p.cols <= 0) {
    return absl::InvalidArgumentError("QuantizeRowsFp8: empty input or output");
  }
  if (p.group != p.cols && p.group != kFp8Group) {
    return absl::InvalidArgumentError("QuantizeRowsFp8: group must be cols or 128");
  }
  const int64_t all_rows = std::max(p.rows, p.pad_rows);
  if (all_rows == 0) return absl::OkStatus();
  const int64_t groups = (p.cols + p.group - 1) / p.group;
  if (groups > 65535 || all_rows > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError("QuantizeRowsFp8: too large for one launch");
  }
  const dim3 grid(static_cast<unsigned>(all_rows), static_cast<unsigned>(groups));
  const int64_t stride = p.in_stride > 0 ? p.in_stride : p.cols;
  const int64_t group_ld = p.group_major ? all_rows : 0;
  if (p.in_f32) {
    QuantizeRowsFp8Kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float*>(p.in), stride, p.rows, p.cols, p.group,
        static_cast<int32_t>(groups), group_ld, p.codes, p.scales);
  } else if (dtype == DType::kBf16) {
    if (LaunchVec<__nv_bfloat16>(p, all_rows, stride, groups, group_ld, stream)) {
      return CudaStatus(cudaGetLastError(), "QuantizeRowsFp8 (vectorized)");
    }
    QuantizeRowsFp8Kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(p.in), stride, p.rows, p.cols, p.group,
        static_cast<int32_t>(groups), group_ld, p.codes, p.scales);
  } else {
    if (LaunchVec<__half>(p, all_rows, stride, groups, group_ld, stream)) {
      return CudaStatus(cudaGetLastError(), "QuantizeRowsFp8 (vectorized)");
    }
    QuantizeRowsFp8Kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const __half*>(p.in), stride, p.rows, p.cols, p.group,
        static_cast<int32_t>(groups), group_ld, p.codes, p.scales);
  }
  return CudaStatus(cudaGetLastError(), "QuantizeRowsFp8Kernel");
}

}  // namespace banyan::kernels::cuda
