// Definitions of the fast-path launchers; included only by the per-dtype instantiation files.
#pragma once

#include "kernels/cuda/prefill/attention_launch.cuh"
#include "kernels/cuda/prefill/generic_attention.cuh"
#include "kernels/cuda/prefill/prefill_attention.cuh"

namespace banyan::kernels::cuda {

// One launch of a kernel of prefill_attention.cuh over `ctas` x kv heads CTAs: the shared memory
// of PrefillSmemBytes (above 48 KB a kernel needs the opt-in; cheap enough to set on every launch).
template <int HEAD_DIM, bool KV8>
cudaError_t LaunchPrefillMma(void (*kernel)(PrefillParams), int32_t ctas, const PrefillParams& p,
                             cudaStream_t stream) {
  constexpr int kSmem = PrefillSmemBytes<HEAD_DIM, KV8>();
  static_assert(kSmem <= 227 * 1024, "shared memory per CTA");
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.kv.num_kv_heads));
  kernel<<<grid, kPrefillThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <int HEAD_DIM, typename T>
cudaError_t PrefillMmaDispatched(const PrefillParams& p, cudaStream_t stream) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "tensor-core prefill: head_dim 64 or 128");
  return KvIsFp8Host(p.kv)
             ? LaunchPrefillMma<HEAD_DIM, true>(PrefillMmaKernel<HEAD_DIM, T, true>, p.num_tiles,
                                                p, stream)
             : LaunchPrefillMma<HEAD_DIM, false>(PrefillMmaKernel<HEAD_DIM, T, false>,
                                                 p.num_tiles, p, stream);
}

template <int HEAD_DIM, typename T>
cudaError_t SharedPrefixMmaDispatched(const PrefillParams& p, cudaStream_t stream) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "tensor-core prefill: head_dim 64 or 128");
  return KvIsFp8Host(p.kv)
             ? LaunchPrefillMma<HEAD_DIM, true>(SharedPrefixMmaKernel<HEAD_DIM, T, true>,
                                                p.num_gtiles, p, stream)
             : LaunchPrefillMma<HEAD_DIM, false>(SharedPrefixMmaKernel<HEAD_DIM, T, false>,
                                                 p.num_gtiles, p, stream);
}

}  // namespace banyan::kernels::cuda
