// Fast-path instantiations, bf16.
#include "kernels/cuda/prefill/attention_fast.cuh"

namespace banyan::kernels::cuda {

template cudaError_t PrefillMmaDispatched<64, __nv_bfloat16>(const PrefillParams&, cudaStream_t);
template cudaError_t PrefillMmaDispatched<128, __nv_bfloat16>(const PrefillParams&, cudaStream_t);
template cudaError_t InvariantPiecesDispatched<64, __nv_bfloat16>(const PrefillParams&, cudaStream_t);
template cudaError_t InvariantPiecesDispatched<128, __nv_bfloat16>(const PrefillParams&, cudaStream_t);

}  // namespace banyan::kernels::cuda
