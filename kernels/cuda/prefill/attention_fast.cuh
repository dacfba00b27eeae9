// Definitions of the fast-path launchers; included only by the per-dtype instantiation files.
#pragma once

#include "kernels/cuda/prefill/attention_launch.cuh"
#include "kernels/cuda/prefill/generic_attention.cuh"
#include "kernels/cuda/prefill/prefill_attention.cuh"

namespace banyan::kernels::cuda {

template <int HEAD_DIM, typename T, bool KV8>
cudaError_t PrefillMmaLaunch(const PrefillParams& p, cudaStream_t stream) {
  constexpr int kSmem = PrefillSmemBytes<HEAD_DIM, KV8>();
  static_assert(kSmem <= 227 * 1024, "shared memory per CTA");
  // Above 48 KB a kernel needs the opt-in; cheap enough to set on every launch.
  cudaError_t err = cudaFuncSetAttribute(PrefillMmaKernel<HEAD_DIM, T, KV8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(p.num_tiles), static_cast<unsigned>(p.kv.num_kv_heads));
  PrefillMmaKernel<HEAD_DIM, T, KV8><<<grid, kPrefillThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <int HEAD_DIM, typename T>
cudaError_t PrefillMmaDispatched(const PrefillParams& p, cudaStream_t stream) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "tensor-core prefill: head_dim 64 or 128");
  return KvIsFp8Host(p.kv) ? PrefillMmaLaunch<HEAD_DIM, T, true>(p, stream)
                           : PrefillMmaLaunch<HEAD_DIM, T, false>(p, stream);
}

template <int HEAD_DIM, typename T, bool KV8>
cudaError_t SharedPrefixMmaLaunch(const PrefillParams& p, cudaStream_t stream) {
  constexpr int kSmem = PrefillSmemBytes<HEAD_DIM, KV8>();
  cudaError_t err = cudaFuncSetAttribute(SharedPrefixMmaKernel<HEAD_DIM, T, KV8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(p.num_gtiles), static_cast<unsigned>(p.kv.num_kv_heads));
  SharedPrefixMmaKernel<HEAD_DIM, T, KV8><<<grid, kPrefillThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <int HEAD_DIM, typename T>
cudaError_t SharedPrefixMmaDispatched(const PrefillParams& p, cudaStream_t stream) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "tensor-core prefill: head_dim 64 or 128");
  return KvIsFp8Host(p.kv) ? SharedPrefixMmaLaunch<HEAD_DIM, T, true>(p, stream)
                           : SharedPrefixMmaLaunch<HEAD_DIM, T, false>(p, stream);
}

}  // namespace banyan::kernels::cuda
