// InvariantGemm (kernels/cuda/invariant_gemm.h) against a float64 CPU product of the same rounded
// inputs, and its point: a row's output bits do not depend on how many rows the product has or
// where the row sits (one row alone, blocks of rows, the whole matrix: every tile shape the launch
// picks by M; a row whose address is not 16-byte aligned). Random data fresh each run, outputs poisoned, NaN never passes.
//
// Tolerance: fp32 sums over K <= 1024 of products exact in fp32: relative error about
// K * 2^-24; 1e-5 for fp32 outputs, 1e-2 for bf16 / fp16 ones (their rounding, 2^-9 / 2^-12).
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/invariant_gemm.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/random.h"

namespace banyan::kernels::cuda {
namespace {

using ::banyan::testing::DeviceArray;
using ::banyan::testing::FromDtype;
using ::banyan::testing::RelErr;
using ::banyan::testing::RoundTo;
using ::banyan::testing::ToDtype;

struct Shape {
  int64_t M, N, K;
  DType dtype;
  bool out_f32;
  float beta;
};

std::vector<float> Random(DType dt, size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = RoundTo(dt, nd(rng));
  return v;
}

// Runs rows [r0, r0 + rows) of a (uploaded at `a`) against w; returns the raw output bytes of
// those rows. `init`: the output's initial contents (read when beta != 0).
std::vector<uint8_t> RunGemm(const Shape& s, const DeviceArray<uint16_t>& a, const DeviceArray<uint16_t>& w,
                         int64_t r0, int64_t rows, const std::vector<float>& init) {
  const size_t es = s.out_f32 ? 4 : 2;
  const size_t n = static_cast<size_t>(rows * s.N);
  std::vector<uint8_t> bytes(n * es);
  if (s.out_f32) {
    std::memcpy(bytes.data(), init.data() + r0 * s.N, bytes.size());
  } else {
    const std::vector<float> part(init.begin() + r0 * s.N, init.begin() + r0 * s.N + n);
    const std::vector<uint16_t> h = ToDtype(s.dtype, part);
    std::memcpy(bytes.data(), h.data(), bytes.size());
  }
  DeviceArray<uint8_t> out(bytes);
  InvariantGemmParams p;
  p.a = a.get() + r0 * s.K;
  p.w = w.get();
  p.out = out.get();
  p.out_f32 = s.out_f32;
  p.M = rows;
  p.N = s.N;
  p.K = s.K;
  p.beta = s.beta;
  const absl::Status st = InvariantGemm(s.dtype, p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out.Download();
}

std::vector<float> AsFloats(const Shape& s, const std::vector<uint8_t>& bytes) {
  if (s.out_f32) {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  std::vector<uint16_t> h(bytes.size() / 2);
  std::memcpy(h.data(), bytes.data(), bytes.size());
  return FromDtype(s.dtype, h);
}

TEST(CudaInvariantGemm, MatchesCpuAndRowsDoNotDependOnM) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Shape> shapes = {
      {300, 200, 172, DType::kBf16, true, 0.0f},   // K not a multiple of 8: element copies
      {77, 256, 512, DType::kFp16, false, 1.0f},   // accumulate into a 16-bit output
      {1, 1000, 64, DType::kBf16, false, 0.0f},
      {130, 72, 8, DType::kBf16, true, 1.0f},      // the residual add: out += a . w^T
      {513, 96, 1024, DType::kBf16, true, 0.0f},
      {64, 130, 40, DType::kFp16, true, 0.0f},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(absl::StrCat("M ", s.M, " N ", s.N, " K ", s.K, " ", DTypeName(s.dtype),
                              s.out_f32 ? " out f32" : " out 16-bit", " beta ", s.beta));
    const std::vector<float> a = Random(s.dtype, s.M * s.K, rng);
    const std::vector<float> w = Random(s.dtype, s.N * s.K, rng);
    std::vector<float> init = Random(s.dtype, s.M * s.N, rng);
    DeviceArray<uint16_t> ad(ToDtype(s.dtype, a)), wd(ToDtype(s.dtype, w));
    const std::vector<uint8_t> full = RunGemm(s, ad, wd, 0, s.M, init);

    std::vector<float> want(s.M * s.N);
    for (int64_t m = 0; m < s.M; ++m) {
      for (int64_t n = 0; n < s.N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < s.K; ++k) acc += double{a[m * s.K + k]} * w[n * s.K + k];
        want[m * s.N + n] = static_cast<float>(acc + (s.beta != 0 ? s.beta * init[m * s.N + n] : 0));
      }
    }
    EXPECT_LT(RelErr(AsFloats(s, full), want), s.out_f32 ? 1e-5 : 1e-2);

    // The same rows from products of other sizes: one row (first, last, a random one), a block.
    const size_t row_bytes = static_cast<size_t>(s.N) * (s.out_f32 ? 4 : 2);
    std::vector<std::pair<int64_t, int64_t>> parts = {{0, 1}, {s.M - 1, 1},
                                                      {static_cast<int64_t>(rng() % s.M), 1}};
    const int64_t r0 = static_cast<int64_t>(rng() % s.M);
    parts.push_back({r0, std::min<int64_t>(37, s.M - r0)});  // each tile shape: M <= 16, <= 32, more
    parts.push_back({r0, std::min<int64_t>(20, s.M - r0)});
    for (const auto& [first, rows] : parts) {
      const std::vector<uint8_t> part = RunGemm(s, ad, wd, first, rows, init);
      EXPECT_EQ(std::memcmp(part.data(), full.data() + first * row_bytes, part.size()), 0)
          << "rows [" << first << ", " << first + rows << ") differ from the same rows of the "
          << s.M << "-row product";
    }
  }
}

TEST(CudaInvariantGemm, RefusesBadShapes) {
  InvariantGemmParams p;
  p.M = -1;
  EXPECT_FALSE(InvariantGemm(DType::kBf16, p, nullptr).ok());
  p.M = 4;
  p.N = 4;
  p.K = 8;  // null operands
  EXPECT_FALSE(InvariantGemm(DType::kBf16, p, nullptr).ok());
}

}  // namespace
}  // namespace banyan::kernels::cuda
