// Fast-path instantiations, fp16.
#include "kernels/cuda/attention_fast.cuh"

namespace banyan::kernels::cuda {

template cudaError_t PagedDecodeDispatched<64, 1, __half>(const PagedDecodeParams&, cudaStream_t,
                                                                 LaunchShape*);
template cudaError_t PagedDecodeDispatched<64, 4, __half>(const PagedDecodeParams&, cudaStream_t,
                                                                 LaunchShape*);
template cudaError_t PagedDecodeDispatched<128, 1, __half>(const PagedDecodeParams&, cudaStream_t,
                                                                 LaunchShape*);
template cudaError_t PagedDecodeDispatched<128, 4, __half>(const PagedDecodeParams&, cudaStream_t,
                                                                 LaunchShape*);
template cudaError_t PrefillMmaDispatched<64, __half>(const PrefillParams&, cudaStream_t);
template cudaError_t PrefillMmaDispatched<128, __half>(const PrefillParams&, cudaStream_t);

}  // namespace banyan::kernels::cuda
