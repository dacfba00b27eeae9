// The wgmma prefill kernel (sm_90a) for head_dim 64 / 128, bf16 / fp16, 16-bit and FP8 caches,
// and its launcher.
// Built into banyan_prefill_sm90a with CUDA_ARCHITECTURES 90a.
#include "kernels/cuda/prefill/prefill_wgmma.cuh"
#include "kernels/cuda/prefill/prefill_wgmma_launch.h"
#include "kernels/cuda/tpp/tpp_attention.h"  // TppPhase1WgmmaAvailable: the same device check

namespace banyan::kernels::cuda {
namespace {

template <int HEAD_DIM, typename DType, bool KV8>
cudaError_t Launch(const PrefillParams& p, cudaStream_t stream) {
  using Cfg = PrefillWgmmaConfig<HEAD_DIM, KV8>;
  static_assert(Cfg::kSmemBytes <= 227 * 1024, "shared memory per CTA");
  const auto kernel = PrefillWgmmaKernel<HEAD_DIM, DType, KV8>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.num_tiles), static_cast<unsigned>(p.kv.num_kv_heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <int HEAD_DIM, typename DType>
cudaError_t ForKv(const PrefillParams& p, cudaStream_t stream) {
  return KvIsFp8Host(p.kv) ? Launch<HEAD_DIM, DType, true>(p, stream)
                           : Launch<HEAD_DIM, DType, false>(p, stream);
}

template <int HEAD_DIM>
cudaError_t ForDType(DType dtype, const PrefillParams& p, cudaStream_t stream) {
  return dtype == DType::kBf16 ? ForKv<HEAD_DIM, __nv_bfloat16>(p, stream)
                               : ForKv<HEAD_DIM, __half>(p, stream);
}

}  // namespace

bool PrefillWgmmaAvailable() { return tpp::TppPhase1WgmmaAvailable(); }

cudaError_t LaunchPrefillWgmma(DType dtype, const PrefillParams& p, cudaStream_t stream) {
  switch (p.kv.head_dim) {
    case 64:
      return ForDType<64>(dtype, p, stream);
    case 128:
      return ForDType<128>(dtype, p, stream);
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace banyan::kernels::cuda
