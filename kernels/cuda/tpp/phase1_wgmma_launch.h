// Launcher of the wgmma phase-1 kernels (phase1_wgmma.cuh), compiled for sm_90a alone in
// tpp_phase1_sm90a.cu and called by the sm_90 launch code (launch.cuh) for plans whose
// p1_path() is a wgmma one.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda::tpp {

struct TppParams;

// Launches phase 1 on wgmma: grid (items, kv heads), M tile block_m (64 or 128). 128-query
// tiles run TppPhase1WgmmaWsKernel when `warp_specialized`, else TppPhase1WgmmaKernel<.., 2>;
// 64-query tiles always TppPhase1WgmmaKernel<.., 1>. cudaErrorNotSupported when head_dim /
// block_m has no kernel. (TppPhase1WgmmaAvailable, tpp_attention.h, is defined beside it.)
// The kernel LaunchPhase1Wgmma launches for these arguments (null when there is none); kv8: the
// instantiation for an FP8 KV cache (LaunchPhase1Wgmma picks it from p.kv).
const void* Phase1WgmmaKernel(int head_dim, DType dtype, int block_m, bool warp_specialized,
                              bool kv8);

cudaError_t LaunchPhase1Wgmma(int head_dim, DType dtype, int block_m, bool warp_specialized,
                              const TppParams& p, dim3 grid, cudaStream_t stream);

}  // namespace banyan::kernels::cuda::tpp
