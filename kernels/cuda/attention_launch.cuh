// The templated launchers of the fast attention paths (layer 2 of the kernel structure). Their
// explicit instantiations live in one .cu per dtype family (attention_bf16.cu,
// attention_fp16.cu); attention.cu holds the runtime dispatch point. (Paged decode's fast path
// is TPP's phase-2 kernel, launched through tpp::LaunchPhase2Items.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.h"

namespace banyan::kernels::cuda {

// HEAD_DIM 64 or 128.
template <int HEAD_DIM, typename T>
cudaError_t PrefillMmaDispatched(const PrefillParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
