// Helpers for the GPU tests: typed device buffers, host-side
// rounding to bf16/fp16 (so CPU references see exactly the values the GPU reads), and the
// relative-norm error that NaN never passes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/dtype.h"

namespace banyan::testing {

#define BANYAN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// Rounds to the dtype and back, as the GPU stores it.
inline float RoundTo(kernels::cuda::DType dt, float x) {
  if (dt == kernels::cuda::DType::kBf16) return __bfloat162float(__float2bfloat16_rn(x));
  return __half2float(__float2half_rn(x));
}

inline std::vector<uint16_t> ToDtype(kernels::cuda::DType dt, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == kernels::cuda::DType::kBf16) {
      const __nv_bfloat16_raw b = __float2bfloat16_rn(v[i]);
      out[i] = b.x;
    } else {
      const __half_raw h = __float2half_rn(v[i]);
      out[i] = h.x;
    }
  }
  return out;
}

inline std::vector<float> FromDtype(kernels::cuda::DType dt, const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == kernels::cuda::DType::kBf16) {
      __nv_bfloat16_raw b;
      b.x = v[i];
      out[i] = __bfloat162float(__nv_bfloat16(b));
    } else {
      __half_raw h;
      h.x = v[i];
      out[i] = __half2float(__half(h));
    }
  }
  return out;
}

// ||got - want|| / ||want||; +inf when sizes differ or any value of `got` is not finite.
inline double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A typed device array, poisoned with 0xff bytes (NaN in bf16, fp16 and fp32) on allocation.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ == 0) return;
    if (cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << n_ * sizeof(T) << " bytes failed";
      p_ = nullptr;
      return;
    }
    Poison();
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { Upload(v); }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void Poison() {
    if (p_ != nullptr) {
      EXPECT_EQ(cudaMemset(p_, 0xff, n_ * sizeof(T)), cudaSuccess);
    }
  }
  void Upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n_);
    if (n_ > 0) {
      ASSERT_EQ(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<T> Download() const {
    std::vector<T> v(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace banyan::testing
