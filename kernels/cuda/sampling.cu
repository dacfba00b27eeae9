#include "kernels/cuda/sampling.cuh"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace banyan::kernels::cuda {
namespace {

template <int BLOCK>
cudaError_t SampleDispatched(const SampleParams& p, cudaStream_t stream) {
  static_assert(BLOCK % 32 == 0 && BLOCK >= 64 && BLOCK <= 1024, "whole warps, at most 1024");
  static_assert(sizeof(sampling::Shared<BLOCK>) <= 48 * 1024, "static shared memory limit");
  sampling::SampleKernel<BLOCK><<<p.num_specs, BLOCK, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

absl::Status SampleRows(const SampleParams& p, cudaStream_t stream) {
  if (p.num_specs == 0) return absl::OkStatus();
  if (p.vocab <= 0 || p.rows <= 0 || p.num_specs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SampleRows: vocab ", p.vocab, ", rows ",
                                                   p.rows, ", samples ", p.num_specs));
  }
  // 512 threads for large vocabularies (8 passes of 256 elements per thread at 128K); 256 below,
  // where more threads would sit idle in the warp-range passes.
  const cudaError_t err =
      p.vocab >= 16384 ? SampleDispatched<512>(p, stream) : SampleDispatched<256>(p, stream);
  return CudaStatus(err, "SampleRows");
}

}  // namespace banyan::kernels::cuda
