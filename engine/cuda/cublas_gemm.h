// cuBLAS and cuBLASLt for the CUDA engine: status to absl::Status, and the one GEMM layout the
// engine uses.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace banyan::engine::cuda {

inline absl::Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(st), " (",
                                          cublasGetStatusString(st), ")"));
}

// A cuBLASLt call's status (the FP8 and the deterministic mode's GEMMs), and returning it.
inline absl::Status LtStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt error ", static_cast<int>(st)));
}

#define BANYAN_LT_RETURN_IF_ERROR(expr) \
  BANYAN_RETURN_IF_ERROR(::banyan::engine::cuda::LtStatus((expr), #expr))

// out[M, N] (out_type) = alpha * a[M, K] . w[N, K]^T + beta * out, all row-major: activations
// a by rows, weights w as stored ([out features][in features]), fp32 accumulation. In cuBLAS's
// column-major view this is out^T = w . a^T (w transposed, a as is).
inline absl::Status RowMajorGemm(cublasHandle_t cublas, cudaDataType_t in_type, const void* w,
                                 const void* a, void* out, cudaDataType_t out_type, int64_t M,
                                 int64_t N, int64_t K, const float* alpha, const float* beta) {
  return CublasStatus(
      cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                   static_cast<int>(K), alpha, w, in_type, static_cast<int>(K), a, in_type,
                   static_cast<int>(K), beta, out, out_type, static_cast<int>(N),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace banyan::engine::cuda
