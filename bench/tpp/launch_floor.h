// The launch floor of a decode attention call: a CUDA graph of empty kernels, chained the way
// the TPP kernels are (programmatic dependent launch), timed like a call. What a call costs
// before any of its kernels does work.
#pragma once

#include <cuda_runtime_api.h>

namespace banyan::bench {

// Enqueues `count` empty kernels on `stream`, each after the first with the programmatic
// stream serialization attribute (each kernel waits for its predecessor's grid).
cudaError_t LaunchEmptyKernels(int count, cudaStream_t stream);

}  // namespace banyan::bench
