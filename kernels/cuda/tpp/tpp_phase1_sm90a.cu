// The wgmma phase-1 kernels (sm_90a), every (head_dim, dtype, M tile) compiled here, and their
// launcher. Built into banyan_tpp_sm90a with CUDA_ARCHITECTURES 90a.
#include <atomic>

#include "kernels/cuda/tpp/phase1_wgmma.cuh"
#include "kernels/cuda/tpp/phase1_wgmma_wide.cuh"
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

template <int HEAD_DIM, typename DType, int WGS>
cudaError_t Launch(const TppParams& p, dim3 grid, cudaStream_t stream) {
  using Cfg = Phase1WgmmaConfig<HEAD_DIM, WGS>;
  return LaunchWith(TppPhase1WgmmaKernel<HEAD_DIM, DType, WGS>, Cfg::kThreads, Cfg::kSmemBytes, p,
                    grid, stream);
}

template <int HEAD_DIM, typename DType>
cudaError_t LaunchWs(const TppParams& p, dim3 grid, cudaStream_t stream) {
  using Cfg = Phase1WgmmaWsConfig<HEAD_DIM>;
  return LaunchWith(TppPhase1WgmmaWsKernel<HEAD_DIM, DType>, Cfg::kThreads, Cfg::kSmemBytes, p,
                    grid, stream);
}

template <int HEAD_DIM, typename DType>
cudaError_t LaunchWide(const TppParams& p, dim3 grid, cudaStream_t stream) {
  using Cfg = Phase1WgmmaWideConfig<HEAD_DIM>;
  return LaunchWith(TppPhase1WgmmaWideKernel<HEAD_DIM, DType>, Cfg::kThreads, Cfg::kSmemBytes,
                    p, grid, stream);
}

template <int HEAD_DIM, typename DType>
cudaError_t ForBlockM(int block_m, Phase1Path path, const TppParams& p, dim3 grid,
                      cudaStream_t stream) {
  if (block_m == 64) return Launch<HEAD_DIM, DType, 1>(p, grid, stream);
  if (block_m != 128) return cudaErrorNotSupported;
  switch (path) {
    case Phase1Path::kWgmma: return LaunchWs<HEAD_DIM, DType>(p, grid, stream);
    case Phase1Path::kWgmmaWide: return LaunchWide<HEAD_DIM, DType>(p, grid, stream);
    default: return Launch<HEAD_DIM, DType, 2>(p, grid, stream);
  }
}

template <int HEAD_DIM>
cudaError_t ForDType(DType dtype, int block_m, Phase1Path path, const TppParams& p, dim3 grid,
                     cudaStream_t stream) {
  return dtype == DType::kBf16 ? ForBlockM<HEAD_DIM, __nv_bfloat16>(block_m, path, p, grid, stream)
                               : ForBlockM<HEAD_DIM, __half>(block_m, path, p, grid, stream);
}

template <int HEAD_DIM, typename DType>
const void* KernelFor(int block_m, Phase1Path path) {
  auto fn = [](auto kernel) { return reinterpret_cast<const void*>(kernel); };
  if (block_m == 64) return fn(TppPhase1WgmmaKernel<HEAD_DIM, DType, 1>);
  if (block_m != 128) return nullptr;
  switch (path) {
    case Phase1Path::kWgmma: return fn(TppPhase1WgmmaWsKernel<HEAD_DIM, DType>);
    case Phase1Path::kWgmmaWide: return fn(TppPhase1WgmmaWideKernel<HEAD_DIM, DType>);
    default: return fn(TppPhase1WgmmaKernel<HEAD_DIM, DType, 2>);
  }
}

}  // namespace

const void* Phase1WgmmaKernel(int head_dim, DType dtype, int block_m, Phase1Path path) {
  switch (head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64:
      return dtype == DType::kBf16 ? KernelFor<64, __nv_bfloat16>(block_m, path)
                                     : KernelFor<64, __half>(block_m, path);
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128:
      return dtype == DType::kBf16 ? KernelFor<128, __nv_bfloat16>(block_m, path)
                                     : KernelFor<128, __half>(block_m, path);
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

cudaError_t LaunchPhase1Wgmma(int head_dim, DType dtype, int block_m, Phase1Path path,
                              const TppParams& p, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64:
      return ForDType<64>(dtype, block_m, path, p, grid, stream);
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128:
      return ForDType<128>(dtype, block_m, path, p, grid, stream);
#endif
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace banyan::kernels::cuda::tpp
