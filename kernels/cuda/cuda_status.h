// Turning CUDA runtime errors into absl::Status, for the host side of kernels/cuda and the CUDA
// backend. Every CUDA call is checked; every launch is followed by cudaGetLastError().
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan::kernels::cuda {

// OK for cudaSuccess; otherwise an error naming `what` and the CUDA error. Out-of-memory maps to
// ResourceExhausted so callers can tell it from a broken kernel.
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                 ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace banyan::kernels::cuda

// Returns from the enclosing function (which returns absl::Status or StatusOr) on a CUDA error.
#define BANYAN_CUDA_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                   \
    const cudaError_t banyan_cuda_err_ = (expr);                                         \
    if (banyan_cuda_err_ != cudaSuccess) {                                               \
      return ::banyan::kernels::cuda::CudaStatus(banyan_cuda_err_, #expr);               \
    }                                                                                    \
  } while (0)

#define BANYAN_RETURN_IF_ERROR(expr)                     \
  do {                                                   \
    const ::absl::Status banyan_status_ = (expr);        \
    if (!banyan_status_.ok()) return banyan_status_;     \
  } while (0)
