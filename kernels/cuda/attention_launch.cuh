// The templated launchers of the fast attention paths (layer 2 of the kernel structure). Their
// explicit instantiations live in one .cu per dtype family (attention_bf16.cu,
// attention_fp16.cu); attention.cu holds the runtime dispatch point.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.h"

namespace banyan::kernels::cuda {

// A kernel and its grid, as a launch would use them (for graph node updates).
struct LaunchShape {
  const void* func = nullptr;
  dim3 grid;
};

// HEAD_DIM 64 or 128; HPC q heads per CTA (1 for MHA, 4 for GQA). Launches the item kernel only
// (the merge kernel is launched by the dispatch point). With `describe`, launches nothing and
// says what it would launch.
template <int HEAD_DIM, int HPC, typename T>
cudaError_t PagedDecodeDispatched(const PagedDecodeParams& p, cudaStream_t stream,
                                  LaunchShape* describe = nullptr);

// HEAD_DIM 64 or 128.
template <int HEAD_DIM, typename T>
cudaError_t PrefillMmaDispatched(const PrefillParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
