// The per-(head_dim, dtype) launchers, instantiated one family per .cu file
// (tpp_d<HEAD_DIM>_<dtype>.cu) and called by the runtime dispatch in tpp_attention.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda::tpp {

// Launches phase 1 (when the plan has segments), phase 2 and the merge (when a row's private
// tail is split), in that order on `stream`. With `paged`, phase 1 is never launched.
template <int HEAD_DIM, DType DTYPE>
cudaError_t LaunchTppDispatched(const TppWorkPlan& plan, const TppRunArgs& args,
                                cudaStream_t stream);

// The kernels and grids LaunchTppDispatched would launch for `plan`, as graph node updates.
template <int HEAD_DIM, DType DTYPE>
cudaError_t TppNodeUpdatesDispatched(const TppWorkPlan& plan, const TppRunArgs& args,
                                     std::vector<KernelNodeUpdate>* updates);

// The same two for head dims without a compiled family (tpp_generic.cu): phase 2 on
// TppPhase2GenericKernel, then the merge; plans for them have no phase-1 items.
template <DType DTYPE>
cudaError_t LaunchTppGeneric(const TppWorkPlan& plan, const TppRunArgs& args,
                             cudaStream_t stream);
template <DType DTYPE>
cudaError_t TppNodeUpdatesGeneric(const TppWorkPlan& plan, const TppRunArgs& args,
                                  std::vector<KernelNodeUpdate>* updates);

}  // namespace banyan::kernels::cuda::tpp
