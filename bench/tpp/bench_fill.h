// Fills device memory with pseudo-random bf16 values (about N(0, stddev)), on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace banyan::bench {

cudaError_t FillRandomBf16(void* dst, size_t count, float stddev, uint64_t seed,
                           cudaStream_t stream);

}  // namespace banyan::bench
