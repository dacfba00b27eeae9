// Fills device memory with pseudo-random bf16 values (about N(0, stddev)), on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace banyan::bench {

cudaError_t FillRandomBf16(void* dst, size_t count, float stddev, uint64_t seed,
                           cudaStream_t stream);

// An FP8 KV cache (kernels/kv_fp8.h) of `chunks` chunks of chunk_stride bytes: codes of about
// N(0, 1) values (E4M3 of N(0, 8) with exponent -3) before scale_offset in each chunk, the
// exponents (-3) after it.
cudaError_t FillRandomKvFp8(void* dst, int64_t chunks, int64_t chunk_stride, int64_t scale_offset,
                            uint64_t seed, cudaStream_t stream);

}  // namespace banyan::bench
