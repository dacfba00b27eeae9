// Instantiation of the TPP launchers for head_dim 128, f16 (one family per file: compile time).
#include "kernels/cuda/tpp/launch.cuh"

namespace banyan::kernels::cuda::tpp {

template cudaError_t LaunchTppDispatched<128, DType::kFp16>(const TppWorkPlan&,
                                                             const TppRunArgs&, cudaStream_t);

template cudaError_t TppNodeUpdatesDispatched<128, DType::kFp16>(const TppWorkPlan&, const TppRunArgs&,
                                                       std::vector<KernelNodeUpdate>*);

}  // namespace banyan::kernels::cuda::tpp
