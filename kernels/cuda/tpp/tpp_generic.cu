// The TPP launchers for head dims without a compiled family (phase2_generic.cuh), bf16 and fp16.
#include "kernels/cuda/tpp/launch.cuh"
#include "kernels/cuda/tpp/phase2_generic.cuh"

namespace banyan::kernels::cuda::tpp {

template <DType DTYPE>
cudaError_t LaunchTppGeneric(const TppWorkPlan& plan, const TppRunArgs& args,
                             cudaStream_t stream) {
  using Elem = typename ElementOf<DTYPE>::Type;
  if (plan.num_p1_items() > 0 || plan.p2_path() != Phase2Path::kGeneric) {
    return cudaErrorNotSupported;  // TppWorkPlan::Build never makes such a plan for these dims
  }
  TppParams p = MakeTppParams(plan, args);
  cudaError_t e = cudaSuccess;
  const bool phase2 = plan.num_p2_items() > 0;
  if (phase2) {
    e = LaunchTppKernel(KvIsFp8Host(args.kv) ? TppPhase2GenericKernel<Elem, true>
                                             : TppPhase2GenericKernel<Elem, false>,
                        p,
                        dim3(plan.num_p2_items(), plan.p2_grid_y()),
                        dim3(kTppGenericWarps * 32), 0, false, stream);
    if (e != cudaSuccess) return e;
  }
  if (plan.num_merge_rows() > 0) {
    const bool pdl = phase2 && plan.options().pdl;
    p.wait_phase2 = pdl ? 1 : 0;
    e = LaunchTppKernel(TppMergeKernel<0, Elem>, p, TppMergeGrid(plan),
                        dim3(kTppMergeThreads), 0, pdl, stream);
  }
  return e;
}

template <DType DTYPE>
cudaError_t TppNodeUpdatesGeneric(const TppWorkPlan& plan, const TppRunArgs& args,
                                  std::vector<KernelNodeUpdate>* updates) {
  using Elem = typename ElementOf<DTYPE>::Type;
  updates->clear();
  if (plan.num_p1_items() > 0 || plan.p2_path() != Phase2Path::kGeneric) {
    return cudaErrorNotSupported;
  }
  const auto patch = TppParamsPatch(plan, args);
  if (plan.num_p2_items() > 0) {
    updates->push_back({KvIsFp8Host(args.kv)
                            ? reinterpret_cast<const void*>(TppPhase2GenericKernel<Elem, true>)
                            : reinterpret_cast<const void*>(TppPhase2GenericKernel<Elem, false>),
                        dim3(plan.num_p2_items(), plan.p2_grid_y()), sizeof(TppParams), patch});
  }
  if (plan.num_merge_rows() > 0) {
    updates->push_back({reinterpret_cast<const void*>(TppMergeKernel<0, Elem>),
                        TppMergeGrid(plan), sizeof(TppParams), patch});
  }
  return cudaSuccess;
}

template cudaError_t LaunchTppGeneric<DType::kBf16>(const TppWorkPlan&, const TppRunArgs&,
                                                    cudaStream_t);
template cudaError_t LaunchTppGeneric<DType::kFp16>(const TppWorkPlan&, const TppRunArgs&,
                                                    cudaStream_t);
template cudaError_t TppNodeUpdatesGeneric<DType::kBf16>(const TppWorkPlan&, const TppRunArgs&,
                                                         std::vector<KernelNodeUpdate>*);
template cudaError_t TppNodeUpdatesGeneric<DType::kFp16>(const TppWorkPlan&, const TppRunArgs&,
                                                         std::vector<KernelNodeUpdate>*);

}  // namespace banyan::kernels::cuda::tpp
