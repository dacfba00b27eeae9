// The runtime dispatch point of the attention kernels: dtype and head_dim choose a fast
// templated path (attention_bf16.cu / attention_fp16.cu) or the generic kernels below.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/decode_attention.cuh"
#include "kernels/cuda/graph_update.h"

namespace banyan::kernels::cuda {
namespace {

absl::Status CheckShape(const KvViewDev& kv, int32_t num_q_heads, const char* what) {
  const int d = kv.head_dim;
  if (d <= 0 || d % 8 != 0 || d > kMaxGenericHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": head_dim ", d, " is not supported (need a multiple of 8, at most ",
        kMaxGenericHeadDim, ")"));
  }
  if (kv.num_kv_heads <= 0 || num_q_heads % kv.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", num_q_heads, " q heads over ",
                                                   kv.num_kv_heads, " kv heads"));
  }
  return absl::OkStatus();
}

// Launches the decode kernels, or with `describe` only lists them as node updates for `p`. One
// warp per (item, q head) for every head_dim: the engine sends only the head dims the TPP
// kernels are not built for here (TPP's paged call runs the others).
template <typename T>
cudaError_t DecodeByHeadDim(const PagedDecodeParams& p, cudaStream_t s,
                            std::vector<KernelNodeUpdate>* describe = nullptr) {
  const dim3 grid(static_cast<unsigned>(p.num_items),
                  static_cast<unsigned>((p.num_q_heads + 3) / 4));
  LaunchShape shape{reinterpret_cast<const void*>(GenericDecodeKernel<T>), grid};
  cudaError_t err = cudaSuccess;
  if (describe == nullptr) {
    GenericDecodeKernel<T><<<grid, 128, 0, s>>>(p);
    err = cudaGetLastError();
  }
  const dim3 merge_grid(static_cast<unsigned>(p.num_merge_rows),
                        static_cast<unsigned>(p.num_q_heads));
  if (describe != nullptr) {
    // Everything but the layer's KV view comes from `p`.
    auto patch = [p](void* params) {
      auto* node = static_cast<PagedDecodeParams*>(params);
      PagedDecodeParams fresh = p;
      fresh.kv = node->kv;
      *node = fresh;
    };
    describe->push_back({shape.func, shape.grid, sizeof(PagedDecodeParams), patch});
    if (p.num_merge_rows > 0) {  // launched only then, as below
      describe->push_back({reinterpret_cast<const void*>(MergeStatesKernel<T>), merge_grid,
                           sizeof(PagedDecodeParams), patch});
    }
    return err;
  }
  if (err != cudaSuccess || p.num_merge_rows == 0) return err;
  MergeStatesKernel<T><<<merge_grid, 128, 0, s>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t PrefillByHeadDim(const PrefillParams& p, cudaStream_t s) {
  switch (p.kv.head_dim) {
    case 64:
      return PrefillMmaDispatched<64, T>(p, s);
    case 128:
      return PrefillMmaDispatched<128, T>(p, s);
    default: {
      const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>((p.num_q_heads + 3) / 4));
      GenericPrefillKernel<T><<<grid, 128, 0, s>>>(p);
      return cudaGetLastError();
    }
  }
}

#ifndef BANYAN_CUDA_FP16
absl::Status NoFp16(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": fp16 kernels were not built (BANYAN_CUDA_FP16=OFF)"));
}
#endif

}  // namespace

bool HasFastAttentionPath(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

absl::Status PagedDecodeAttention(DType dtype, const PagedDecodeParams& p, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(CheckShape(p.kv, p.num_q_heads, "PagedDecodeAttention"));
  if (p.num_items == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(DecodeByHeadDim<__nv_bfloat16>(p, stream), "PagedDecodeAttention");
    case DType::kFp16:
#ifdef BANYAN_CUDA_FP16
      return CudaStatus(DecodeByHeadDim<__half>(p, stream), "PagedDecodeAttention");
#else
      return NoFp16("PagedDecodeAttention");
#endif
  }
  return absl::InvalidArgumentError("PagedDecodeAttention: unsupported dtype");
}

absl::Status PagedDecodeNodeUpdates(DType dtype, const PagedDecodeParams& p,
                                    std::vector<KernelNodeUpdate>* updates) {
  BANYAN_RETURN_IF_ERROR(CheckShape(p.kv, p.num_q_heads, "PagedDecodeNodeUpdates"));
  updates->clear();
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(DecodeByHeadDim<__nv_bfloat16>(p, nullptr, updates),
                        "PagedDecodeNodeUpdates");
    case DType::kFp16:
#ifdef BANYAN_CUDA_FP16
      return CudaStatus(DecodeByHeadDim<__half>(p, nullptr, updates), "PagedDecodeNodeUpdates");
#else
      return NoFp16("PagedDecodeNodeUpdates");
#endif
  }
  return absl::InvalidArgumentError("PagedDecodeNodeUpdates: unsupported dtype");
}

absl::Status PrefillAttention(DType dtype, const PrefillParams& p, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(CheckShape(p.kv, p.num_q_heads, "PrefillAttention"));
  if (p.num_tokens == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(PrefillByHeadDim<__nv_bfloat16>(p, stream), "PrefillAttention");
    case DType::kFp16:
#ifdef BANYAN_CUDA_FP16
      return CudaStatus(PrefillByHeadDim<__half>(p, stream), "PrefillAttention");
#else
      return NoFp16("PrefillAttention");
#endif
  }
  return absl::InvalidArgumentError("PrefillAttention: unsupported dtype");
}

}  // namespace banyan::kernels::cuda
