// The runtime dispatch point of the attention kernels: dtype and head_dim choose a fast
// templated path (attention_bf16.cu / attention_fp16.cu) or the generic kernels below.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/prefill/attention_launch.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/prefill/generic_attention.cuh"
#include "kernels/cuda/prefill/invariant_attention.cuh"
#include "kernels/cuda/prefill/prefill_wgmma_launch.h"

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
  if (KvIsFp8Host(kv) && kv.chunk_size % 8 != 0) {  // 8-byte aligned code rows
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": an FP8 KV cache needs a chunk size that is a multiple of 8, not ", kv.chunk_size));
  }
  return absl::OkStatus();
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
      if (KvIsFp8Host(p.kv)) {
        GenericPrefillKernel<T, true><<<grid, 128, 0, s>>>(p);
      } else {
        GenericPrefillKernel<T, false><<<grid, 128, 0, s>>>(p);
      }
      return cudaGetLastError();
    }
  }
}

template <typename T, int D, int HW>
void LaunchInvariant(const PrefillParams& p, cudaStream_t s) {
  const int hkv = p.kv.num_kv_heads, per_kv = (p.num_q_heads / hkv + HW - 1) / HW;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(hkv * per_kv));
  if (KvIsFp8Host(p.kv)) {
    InvariantAttentionKernel<T, true, D, HW><<<grid, 128, 0, s>>>(p);
  } else {
    InvariantAttentionKernel<T, false, D, HW><<<grid, 128, 0, s>>>(p);
  }
}

template <typename T, int D>
void InvariantByGroup(const PrefillParams& p, cudaStream_t s) {
  if (p.num_q_heads / p.kv.num_kv_heads >= 4) {
    LaunchInvariant<T, D, 4>(p, s);
  } else {
    LaunchInvariant<T, D, 1>(p, s);
  }
}

// Head dims 64 and 128: the tensor-core prefill kernel of mma.sync in tiles of 64 rows
// (PrefillMmaKernel), which is already the same function of a row's positions wherever the row
// sits: its key tiles are positions [64 t, 64 t + 64) of the context whatever the spans, each
// product element of mma.sync depends on its own row and column only, every softmax sum runs in
// a fixed order over the row's own accumulators, and a tile whose keys a row may not see leaves
// the row's state as it was (p = 0 exactly; the keys past a tile's last visible one are zeros).
// A decode row is a sequence of one new token. Never the wgmma kernel (a different instruction,
// so other roundings): the work list has tiles of kPrefillBlockM. Other head dims: the generic
// CUDA-core kernel (InvariantAttentionKernel), four q heads of a kv head per warp where the group
// has them, else one, the same sums in the same order in both variants.
//
//
// Pieces (head dims 64 and 128, prefill_attention.cuh): the keys of every row are cut at fixed
// positions (kInvariantPieceKeys), each piece is summed from an empty state, and the pieces are
// folded in position order by the same few rounded operations wherever that happens. A tile
// whose rows span more than one tile, or fit in one piece, folds its own pieces (in its CTA); a
// decode row's (or a short sequence's) pieces run as a CTA each and InvariantMergeKernel folds
// their states. A long context is then summed across the GPU, and a row's bits still depend only
// on its positions: the same pieces, the same fold, whichever CTAs ran them.
//
// Shared prefixes (p.num_gtiles > 0): SharedPrefixMmaKernel runs each group's whole pieces once
// for all its members' rows, leaving every row's piece state where the member's own CTA would
// have left it.
template <typename T, int D>
cudaError_t InvariantMma(const PrefillParams& p, cudaStream_t s) {
  return InvariantPiecesDispatched<D, T>(p, s);
}

template <typename T>
cudaError_t InvariantByKv(const PrefillParams& p, cudaStream_t s) {
  switch (p.kv.head_dim) {
    case 64:
      return InvariantMma<T, 64>(p, s);
    case 128:
      return InvariantMma<T, 128>(p, s);
    default:
      InvariantByGroup<T, 0>(p, s);
  }
  return cudaGetLastError();
}

#ifndef BANYAN_CUDA_FP16
absl::Status NoFp16(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": fp16 kernels were not built (BANYAN_CUDA_FP16=OFF)"));
}
#endif

}  // namespace

bool HasFastAttentionPath(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

int32_t PrefillTileRows(const KvViewDev& kv) {
  return HasFastAttentionPath(kv.head_dim) && PrefillWgmmaAvailable()
             ? kPrefillWgmmaBlockM
             : kPrefillBlockM;
}

absl::Status PrefillAttention(DType dtype, const PrefillParams& p, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(CheckShape(p.kv, p.num_q_heads, "PrefillAttention"));
  if (p.num_tokens == 0) return absl::OkStatus();
  if (p.block_m == kPrefillWgmmaBlockM && HasFastAttentionPath(p.kv.head_dim)) {
    if (!PrefillWgmmaAvailable()) {
      return absl::InvalidArgumentError(
          "PrefillAttention: tiles of 128 rows need the wgmma kernel (compute capability 9.0); "
          "build the work list with PrefillTileRows");
    }
#ifndef BANYAN_CUDA_FP16
    if (dtype == DType::kFp16) return NoFp16("PrefillAttention");
#endif
    return CudaStatus(LaunchPrefillWgmma(dtype, p, stream), "PrefillAttention");
  }
  if (p.block_m != kPrefillBlockM && HasFastAttentionPath(p.kv.head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrefillAttention: work list tiles of ", p.block_m, " rows (64 or 128)"));
  }
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

absl::Status InvariantAttention(DType dtype, const PrefillParams& p, cudaStream_t stream) {
  BANYAN_RETURN_IF_ERROR(CheckShape(p.kv, p.num_q_heads, "InvariantAttention"));
  if (p.num_tokens == 0) return absl::OkStatus();
  if (p.block_m != kPrefillBlockM && HasFastAttentionPath(p.kv.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InvariantAttention: work list tiles of ", p.block_m, " rows (build it with ",
        kPrefillBlockM, ")"));
  }
  if (p.num_gtiles > 0 && !HasFastAttentionPath(p.kv.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InvariantAttention: shared-prefix groups need head_dim 64 or 128 (not ",
        p.kv.head_dim, ")"));
  }
  if (HasFastAttentionPath(p.kv.head_dim) &&
      (p.item_tile == nullptr || p.item_piece == nullptr || p.num_items < p.num_tiles ||
       p.num_fold_items < 0 || p.num_fold_items > p.num_items ||
       ((p.num_merge > 0 || p.num_gtiles > 0) &&
        (p.state == nullptr || p.seq_pieces == nullptr || p.seq_state == nullptr)) ||
       (p.num_merge > 0 && p.merge_seq == nullptr))) {
    return absl::InvalidArgumentError(
        "InvariantAttention: head dims 64 and 128 need the work list's pieces "
        "(AddInvariantPieces) and, where pieces are merged, a state buffer");
  }
  switch (dtype) {
    case DType::kBf16:
      return CudaStatus(InvariantByKv<__nv_bfloat16>(p, stream), "InvariantAttention");
    case DType::kFp16:
#ifdef BANYAN_CUDA_FP16
      return CudaStatus(InvariantByKv<__half>(p, stream), "InvariantAttention");
#else
      return NoFp16("InvariantAttention");
#endif
  }
  return absl::InvalidArgumentError("InvariantAttention: unsupported dtype");
}

}  // namespace banyan::kernels::cuda
