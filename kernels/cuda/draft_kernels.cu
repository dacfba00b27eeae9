#include "kernels/cuda/draft_kernels.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_utils.cuh"

namespace banyan::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void DraftInputKernel(const __grid_constant__ DraftInputParams p) {
  const int node = blockIdx.x;
  const int s = p.node_sample[node];
  const T* h = static_cast<const T*>(p.hidden) + static_cast<int64_t>(p.hidden_row[s]) * p.dim;
  const int64_t width = static_cast<int64_t>(p.dim) * (1 + p.path_len);
  T* u = static_cast<T*>(p.u) + node * width;
  float* z = p.z + static_cast<int64_t>(node) * p.dim;
  const int32_t* path = p.paths + static_cast<int64_t>(node) * p.path_stride;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) {
    u[i] = h[i];
    z[i] = ToFloat(h[i]) + p.fc2_bias[i];
  }
  for (int j = 0; j < p.path_len; ++j) {
    const T* e = static_cast<const T*>(p.embeddings) + static_cast<int64_t>(path[j]) * p.dim;
    T* dst = u + static_cast<int64_t>(j + 1) * p.dim;
    for (int i = threadIdx.x; i < p.dim; i += blockDim.x) dst[i] = e[i];
  }
}

template <typename T>
__global__ void DraftBiasSiluKernel(const __grid_constant__ DraftBiasSiluParams p) {
  const int64_t n = static_cast<int64_t>(p.rows) * p.n;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const float x = p.a[e] + p.bias[e % p.n];
    static_cast<T*>(p.out)[e] = FromFloat<T>(x / (1.0f + expf(-x)));
  }
}

template <typename T>
__global__ void DraftNarrowKernel(const float* x, T* out, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = FromFloat<T>(x[e]);
  }
}

// The order of the host TopK: larger value first, then lower id; NaN counts as -inf.
__device__ __forceinline__ bool Before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

__global__ void DraftTopBKernel(const __grid_constant__ DraftTopBParams p) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  __shared__ int picked[kDraftMaxBranching];
  const int row = blockIdx.x;
  const float* l = p.logits + static_cast<int64_t>(row) * p.vocab;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Pass j finds the best element strictly after pick j - 1 in the order.
  float prev_v = INFINITY;
  int prev_i = -1;
  for (int j = 0; j < p.b; ++j) {
    float best = -INFINITY;
    int best_i = INT_MAX;
    for (int i = threadIdx.x; i < p.vocab; i += blockDim.x) {
      float v = l[i];
      if (isnan(v)) v = -INFINITY;
      if (Before(prev_v, prev_i, v, i) && Before(v, i, best, best_i)) {
        best = v;
        best_i = i;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
      const int i2 = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (Before(v2, i2, best, best_i)) {
        best = v2;
        best_i = i2;
      }
    }
    if (lane == 0) {
      sv[warp] = best;
      si[warp] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w) {
        if (Before(sv[w], si[w], best, best_i)) {
          best = sv[w];
          best_i = si[w];
        }
      }
      picked[j] = best_i;
      sv[0] = best;
    }
    __syncthreads();
    prev_v = sv[0];
    prev_i = picked[j];
    __syncthreads();  // sv is rewritten by the next pass
  }
  const int32_t* path = p.paths + static_cast<int64_t>(row) * p.path_stride;
  for (int j = threadIdx.x; j < p.b; j += blockDim.x) {
    const int64_t child = static_cast<int64_t>(row) * p.b + j;
    p.tokens[child] = picked[j];
    if (p.node_sample_next != nullptr) p.node_sample_next[child] = p.node_sample[row];
  }
  if (p.paths_next != nullptr) {
    for (int e = threadIdx.x; e < p.b * (p.path_len + 1); e += blockDim.x) {
      const int j = e / (p.path_len + 1), k = e % (p.path_len + 1);
      const int64_t child = static_cast<int64_t>(row) * p.b + j;
      p.paths_next[child * p.path_stride + k] = k < p.path_len ? path[k] : picked[j];
    }
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

}  // namespace

absl::Status DraftHeadInput(DType dtype, const DraftInputParams& p, cudaStream_t stream) {
  if (p.nodes < 0 || p.dim <= 0 || p.path_len < 0 || p.path_len > p.path_stride) {
    return absl::InvalidArgumentError(absl::StrCat("DraftHeadInput: bad shape (nodes ", p.nodes,
                                                   ", dim ", p.dim, ", path ", p.path_len, ")"));
  }
  if (p.nodes == 0) return absl::OkStatus();
  if (dtype == DType::kBf16) {
    DraftInputKernel<__nv_bfloat16><<<p.nodes, kThreads, 0, stream>>>(p);
  } else {
    DraftInputKernel<__half><<<p.nodes, kThreads, 0, stream>>>(p);
  }
  return CudaStatus(cudaGetLastError(), "DraftHeadInput");
}

absl::Status DraftBiasSilu(DType dtype, const DraftBiasSiluParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.rows) * p.n;
  if (n == 0) return absl::OkStatus();
  if (dtype == DType::kBf16) {
    DraftBiasSiluKernel<__nv_bfloat16><<<GridFor(n), kThreads, 0, stream>>>(p);
  } else {
    DraftBiasSiluKernel<__half><<<GridFor(n), kThreads, 0, stream>>>(p);
  }
  return CudaStatus(cudaGetLastError(), "DraftBiasSilu");
}

absl::Status DraftNarrow(DType dtype, const float* x, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (dtype == DType::kBf16) {
    DraftNarrowKernel<<<GridFor(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(out), n);
  } else {
    DraftNarrowKernel<<<GridFor(n), kThreads, 0, stream>>>(x, static_cast<__half*>(out), n);
  }
  return CudaStatus(cudaGetLastError(), "DraftNarrow");
}

absl::Status DraftTopB(const DraftTopBParams& p, cudaStream_t stream) {
  if (p.b < 1 || p.b > kDraftMaxBranching || p.b > p.vocab || p.path_len < 0 ||
      (p.paths_next != nullptr && p.path_len + 1 > p.path_stride)) {
    return absl::InvalidArgumentError(absl::StrCat("DraftTopB: branching ", p.b, " for vocab ",
                                                   p.vocab, ", path ", p.path_len, " of ",
                                                   p.path_stride));
  }
  if (p.rows == 0) return absl::OkStatus();
  DraftTopBKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return CudaStatus(cudaGetLastError(), "DraftTopB");
}

}  // namespace banyan::kernels::cuda
