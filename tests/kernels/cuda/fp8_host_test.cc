// The FP8 GEMM path's host-side checks (engine/cuda/fp8_gemm.h, kernels/cuda/fp8_quant.h): the
// shapes the tensor cores cannot take and malformed quantization requests are refused before
// anything reaches the device.
#include <cstdint>

#include "engine/cuda/fp8_gemm.h"
#include "gtest/gtest.h"
#include "kernels/cuda/fp8_quant.h"

namespace banyan::engine::cuda {
namespace {

TEST(Fp8GemmShape, RefusesWidthsTheTensorCoresCannotTake) {
  EXPECT_TRUE(Fp8Gemm::CheckShape(1024, 4096).ok());
  EXPECT_TRUE(Fp8Gemm::CheckShape(1000, 1040).ok());
  const absl::Status k = Fp8Gemm::CheckShape(1024, 1000);  // K not a multiple of 16
  EXPECT_EQ(k.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(k.message().find("1000"), absl::string_view::npos) << k;
  EXPECT_FALSE(Fp8Gemm::CheckShape(1001, 1024).ok());  // N not a multiple of 8
  EXPECT_FALSE(Fp8Gemm::CheckShape(0, 1024).ok());
}

TEST(Fp8QuantArgs, RefusesGroupsOtherThanARowOr128) {
  uint16_t in[4] = {};
  uint8_t codes[4] = {};
  float scales[4] = {};
  const absl::Status s = kernels::cuda::QuantizeRowsFp8(
      kernels::cuda::DType::kBf16,
      {.in = in, .in_stride = 0, .rows = 1, .cols = 4, .group = 2, .codes = codes,
       .scales = scales},
      nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(kernels::cuda::QuantizeRowsFp8(kernels::cuda::DType::kBf16, {}, nullptr).ok());
}

}  // namespace
}  // namespace banyan::engine::cuda
