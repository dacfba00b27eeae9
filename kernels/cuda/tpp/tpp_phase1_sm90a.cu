// The wgmma phase-1 kernels (sm_90a), every (head_dim, dtype, M tile) compiled here, and their
// launcher. Built into banyan_tpp_sm90a with CUDA_ARCHITECTURES 90a.
#include <atomic>

#include "kernels/cuda/tpp/phase1_wgmma.cuh"
#include "kernels/cuda/tpp/phase1_wgmma_launch.h"

namespace banyan::kernels::cuda::tpp {
namespace {

// One phase-1 launch: raise the kernel's dynamic shared-memory limit, launch.
template <typename Kernel>
cudaError_t LaunchWith(Kernel kernel, int threads, int smem_bytes, const TppParams& p, dim3 grid,
                       cudaStream_t stream) {
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

template <int HEAD_DIM, typename DType, int WGS, bool KV8>
cudaError_t Launch(const TppParams& p, dim3 grid, cudaStream_t stream) {
  using Cfg = Phase1WgmmaConfig<HEAD_DIM, WGS>;
  return LaunchWith(TppPhase1WgmmaKernel<HEAD_DIM, DType, WGS, KV8>, Cfg::kThreads,
                    Cfg::kSmemBytes, p, grid, stream);
}

template <int HEAD_DIM, typename DType, bool KV8>
cudaError_t LaunchWs(const TppParams& p, dim3 grid, cudaStream_t stream) {
  using Cfg = Phase1WgmmaWsConfig<HEAD_DIM, KV8>;
  return LaunchWith(TppPhase1WgmmaWsKernel<HEAD_DIM, DType, KV8>, Cfg::kThreads, Cfg::kSmemBytes,
                    p, grid, stream);
}

template <int HEAD_DIM, typename DType, bool KV8>
cudaError_t ForBlockM(int block_m, bool ws, const TppParams& p, dim3 grid, cudaStream_t stream) {
  switch (block_m) {
    case 64:
      return Launch<HEAD_DIM, DType, 1, KV8>(p, grid, stream);
    case 128:
      return ws ? LaunchWs<HEAD_DIM, DType, KV8>(p, grid, stream)
                : Launch<HEAD_DIM, DType, 2, KV8>(p, grid, stream);
    default:
      return cudaErrorNotSupported;
  }
}

template <int HEAD_DIM, typename DType>
cudaError_t ForKv(int block_m, bool ws, const TppParams& p, dim3 grid, cudaStream_t stream) {
  return KvIsFp8Host(p.kv) ? ForBlockM<HEAD_DIM, DType, true>(block_m, ws, p, grid, stream)
                           : ForBlockM<HEAD_DIM, DType, false>(block_m, ws, p, grid, stream);
}

template <int HEAD_DIM>
cudaError_t ForDType(DType dtype, int block_m, bool ws, const TppParams& p, dim3 grid,
                     cudaStream_t stream) {
  return dtype == DType::kBf16 ? ForKv<HEAD_DIM, __nv_bfloat16>(block_m, ws, p, grid, stream)
                                 : ForKv<HEAD_DIM, __half>(block_m, ws, p, grid, stream);
}

template <int HEAD_DIM, typename DType, bool KV8>
const void* KernelFor(int block_m, bool ws) {
  switch (block_m) {
    case 64:
      return reinterpret_cast<const void*>(TppPhase1WgmmaKernel<HEAD_DIM, DType, 1, KV8>);
    case 128:
      return ws ? reinterpret_cast<const void*>(TppPhase1WgmmaWsKernel<HEAD_DIM, DType, KV8>)
                : reinterpret_cast<const void*>(TppPhase1WgmmaKernel<HEAD_DIM, DType, 2, KV8>);
    default:
      return nullptr;
  }
}

template <int HEAD_DIM>
const void* KernelForDType(DType dtype, int block_m, bool ws, bool kv8) {
  if (dtype == DType::kBf16) {
    return kv8 ? KernelFor<HEAD_DIM, __nv_bfloat16, true>(block_m, ws)
               : KernelFor<HEAD_DIM, __nv_bfloat16, false>(block_m, ws);
  }
  return kv8 ? KernelFor<HEAD_DIM, __half, true>(block_m, ws)
             : KernelFor<HEAD_DIM, __half, false>(block_m, ws);
}

}  // namespace

const void* Phase1WgmmaKernel(int head_dim, DType dtype, int block_m, bool warp_specialized,
                              bool kv8) {
  switch (head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64:
      return KernelForDType<64>(dtype, block_m, warp_specialized, kv8);
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128:
      return KernelForDType<128>(dtype, block_m, warp_specialized, kv8);
#endif
    default:
      return nullptr;
  }
}

bool TppPhase1WgmmaAvailable() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0 unknown, 1 yes, 2 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return false;
  int known = cache[device].load(std::memory_order_relaxed);
  if (known == 0) {
    int major = 0, minor = 0;
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    known = ok && major == 9 && minor == 0 ? 1 : 2;
    cache[device].store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

cudaError_t LaunchPhase1Wgmma(int head_dim, DType dtype, int block_m, bool warp_specialized,
                              const TppParams& p, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64:
      return ForDType<64>(dtype, block_m, warp_specialized, p, grid, stream);
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128:
      return ForDType<128>(dtype, block_m, warp_specialized, p, grid, stream);
#endif
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace banyan::kernels::cuda::tpp
