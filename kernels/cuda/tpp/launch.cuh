// Layer 2 of the kernels: LaunchTppDispatched<HEAD_DIM, DTYPE> derives the compile-time
// configuration, sets the shared-memory limits and launches the three kernels. Included only by
// the per-family .cu files.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/tpp/phase1.cuh"
#include "kernels/cuda/tpp/phase1_wgmma_launch.h"
#include "kernels/cuda/tpp/phase2.cuh"
#include "kernels/cuda/tpp/phase2_mma.cuh"
#include "kernels/cuda/tpp/phase2_warp.cuh"
#include "kernels/cuda/tpp/tpp_launch.h"

namespace banyan::kernels::cuda::tpp {

inline TppParams MakeTppParams(const TppWorkPlan& plan, const TppRunArgs& a) {
  const TppImageLayout& l = plan.layout();
  const int32_t* im = a.image;
  TppParams p;
  p.q = a.q;
  p.out = a.out;
  p.kv = a.kv;
  p.t = TppTables{im + l.span_chunk,   im + l.span_begin,      im + l.span_end,
                  im + l.seg_row_begin, im + l.seg_row_end,    im + l.p1_seg,
                  im + l.p1_span_lo,   im + l.p1_span_hi,      im + l.p1_m_begin,
                  im + l.p1_state,     im + l.p2_row,          im + l.p2_span_lo,
                  im + l.p2_span_hi,   im + l.p2_state,        im + l.row_merge_begin,
                  im + l.row_merge_end, im + l.merge_states,   im + l.merge_rows};
  const TppProblem& pr = plan.problem();
  const size_t o_bytes = (static_cast<size_t>(std::max(plan.num_states(), 1)) * pr.num_q_heads *
                              pr.head_dim * sizeof(float) + 255) / 256 * 256;
  p.partial_o = static_cast<float*>(a.workspace);
  p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + o_bytes);
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.num_q_heads = pr.num_q_heads;
  p.group = pr.num_q_heads / pr.num_kv_heads;
  p.wait_phase1 = 0;
  p.wait_phase2 = 0;
  return p;
}

template <int HEAD_DIM, typename DType, int M_TILES, bool KV8>
cudaError_t LaunchPhase1(const TppWorkPlan& plan, const TppParams& p, cudaStream_t stream) {
  using Cfg = Phase1Config<HEAD_DIM, DType, M_TILES>;
  static_assert(Cfg::kBlockM == 64 || Cfg::kBlockM == 128, "TppWorkPlan tiles M by 64 or 128");
  auto kernel = TppPhase1Kernel<HEAD_DIM, DType, M_TILES, KV8>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(plan.num_p1_items(), plan.problem().num_kv_heads);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// The phase-2 kernels: PATH picks the kernel, GROUP its q heads per CTA (CUDA cores: 1-8) or per
// warp (a warp per head: 1, 2, 4; tensor cores: 16), STAGES its pipeline depth (CTA kernels),
// KV8 its instantiation for an FP8 KV cache.
template <int HEAD_DIM, typename DType, Phase2Path PATH, int GROUP, int STAGES, bool KV8>
constexpr auto Phase2KernelFn() {
  if constexpr (PATH == Phase2Path::kTensorCores) {
    return TppPhase2MmaKernel<HEAD_DIM, DType, STAGES, KV8>;
  } else if constexpr (PATH == Phase2Path::kWarpPerHead) {
    return TppPhase2WarpKernel<HEAD_DIM, DType, GROUP, KV8>;
  } else {
    return TppPhase2Kernel<HEAD_DIM, DType, GROUP, STAGES, KV8>;
  }
}
template <int HEAD_DIM, typename DType, Phase2Path PATH, int GROUP, int STAGES>
constexpr int Phase2SmemBytes() {
  if constexpr (PATH == Phase2Path::kTensorCores) {
    return Phase2MmaConfig<HEAD_DIM, DType, STAGES>::kSmemBytes;
  } else if constexpr (PATH == Phase2Path::kWarpPerHead) {
    return 0;
  } else {
    return Phase2Config<HEAD_DIM, DType, GROUP, STAGES>::kSmemBytes;
  }
}

// Launches kernel(p) on `stream`, with programmatic dependent launch (it may start before the
// kernel ahead of it completes, and waits for it on the device) when `pdl`.
template <typename Kernel>
cudaError_t LaunchTppKernel(Kernel kernel, const TppParams& p, dim3 grid, dim3 block,
                            size_t smem_bytes, bool pdl, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, p);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <int HEAD_DIM, typename DType, Phase2Path PATH, int GROUP, int STAGES, bool KV8>
cudaError_t LaunchPhase2(const TppWorkPlan& plan, const TppParams& p, bool pdl,
                         cudaStream_t stream) {
  constexpr int kSmemBytes = Phase2SmemBytes<HEAD_DIM, DType, PATH, GROUP, STAGES>();
  auto kernel = Phase2KernelFn<HEAD_DIM, DType, PATH, GROUP, STAGES, KV8>();
  cudaError_t e = cudaSuccess;
  if constexpr (kSmemBytes > 0) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (e != cudaSuccess) return e;
  }
  return LaunchTppKernel(kernel, p, dim3(plan.num_p2_items(), plan.p2_grid_y()), dim3(128),
                         kSmemBytes, pdl, stream);
}

// The one place that maps a plan to its phase-2 instantiation (kernel, head group, pipeline
// depth): returns f.template operator()<PATH, GROUP, STAGES>(), for the launch and for
// graph-node updates.
template <typename F>
auto WithPhase2Variant(const TppWorkPlan& plan, const F& f) {
  constexpr Phase2Path kCuda = Phase2Path::kCudaCores;
  constexpr Phase2Path kWarp = Phase2Path::kWarpPerHead;
  constexpr Phase2Path kMma = Phase2Path::kTensorCores;
  const bool two = plan.p2_stages() == 2;
  if (plan.p2_path() == kWarp) {
    switch (plan.p2_head_group()) {
      case 1: return f.template operator()<kWarp, 1, 2>();
      case 2: return f.template operator()<kWarp, 2, 2>();
      default: return f.template operator()<kWarp, 4, 2>();
    }
  }
  if (plan.p2_path() == kMma) {
    return two ? f.template operator()<kMma, 16, 2>() : f.template operator()<kMma, 16, 3>();
  }
  switch (plan.p2_head_group()) {
    case 1: return two ? f.template operator()<kCuda, 1, 2>() : f.template operator()<kCuda, 1, 3>();
    case 2: return two ? f.template operator()<kCuda, 2, 2>() : f.template operator()<kCuda, 2, 3>();
    case 4: return two ? f.template operator()<kCuda, 4, 2>() : f.template operator()<kCuda, 4, 3>();
    default: return two ? f.template operator()<kCuda, 8, 2>() : f.template operator()<kCuda, 8, 3>();
  }
}

template <int HEAD_DIM, typename DType, bool KV8>
struct Phase2Launch {
  const TppWorkPlan& plan;
  const TppParams& p;
  bool pdl;
  cudaStream_t stream;
  template <Phase2Path PATH, int GROUP, int STAGES>
  cudaError_t operator()() const {
    return LaunchPhase2<HEAD_DIM, DType, PATH, GROUP, STAGES, KV8>(plan, p, pdl, stream);
  }
};

template <int HEAD_DIM, typename DType, bool KV8>
struct Phase2KernelOf {
  template <Phase2Path PATH, int GROUP, int STAGES>
  const void* operator()() const {
    return reinterpret_cast<const void*>(
        Phase2KernelFn<HEAD_DIM, DType, PATH, GROUP, STAGES, KV8>());
  }
};

template <int HEAD_DIM, typename DType, bool KV8>
cudaError_t LaunchPhase2Group(const TppWorkPlan& plan, const TppParams& p, bool pdl,
                              cudaStream_t stream) {
  return WithPhase2Variant(plan, Phase2Launch<HEAD_DIM, DType, KV8>{plan, p, pdl, stream});
}

// The merge kernel's grid: merge rows x blocks of kTppMergeThreads (head, 8 head dims) pairs.
inline dim3 TppMergeGrid(const TppWorkPlan& plan) {
  const int pairs = plan.problem().num_q_heads * (plan.problem().head_dim / 8);
  return dim3(plan.num_merge_rows(), (pairs + kTppMergeThreads - 1) / kTppMergeThreads);
}

template <int HEAD_DIM, DType DTYPE, bool KV8>
cudaError_t LaunchTppFor(const TppWorkPlan& plan, const TppRunArgs& args, cudaStream_t stream) {
  using Elem = typename ElementOf<DTYPE>::Type;
  TppParams p = MakeTppParams(plan, args);
  cudaError_t e = cudaSuccess;
  const bool phase1 = plan.num_p1_items() > 0;
  const bool phase2 = plan.num_p2_items() > 0;
  auto launch_phase1 = [&](cudaStream_t s) {
    if (plan.p1_path() != Phase1Path::kMmaSync) {
      return LaunchPhase1Wgmma(HEAD_DIM, DTYPE, plan.p1_block_m(),
                               plan.p1_path() == Phase1Path::kWgmma, p,
                               dim3(plan.num_p1_items(), plan.problem().num_kv_heads), s);
    }
    return plan.p1_block_m() == 128 ? LaunchPhase1<HEAD_DIM, Elem, 2, KV8>(plan, p, s)
                                    : LaunchPhase1<HEAD_DIM, Elem, 1, KV8>(plan, p, s);
  };
  if (plan.deferred_merge()) {
    // Phase 2 does not read phase-1 output: run it beside phase 1, merge after both.
    const bool fork = phase1 && phase2 && args.side_stream != nullptr &&
                      args.fork_event != nullptr && args.join_event != nullptr;
    if (fork) {
      if ((e = cudaEventRecord(args.fork_event, stream)) != cudaSuccess) return e;
      if ((e = cudaStreamWaitEvent(args.side_stream, args.fork_event, 0)) != cudaSuccess) return e;
    }
    if (phase1 && (e = launch_phase1(stream)) != cudaSuccess) return e;
    if (phase2 &&
        (e = LaunchPhase2Group<HEAD_DIM, Elem, KV8>(plan, p, false,
                                                    fork ? args.side_stream : stream)) !=
            cudaSuccess) {
      return e;
    }
    if (fork) {
      if ((e = cudaEventRecord(args.join_event, args.side_stream)) != cudaSuccess) return e;
      if ((e = cudaStreamWaitEvent(stream, args.join_event, 0)) != cudaSuccess) return e;
    }
  } else {
    if (phase1 && (e = launch_phase1(stream)) != cudaSuccess) return e;
    if (phase2) {
      const bool pdl = phase1 && plan.options().pdl;
      p.wait_phase1 = pdl ? 1 : 0;
      if ((e = LaunchPhase2Group<HEAD_DIM, Elem, KV8>(plan, p, pdl, stream)) != cudaSuccess) {
        return e;
      }
    }
  }
  if (plan.num_merge_rows() > 0) {
    // On `stream` after phases 1 and 2. Right behind phase 2 (not deferred), with PDL: its CTAs
    // start while phase 2 runs, read their merge lists, and wait for phase 2 (which completes
    // after phase 1) before they read any partial state. After the deferred merge's join, a
    // plain launch.
    const bool pdl = !plan.deferred_merge() && phase2 && plan.options().pdl;
    p.wait_phase2 = pdl ? 1 : 0;
    e = LaunchTppKernel(TppMergeKernel<HEAD_DIM, Elem>, p, TppMergeGrid(plan),
                        dim3(kTppMergeThreads), 0, pdl, stream);
  }
  return e;
}

// The launch for the KV view's format: the 16-bit instantiations, or the FP8 cache's.
template <int HEAD_DIM, DType DTYPE>
cudaError_t LaunchTppDispatched(const TppWorkPlan& plan, const TppRunArgs& args,
                                cudaStream_t stream) {
  return KvIsFp8Host(args.kv) ? LaunchTppFor<HEAD_DIM, DTYPE, true>(plan, args, stream)
                              : LaunchTppFor<HEAD_DIM, DTYPE, false>(plan, args, stream);
}

// What a graph node update writes into a captured launch's TppParams: the plan's tables and
// partial states; q, out, the KV view, the scale, wait_phase1 and wait_phase2 (part of the launch
// signature) stay as captured.
inline auto TppParamsPatch(const TppWorkPlan& plan, const TppRunArgs& args) {
  const TppParams fresh = MakeTppParams(plan, args);
  return [fresh](void* params) {
    auto* p = static_cast<TppParams*>(params);
    p->t = fresh.t;
    p->partial_o = fresh.partial_o;
    p->partial_lse = fresh.partial_lse;
  };
}

template <int HEAD_DIM, DType DTYPE>
cudaError_t TppNodeUpdatesDispatched(const TppWorkPlan& plan, const TppRunArgs& args,
                                     std::vector<KernelNodeUpdate>* updates) {
  using Elem = typename ElementOf<DTYPE>::Type;
  updates->clear();
  const auto patch = TppParamsPatch(plan, args);
  const int kvh = plan.problem().num_kv_heads;
  const bool kv8 = KvIsFp8Host(args.kv);
  if (plan.num_p1_items() > 0) {
    const void* f = nullptr;
    if (plan.p1_path() != Phase1Path::kMmaSync) {
      f = Phase1WgmmaKernel(HEAD_DIM, DTYPE, plan.p1_block_m(),
                            plan.p1_path() == Phase1Path::kWgmma, kv8);
    } else if (kv8) {
      f = plan.p1_block_m() == 128
              ? reinterpret_cast<const void*>(TppPhase1Kernel<HEAD_DIM, Elem, 2, true>)
              : reinterpret_cast<const void*>(TppPhase1Kernel<HEAD_DIM, Elem, 1, true>);
    } else {
      f = plan.p1_block_m() == 128
              ? reinterpret_cast<const void*>(TppPhase1Kernel<HEAD_DIM, Elem, 2>)
              : reinterpret_cast<const void*>(TppPhase1Kernel<HEAD_DIM, Elem, 1>);
    }
    if (f == nullptr) return cudaErrorNotSupported;
    updates->push_back({f, dim3(plan.num_p1_items(), kvh), sizeof(TppParams), patch});
  }
  if (plan.num_p2_items() > 0) {
    const void* f = kv8 ? WithPhase2Variant(plan, Phase2KernelOf<HEAD_DIM, Elem, true>{})
                        : WithPhase2Variant(plan, Phase2KernelOf<HEAD_DIM, Elem, false>{});
    updates->push_back({f, dim3(plan.num_p2_items(), plan.p2_grid_y()),
                        sizeof(TppParams), patch});
  }
  if (plan.num_merge_rows() > 0) {
    updates->push_back({reinterpret_cast<const void*>(TppMergeKernel<HEAD_DIM, Elem>),
                        TppMergeGrid(plan), sizeof(TppParams), patch});
  }
  return cudaSuccess;
}

}  // namespace banyan::kernels::cuda::tpp
