// Layer 3: the one runtime dispatch point of the TPP kernels. Turns an unsupported head_dim or
// dtype, or arguments that do not match the plan, into InvalidArgument, and a CUDA error into
// Internal.
#include "kernels/cuda/tpp/tpp_attention.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/prefill/attention.h"  // kMaxGenericHeadDim
#include "kernels/cuda/tpp/tpp_launch.h"

namespace banyan::kernels::cuda::tpp {
namespace {

template <int HEAD_DIM>
cudaError_t ForHeadDim(const TppWorkPlan& plan, const TppRunArgs& args, cudaStream_t stream) {
  return args.dtype == DType::kBf16
             ? LaunchTppDispatched<HEAD_DIM, DType::kBf16>(plan, args, stream)
             : LaunchTppDispatched<HEAD_DIM, DType::kFp16>(plan, args, stream);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

absl::Status Run(const TppWorkPlan& plan, const TppRunArgs& args, cudaStream_t stream) {
  const TppProblem& pr = plan.problem();
  const KvViewDev& kv = args.kv;
  if (kv.head_dim != pr.head_dim || kv.num_kv_heads != pr.num_kv_heads ||
      kv.chunk_size != pr.chunk_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tpp: kv view (head_dim ", kv.head_dim, ", kv heads ", kv.num_kv_heads, ", chunk ",
        kv.chunk_size, ") does not match the plan (", pr.head_dim, ", ", pr.num_kv_heads, ", ",
        pr.chunk_size, ")"));
  }
  if (!TppSupportsHeadDim(pr.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tpp: head_dim ", pr.head_dim, " is not supported (a multiple of 8, at most ",
        kMaxGenericHeadDim, ")"));
  }
  if (args.dtype != DType::kBf16 && args.dtype != DType::kFp16) {
    return absl::InvalidArgumentError("tpp: dtype must be bf16 or fp16");
  }
  if (plan.num_rows() == 0) return absl::OkStatus();
  if (!Aligned16(kv.base) || kv.chunk_stride % 8 != 0 || kv.v_offset % 8 != 0 ||
      !Aligned16(args.q) || !Aligned16(args.out) || !Aligned16(args.image) ||
      reinterpret_cast<uintptr_t>(args.workspace) % 256 != 0 || args.workspace == nullptr) {
    return absl::InvalidArgumentError(
        "tpp: q, out, kv base and image need 16-byte alignment (strides multiples of 8 "
        "elements), the workspace 256-byte alignment");
  }
  if (KvIsFp8Host(kv) && (kv.chunk_size % 8 != 0 || kv.chunk_stride % 16 != 0)) {
    // 16-byte code vectors and the 4-byte exponent words the warp-specialised phase 1 copies
    // (the V exponents num_kv_heads * chunk_size after the K ones, in the same alignment).
    return absl::InvalidArgumentError(absl::StrCat(
        "tpp: an FP8 KV cache needs a chunk size that is a multiple of 8, not ", kv.chunk_size));
  }
  cudaError_t e = cudaErrorInvalidValue;
  switch (pr.head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64: e = ForHeadDim<64>(plan, args, stream); break;
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128: e = ForHeadDim<128>(plan, args, stream); break;
#endif
    default:
      e = args.dtype == DType::kBf16 ? LaunchTppGeneric<DType::kBf16>(plan, args, stream)
                                     : LaunchTppGeneric<DType::kFp16>(plan, args, stream);
      break;
  }
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("tpp: launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

template <int HEAD_DIM>
cudaError_t UpdatesForHeadDim(const TppWorkPlan& plan, const TppRunArgs& args,
                              std::vector<KernelNodeUpdate>* updates) {
  return args.dtype == DType::kBf16
             ? TppNodeUpdatesDispatched<HEAD_DIM, DType::kBf16>(plan, args, updates)
             : TppNodeUpdatesDispatched<HEAD_DIM, DType::kFp16>(plan, args, updates);
}

}  // namespace

std::vector<int64_t> TppLaunchSignature(const TppWorkPlan& plan, const TppRunArgs& args) {
  const bool p1 = plan.num_p1_items() > 0, p2 = plan.num_p2_items() > 0;
  const bool fork = plan.deferred_merge() && p1 && p2 && args.side_stream != nullptr &&
                    args.fork_event != nullptr && args.join_event != nullptr;
  const bool pdl = !plan.deferred_merge() && p1 && p2 && plan.options().pdl;
  return {p1, p2, plan.num_merge_rows() > 0, static_cast<int64_t>(plan.p1_path()),
          plan.p1_block_m(), static_cast<int64_t>(plan.p2_path()), plan.p2_head_group(),
          plan.p2_stages(), plan.deferred_merge(), fork,
          pdl,
          static_cast<int64_t>(args.dtype), plan.problem().head_dim};
}

absl::Status TppNodeUpdates(const TppWorkPlan& plan, const TppRunArgs& args,
                            std::vector<KernelNodeUpdate>* updates) {
  cudaError_t e = cudaErrorInvalidValue;
  switch (plan.problem().head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64: e = UpdatesForHeadDim<64>(plan, args, updates); break;
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128: e = UpdatesForHeadDim<128>(plan, args, updates); break;
#endif
    default:
      e = args.dtype == DType::kBf16 ? TppNodeUpdatesGeneric<DType::kBf16>(plan, args, updates)
                                     : TppNodeUpdatesGeneric<DType::kFp16>(plan, args, updates);
      break;
  }
  if (e != cudaSuccess) {
    return absl::InvalidArgumentError(
        absl::StrCat("tpp: no graph node updates: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

bool TppSupportsHeadDim(int32_t head_dim) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxGenericHeadDim;
}

bool TppHasCompiledFamily(int32_t head_dim) {
  switch (head_dim) {
#ifdef BANYAN_TPP_HAS_D64
    case 64: return true;
#endif
#ifdef BANYAN_TPP_HAS_D128
    case 128: return true;
#endif
    default: return false;
  }
}

absl::Status TppDecodeAttention(const TppWorkPlan& plan, const TppRunArgs& args,
                                cudaStream_t stream) {
  return Run(plan, args, stream);
}

absl::Status PagedDecodeAttention(const TppWorkPlan& plan, const TppRunArgs& args,
                                  cudaStream_t stream) {
  if (plan.num_segments() != 0) {
    return absl::InvalidArgumentError("paged: the plan has shared segments; build it without");
  }
  return Run(plan, args, stream);
}

}  // namespace banyan::kernels::cuda::tpp
