// Launcher of the wgmma prefill kernel (prefill_wgmma.cuh), compiled for sm_90a alone in
// banyan_prefill_sm90a; PrefillAttention (attention.cu) calls it for work lists of
// kPrefillWgmmaBlockM-row tiles (PrefillTileRows).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill/attention.h"

namespace banyan::kernels::cuda {

// True when the current device runs sm_90a kernels (compute capability 9.0).
bool PrefillWgmmaAvailable();

// Grid (tiles, kv heads). cudaErrorNotSupported for a head_dim other than 64 / 128.
cudaError_t LaunchPrefillWgmma(DType dtype, const PrefillParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
