#include "bench/tpp/launch_floor.h"

namespace banyan::bench {
namespace {

__global__ void EmptyKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace

cudaError_t LaunchEmptyKernels(int count, cudaStream_t stream) {
  for (int i = 0; i < count; ++i) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1);
    config.blockDim = dim3(32);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = i > 0 ? 1 : 0;
    if (cudaError_t e = cudaLaunchKernelEx(&config, EmptyKernel); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace banyan::bench
