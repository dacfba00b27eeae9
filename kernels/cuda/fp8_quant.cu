#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

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
    QuantizeRowsFp8Kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(p.in), stride, p.rows, p.cols, p.group,
        static_cast<int32_t>(groups), group_ld, p.codes, p.scales);
  } else {
    QuantizeRowsFp8Kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const __half*>(p.in), stride, p.rows, p.cols, p.group,
        static_cast<int32_t>(groups), group_ld, p.codes, p.scales);
  }
  return CudaStatus(cudaGetLastError(), "QuantizeRowsFp8Kernel");
}

}  // namespace banyan::kernels::cuda
