#include "kernels/cuda/layer_kernels.cuh"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace banyan::kernels::cuda {
namespace {

constexpr int kThreads = 256;

int RowThreads(int dim) { return dim >= 1024 ? 1024 : std::max(32, (dim + 31) / 32 * 32); }

template <typename T>
cudaError_t EmbeddingDispatched(const EmbeddingParams& p, cudaStream_t s) {
  if (p.rows == 0) return cudaSuccess;
  EmbeddingKernel<T><<<p.rows, RowThreads(p.dim), 0, s>>>(p);
  return cudaGetLastError();
}

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

bool RmsNormVectorizes(const RmsNormParams& p) {
  return p.dim % 4 == 0 && p.dim / 4 <= kRmsVecs * 1024 && Aligned(p.x, 16) &&
         Aligned(p.weight, 16) && Aligned(p.out, 8);
}

// Whether the vectorized kernel can also write the FP8 codes: 4-byte code stores, and groups of
// 128 that are whole warps' vectors.
bool RmsNormFusesFp8(const RmsNormParams& p) {
  return RmsNormVectorizes(p) && Aligned(p.fp8_codes, 4) &&
         (p.fp8_group == p.dim || (p.fp8_group == kFp8Group && p.dim % kFp8Group == 0));
}

template <typename T>
cudaError_t RmsNormDispatched(const RmsNormParams& p, cudaStream_t s) {
  if (p.rows == 0) return cudaSuccess;
  const int vecs = p.dim / 4;
  if (RmsNormVectorizes(p)) {
    // The fewest threads that hold the row in kRmsVecs vectors each (128 for dim 4,096).
    const int threads = std::max(32, (vecs + kRmsVecs - 1) / kRmsVecs + 31) / 32 * 32;
    const int blocks = p.fp8_codes != nullptr ? std::max(p.rows, p.fp8_pad_rows) : p.rows;
    RmsNormVecKernel<T><<<blocks, threads, 0, s>>>(p);
  } else {
    RmsNormKernel<T><<<p.rows, RowThreads(p.dim), 0, s>>>(p);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t RopeKvDispatched(const RopeKvParams& p, cudaStream_t s) {
  const int pairs = (p.num_q_heads + 2 * p.kv.num_kv_heads) * (p.kv.head_dim / 2);
  if (p.tokens == 0 || pairs == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min(p.tokens, 1 << 20));
  const int in_bytes = p.qkv_in_dtype ? 16 : 32;  // eight input elements
  if (p.kv.head_dim % 16 == 0 && Aligned(p.qkv, in_bytes) && Aligned(p.q_out, 16) &&
      Aligned(p.kv.base, 16) && p.kv.v_offset % 8 == 0 && p.kv.chunk_stride % 8 == 0) {
    const int units = p.interleaved ? pairs / 4 : pairs / 8;  // eight (or 2 x 8) elements each
    const int threads = std::min(256, (units + 31) / 32 * 32);
    const size_t smem = sizeof(float) * p.kv.head_dim;
    if (p.qkv_in_dtype) {
      RopeKvVecKernel<T, T><<<blocks, threads, smem, s>>>(p);
    } else {
      RopeKvVecKernel<T, float><<<blocks, threads, smem, s>>>(p);
    }
    return cudaGetLastError();
  }
  const int threads = std::min(1024, (pairs + 31) / 32 * 32);
  if (p.qkv_in_dtype) {
    RopeKvKernel<T, T><<<blocks, threads, 0, s>>>(p);
  } else {
    RopeKvKernel<T, float><<<blocks, threads, 0, s>>>(p);
  }
  return cudaGetLastError();
}

// K and V of an FP8 cache: one warp per (token, kv head, K or V), 8 warps a block.
template <typename T>
cudaError_t WriteKvFp8Dispatched(const RopeKvParams& p, cudaStream_t s) {
  const int64_t warps = static_cast<int64_t>(p.tokens) * 2 * p.kv.num_kv_heads;
  if (warps == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((warps + 7) / 8, 1 << 20));
  if (p.qkv_in_dtype) {
    WriteKvFp8Kernel<T><<<blocks, 256, 0, s>>>(p);
  } else {
    WriteKvFp8Kernel<float><<<blocks, 256, 0, s>>>(p);
  }
  return cudaGetLastError();
}

// The cluster kernel: per-token scales, at most kSwiGluClusterRows rows (with padding), a row
// whose slices fit 256 threads x kSwiGluVecs vectors, and a device of compute capability 9.0+
// (asked once; the kernel is empty below it).
constexpr int kSwiGluClusterRows = 16;
bool SwiGluFp8UsesCluster(const SwiGluParams& p) {
  static const bool clusters = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
               cudaSuccess &&
           major >= 9;
  }();
  const int per_block = (p.hidden / 8 + kSwiGluCluster - 1) / kSwiGluCluster;
  return clusters && p.fp8_group == p.hidden &&
         std::max(p.rows, p.fp8_pad_rows) <= kSwiGluClusterRows && per_block <= 256 * kSwiGluVecs;
}

template <typename T>
cudaError_t SwiGluDispatched(const SwiGluParams& p, cudaStream_t s) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  const int per_row = p.hidden % 8 == 0 ? p.hidden / 8 : p.hidden;
  const dim3 grid(static_cast<unsigned>(std::min((per_row + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min(p.rows, 65535)));
  if (p.fp8_codes != nullptr && SwiGluFp8UsesCluster(p)) {
    const int vecs = (p.hidden / 8 + kSwiGluCluster - 1) / kSwiGluCluster;  // per block
    const int threads = std::max(32, (std::min(vecs, 256) + 31) / 32 * 32);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kSwiGluCluster, static_cast<unsigned>(std::max(p.rows, p.fp8_pad_rows)));
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kSwiGluCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return p.gate_up_in_dtype ? cudaLaunchKernelEx(&cfg, SwiGluFp8ClusterKernel<T, T>, p)
                              : cudaLaunchKernelEx(&cfg, SwiGluFp8ClusterKernel<T, float>, p);
  }
  if (p.fp8_codes != nullptr) {  // SwiGluFusesFp8 holds (SwiGlu checks)
    const int vecs = p.hidden / 8;
    const int threads = std::max(32, (vecs + kSwiGluVecs - 1) / kSwiGluVecs + 31) / 32 * 32;
    const unsigned blocks = static_cast<unsigned>(std::max(p.rows, p.fp8_pad_rows));
    if (p.gate_up_in_dtype) {
      SwiGluFp8Kernel<T, T><<<blocks, threads, 0, s>>>(p);
    } else {
      SwiGluFp8Kernel<T, float><<<blocks, threads, 0, s>>>(p);
    }
    return cudaGetLastError();
  }
  if (p.gate_up_in_dtype) {
    SwiGluKernel<T, T><<<grid, kThreads, 0, s>>>(p);
  } else {
    SwiGluKernel<T, float><<<grid, kThreads, 0, s>>>(p);
  }
  return cudaGetLastError();
}

bool SwiGluFusesFp8(const SwiGluParams& p) {
  return p.hidden % 8 == 0 && p.hidden / 8 <= kSwiGluVecs * 1024 && Aligned(p.fp8_codes, 8) &&
         (p.fp8_group == p.hidden || (p.fp8_group == kFp8Group && p.hidden % kFp8Group == 0));
}

// The one runtime dispatch point over dtypes for the layer kernels.
template <template <typename> class F, typename P>
absl::Status ByDtype(DType dtype, const P& p, cudaStream_t s, const char* what) {
  cudaError_t err;
  switch (dtype) {
    case DType::kBf16:
      err = F<__nv_bfloat16>::Run(p, s);
      break;
    case DType::kFp16:
      err = F<__half>::Run(p, s);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported dtype ",
                                                     static_cast<int>(dtype)));
  }
  return CudaStatus(err, what);
}

template <typename T>
struct EmbeddingOp {
  static cudaError_t Run(const EmbeddingParams& p, cudaStream_t s) {
    return EmbeddingDispatched<T>(p, s);
  }
};
template <typename T>
struct RmsNormOp {
  static cudaError_t Run(const RmsNormParams& p, cudaStream_t s) {
    return RmsNormDispatched<T>(p, s);
  }
};
template <typename T>
struct RopeKvOp {
  static cudaError_t Run(const RopeKvParams& p, cudaStream_t s) { return RopeKvDispatched<T>(p, s); }
};
template <typename T>
struct WriteKvFp8Op {
  static cudaError_t Run(const RopeKvParams& p, cudaStream_t s) {
    return WriteKvFp8Dispatched<T>(p, s);
  }
};
template <typename T>
struct SwiGluOp {
  static cudaError_t Run(const SwiGluParams& p, cudaStream_t s) { return SwiGluDispatched<T>(p, s); }
};

// The fallback of a kernel that cannot write its FP8 output itself (RmsNormParams' and
// SwiGluParams' fp8_* fields): QuantizeRowsFp8 over what it wrote, in the same layout.
// Whether `p` asks for an FP8 output the kernels can give (over `cols` elements a row).
template <typename Params>
absl::Status CheckFp8Output(const Params& p, int32_t cols, const char* kernel) {
  if (p.fp8_scales != nullptr && (p.fp8_group == cols || p.fp8_group == kFp8Group)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kernel, ": an FP8 output needs scales and a group of its width or kFp8Group"));
}

template <typename Params>
absl::Status QuantizeOutputFp8(DType dtype, const void* out, int32_t rows, int32_t cols,
                               const Params& p, cudaStream_t stream) {
  QuantizeFp8Params q;
  q.in = out;
  q.rows = rows;
  q.cols = cols;
  q.group = p.fp8_group;
  q.codes = p.fp8_codes;
  q.scales = p.fp8_scales;
  q.pad_rows = p.fp8_pad_rows;
  q.group_major = true;  // per token the two layouts are one
  return QuantizeRowsFp8(dtype, q, stream);
}

}  // namespace

absl::Status EmbeddingGather(DType dtype, const EmbeddingParams& p, cudaStream_t stream) {
  return ByDtype<EmbeddingOp>(dtype, p, stream, "EmbeddingGather");
}

absl::Status RmsNorm(DType dtype, const RmsNormParams& p, cudaStream_t stream) {
  if (p.fp8_codes == nullptr) return ByDtype<RmsNormOp>(dtype, p, stream, "RmsNorm");
  BANYAN_RETURN_IF_ERROR(CheckFp8Output(p, p.dim, "RmsNorm"));
  if (RmsNormFusesFp8(p)) return ByDtype<RmsNormOp>(dtype, p, stream, "RmsNorm (FP8 out)");
  RmsNormParams plain = p;
  plain.fp8_codes = nullptr;
  BANYAN_RETURN_IF_ERROR(ByDtype<RmsNormOp>(dtype, plain, stream, "RmsNorm"));
  return QuantizeOutputFp8(dtype, p.out, p.rows, p.dim, p, stream);
}

absl::Status RopeWriteKv(DType dtype, const RopeKvParams& p, cudaStream_t stream) {
  if (p.kv.head_dim % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RopeWriteKv: head_dim ", p.kv.head_dim, " is not a multiple of 8"));
  }
  if (!KvIsFp8Host(p.kv)) return ByDtype<RopeKvOp>(dtype, p, stream, "RopeWriteKv");
  if (p.kv.head_dim > 64 * kKvFp8MaxPairsPerLane) {
    return absl::InvalidArgumentError(absl::StrCat("RopeWriteKv: an FP8 KV cache takes head_dim ",
                                                   64 * kKvFp8MaxPairsPerLane, " at most, not ",
                                                   p.kv.head_dim));
  }
  const absl::Status q = ByDtype<RopeKvOp>(dtype, p, stream, "RopeWriteKv");  // q only
  if (!q.ok()) return q;
  return ByDtype<WriteKvFp8Op>(dtype, p, stream, "RopeWriteKv (FP8 K/V)");
}

absl::Status SwiGlu(DType dtype, const SwiGluParams& p, cudaStream_t stream) {
  // The vector path reads and writes 8 elements at a time from every row's start.
  const uintptr_t in_align = p.gate_up_in_dtype ? 16 : 32;
  if (p.hidden % 8 == 0 && (!Aligned(p.gate_up, in_align) || !Aligned(p.out, 16))) {
    return absl::InvalidArgumentError("SwiGlu: gate_up or out is not aligned for vector access");
  }
  if (p.fp8_codes == nullptr) return ByDtype<SwiGluOp>(dtype, p, stream, "SwiGlu");
  BANYAN_RETURN_IF_ERROR(CheckFp8Output(p, p.hidden, "SwiGlu"));
  if (SwiGluFusesFp8(p)) return ByDtype<SwiGluOp>(dtype, p, stream, "SwiGlu (FP8 out)");
  SwiGluParams plain = p;
  plain.fp8_codes = nullptr;
  BANYAN_RETURN_IF_ERROR(ByDtype<SwiGluOp>(dtype, plain, stream, "SwiGlu"));
  return QuantizeOutputFp8(dtype, p.out, p.rows, p.hidden, p, stream);
}

absl::Status QkvBiasNorm(const QkvBiasNormParams& p, cudaStream_t stream) {
  constexpr int kMaxHeadDim = 256;
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim || (p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("QkvBiasNorm: head_dim ", p.head_dim,
                                                   " outside [1, ", kMaxHeadDim,
                                                   "] or only one of q_norm / k_norm"));
  }
  const int64_t warps =
      static_cast<int64_t>(p.tokens) * (p.num_q_heads + 2 * int64_t{p.num_kv_heads});
  if (warps == 0 || (p.bias == nullptr && p.q_norm == nullptr)) return absl::OkStatus();
  constexpr int kWarpsPerBlock = 4;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (p.head_dim <= 128) {
    QkvBiasNormKernel<4><<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(p);
  } else {
    QkvBiasNormKernel<8><<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(p);
  }
  return CudaStatus(cudaGetLastError(), "QkvBiasNorm");
}

absl::Status CopyKvSlots(const CopyKvSlotsParams& p, cudaStream_t stream) {
  if (p.kv.head_dim % 8 != 0 || p.slot_begin < 0 || p.slot_end > p.kv.chunk_size ||
      p.slot_begin > p.slot_end || p.dst_begin < 0 ||
      p.dst_begin + (p.slot_end - p.slot_begin) > p.kv.chunk_size) {
    return absl::InvalidArgumentError(absl::StrCat("CopyKvSlots: bad slot range [", p.slot_begin,
                                                   ", ", p.slot_end, ") to ", p.dst_begin,
                                                   " or head_dim ", p.kv.head_dim));
  }
  if (p.slot_begin == p.slot_end || p.num_layers == 0) return absl::OkStatus();
  if (KvIsFp8Host(p.kv)) {
    CopyKvSlotsFp8Kernel<<<p.num_layers * 2 * p.kv.num_kv_heads, 128, 0, stream>>>(p);
  } else {
    CopyKvSlotsKernel<<<p.num_layers * 2 * p.kv.num_kv_heads, 128, 0, stream>>>(p);
  }
  return CudaStatus(cudaGetLastError(), "CopyKvSlots");
}

absl::Status ArgmaxRows(const ArgmaxParams& p, cudaStream_t stream) {
  if (p.rows == 0) return absl::OkStatus();
  ArgmaxKernel<<<p.rows, 512, 0, stream>>>(p);
  return CudaStatus(cudaGetLastError(), "ArgmaxRows");
}

std::vector<const void*> EarlyLaunchKernels() {
  using bf16 = __nv_bfloat16;
  // Built without sm_90 code (PTX for an older architecture, JIT-compiled on this device) the
  // waits compile to nothing: then none may be launched early.
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, RmsNormVecKernel<bf16>) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (attr.ptxVersion < 90) return {};
  return {
      reinterpret_cast<const void*>(RmsNormKernel<bf16>),
      reinterpret_cast<const void*>(RmsNormKernel<__half>),
      reinterpret_cast<const void*>(RmsNormVecKernel<bf16>),
      reinterpret_cast<const void*>(RmsNormVecKernel<__half>),
      reinterpret_cast<const void*>(RopeKvKernel<bf16, bf16>),
      reinterpret_cast<const void*>(RopeKvKernel<bf16, float>),
      reinterpret_cast<const void*>(RopeKvKernel<__half, __half>),
      reinterpret_cast<const void*>(RopeKvKernel<__half, float>),
      reinterpret_cast<const void*>(RopeKvVecKernel<bf16, bf16>),
      reinterpret_cast<const void*>(RopeKvVecKernel<bf16, float>),
      reinterpret_cast<const void*>(RopeKvVecKernel<__half, __half>),
      reinterpret_cast<const void*>(RopeKvVecKernel<__half, float>),
      reinterpret_cast<const void*>(WriteKvFp8Kernel<bf16>),
      reinterpret_cast<const void*>(WriteKvFp8Kernel<__half>),
      reinterpret_cast<const void*>(WriteKvFp8Kernel<float>),
      reinterpret_cast<const void*>(QkvBiasNormKernel<4>),
      reinterpret_cast<const void*>(QkvBiasNormKernel<8>),
      reinterpret_cast<const void*>(SwiGluKernel<bf16, bf16>),
      reinterpret_cast<const void*>(SwiGluKernel<bf16, float>),
      reinterpret_cast<const void*>(SwiGluKernel<__half, __half>),
      reinterpret_cast<const void*>(SwiGluKernel<__half, float>),
      reinterpret_cast<const void*>(SwiGluFp8Kernel<bf16, bf16>),
      reinterpret_cast<const void*>(SwiGluFp8Kernel<bf16, float>),
      reinterpret_cast<const void*>(SwiGluFp8Kernel<__half, __half>),
      reinterpret_cast<const void*>(SwiGluFp8Kernel<__half, float>),
      reinterpret_cast<const void*>(ArgmaxKernel),
  };
}

}  // namespace banyan::kernels::cuda
