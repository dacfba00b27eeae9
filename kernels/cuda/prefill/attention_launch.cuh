// The templated launchers of the fast attention paths (layer 2 of the kernel structure). Their
// explicit instantiations live in one .cu per dtype family (attention_bf16.cu,
// attention_fp16.cu); attention.cu holds the runtime dispatch point.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/prefill/attention.h"

namespace banyan::kernels::cuda {

// A kernel and its grid, as a launch would use them (for graph node updates).
struct LaunchShape {
  const void* func = nullptr;
  dim3 grid;
};

// HEAD_DIM 64 or 128.
template <int HEAD_DIM, typename T>
cudaError_t PrefillMmaDispatched(const PrefillParams& p, cudaStream_t stream);
// The deterministic mode's attention over its pieces: the shared-prefix read
// (SharedPrefixMmaKernel, p.num_gtiles > 0), the items (InvariantMmaKernel), the merge
// (InvariantMergeKernel, p.num_merge > 0), in that order on `stream`.
template <int HEAD_DIM, typename T>
cudaError_t InvariantPiecesDispatched(const PrefillParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
