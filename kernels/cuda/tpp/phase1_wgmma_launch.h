// Launcher of the wgmma phase-1 kernel (phase1_wgmma.cuh), compiled for sm_90a alone in
// tpp_phase1_sm90a.cu and called by the sm_90 launch code (launch.cuh) when the device is an
// sm_90 part (H100 / H200) and TppOptions::p1_wgmma allows it.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda::tpp {

struct TppParams;

// True when this build holds the sm_90a kernels and the current device runs them (compute
// capability 9.0). Cached per device.
bool Phase1WgmmaAvailable();

// Which wgmma kernel runs 128-query tiles (64-query tiles always run TppPhase1WgmmaKernel<.., 1>).
enum class Phase1Variant {
  kWarpSpecialized,  // TppPhase1WgmmaWsKernel
  kCooperative,      // TppPhase1WgmmaKernel<.., 2>: no producer, one barrier per tile
};

// Launches phase 1 on wgmma: grid (items, kv heads), M tile block_m (64 or 128).
// cudaErrorNotSupported when head_dim / block_m has no kernel or the kernels are not built.
cudaError_t LaunchPhase1Wgmma(int head_dim, KvDType dtype, int block_m, Phase1Variant variant,
                              const TppParams& p, dim3 grid, cudaStream_t stream);

}  // namespace banyan::kernels::cuda::tpp
