// Definitions of the fast-path launchers; included only by the per-dtype instantiation files.
#pragma once

#include "kernels/cuda/prefill/attention_launch.cuh"
#include "kernels/cuda/prefill/generic_attention.cuh"
#include "kernels/cuda/prefill/prefill_attention.cuh"

namespace banyan::kernels::cuda {

// One launch of a kernel of prefill_attention.cuh over `ctas` x kv heads CTAs: the shared memory
// of PrefillSmemBytes (above 48 KB a kernel needs the opt-in; cheap enough to set on every launch).
// `extra` bytes of shared memory after those (InvariantMmaKernel's totals).
template <int HEAD_DIM, bool KV8, int kExtra = 0>
cudaError_t LaunchPrefillMma(void (*kernel)(PrefillParams), int32_t ctas, const PrefillParams& p,
                             cudaStream_t stream) {
  constexpr int kSmem = PrefillSmemBytes<HEAD_DIM, KV8>() + kExtra;
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

template <int HEAD_DIM, typename T, bool KV8>
cudaError_t InvariantPiecesKv(const PrefillParams& p, cudaStream_t stream) {
  constexpr int kTotals = InvariantTotalFloats<HEAD_DIM>() * kPrefillThreads * 4;
  if (p.num_gtiles > 0) {
    const cudaError_t err = LaunchPrefillMma<HEAD_DIM, KV8>(SharedPrefixMmaKernel<HEAD_DIM, T, KV8>,
                                                            p.num_gtiles, p, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.num_fold_items > 0) {
    const cudaError_t err = LaunchPrefillMma<HEAD_DIM, KV8, kTotals>(
        InvariantMmaKernel<HEAD_DIM, T, KV8, true>, p.num_fold_items, p, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.num_items > p.num_fold_items) {
    const cudaError_t err = LaunchPrefillMma<HEAD_DIM, KV8>(
        InvariantMmaKernel<HEAD_DIM, T, KV8, false>, p.num_items - p.num_fold_items, p, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.num_merge > 0) {
    InvariantMergeKernel<HEAD_DIM, T><<<p.num_merge, kPrefillThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <int HEAD_DIM, typename T>
cudaError_t InvariantPiecesDispatched(const PrefillParams& p, cudaStream_t stream) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "tensor-core prefill: head_dim 64 or 128");
  return KvIsFp8Host(p.kv) ? InvariantPiecesKv<HEAD_DIM, T, true>(p, stream)
                           : InvariantPiecesKv<HEAD_DIM, T, false>(p, stream);
}

}  // namespace banyan::kernels::cuda
