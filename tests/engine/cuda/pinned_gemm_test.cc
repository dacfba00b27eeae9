// PinnedGemm (engine/cuda/pinned_gemm.h), the deterministic mode's GEMMs: against a float64 CPU
// product of the same rounded inputs (a sample of rows and columns), and its point: a row's
// output bits do not depend on how many rows the product has or where the row sits. On the
// projection shapes of the 8B models (and the bundled model's), cuBLASLt must be pinned on
// Hopper: a fallback to InvariantGemm there fails the test, since it would cost the speed the
// class exists for. A shape cuBLASLt cannot take (K not a multiple of 8) falls back and stays
// invariant. Random data fresh each run, outputs poisoned, NaN never passes.
//
// Tolerance: products exact in fp32, sums rounded: see the bound at the check (about
// 8 sqrt(K) 2^-24 for fp32 outputs), 1e-2 for 16-bit outputs (their own rounding).
#include "engine/cuda/pinned_gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/random.h"

namespace banyan::engine::cuda {
namespace {

using ::banyan::testing::DeviceArray;
using ::banyan::testing::FromDtype;
using ::banyan::testing::RelErr;
using ::banyan::testing::RoundTo;
using ::banyan::testing::ToDtype;
using kernels::cuda::DType;

struct Shape {
  int64_t M, N, K;
  DType dtype;
  bool out_f32;
  float beta;
  bool must_pin;  // on compute capability 9.0+
};

std::vector<float> Random(DType dt, size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = RoundTo(dt, nd(rng));
  return v;
}

int Major() {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major;
}

TEST(PinnedGemm, MatchesCpuAndRowsDoNotDependOnM) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Shape> shapes = {
      {300, 6144, 4096, DType::kBf16, false, 0.0f, true},  // 8B QKV, narrowed output
      {300, 4096, 4096, DType::kBf16, true, 1.0f, true},   // 8B attention out: += into x
      {300, 2048, 14336, DType::kBf16, true, 1.0f, true},  // the down projection's K
      {300, 32000, 1024, DType::kBf16, true, 0.0f, true},  // an LM head
      {300, 192, 64, DType::kBf16, true, 0.0f, true},      // stories260K's QKV
      {130, 1024, 512, DType::kFp16, false, 0.0f, true},
      {100, 200, 172, DType::kBf16, true, 1.0f, false},  // K % 8 != 0: InvariantGemm
  };
  absl::StatusOr<std::unique_ptr<PinnedGemm>> g = PinnedGemm::Create(DType::kBf16);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<PinnedGemm>> g16 = PinnedGemm::Create(DType::kFp16);
  ASSERT_TRUE(g16.ok()) << g16.status();
  const bool hopper = Major() >= 9;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(absl::StrCat("M ", s.M, " N ", s.N, " K ", s.K, " ", DTypeName(s.dtype),
                              s.out_f32 ? " out f32" : " out 16-bit", " beta ", s.beta));
    PinnedGemm& gemm = s.dtype == DType::kBf16 ? **g : **g16;
    const cudaDataType_t out_type =
        s.out_f32 ? CUDA_R_32F : (s.dtype == DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F);
    const std::vector<float> a = Random(s.dtype, s.M * s.K, rng);
    const std::vector<float> w = Random(s.dtype, s.N * s.K, rng);
    const std::vector<float> init = Random(s.dtype, s.M * s.N, rng);
    DeviceArray<uint16_t> ad(ToDtype(s.dtype, a)), wd(ToDtype(s.dtype, w));
    ASSERT_TRUE(gemm.Prepare(wd.get(), s.N, s.K, out_type, nullptr).ok());
    const std::string decision = gemm.Decision(s.N, s.K, out_type);
    if (s.must_pin && hopper) {
      EXPECT_TRUE(decision == "many" || decision.rfind("tiers ", 0) == 0) << decision;
    }
    if (!s.must_pin) {
      EXPECT_EQ(decision.rfind("fallback", 0), 0u) << decision;
    }

    const size_t es = s.out_f32 ? 4 : 2, row_bytes = static_cast<size_t>(s.N) * es;
    std::vector<uint8_t> init_bytes(static_cast<size_t>(s.M) * row_bytes);
    if (s.out_f32) {
      std::memcpy(init_bytes.data(), init.data(), init_bytes.size());
    } else {
      const std::vector<uint16_t> h = ToDtype(s.dtype, init);
      std::memcpy(init_bytes.data(), h.data(), init_bytes.size());
    }
    // Rows [r0, r0 + rows) as a product of `rows` rows; their output bytes. The output starts as
    // `init` where beta != 0, else poisoned (NaN).
    auto run = [&](int64_t r0, int64_t rows) {
      std::vector<uint8_t> bytes(init_bytes.begin() + r0 * row_bytes,
                                 init_bytes.begin() + (r0 + rows) * row_bytes);
      if (s.beta == 0.0f) std::fill(bytes.begin(), bytes.end(), 0xff);
      DeviceArray<uint8_t> out(bytes);
      const absl::Status st = gemm.Run(wd.get(), ad.get() + r0 * s.K, out.get(), out_type, rows,
                                       s.N, s.K, s.beta, nullptr);
      EXPECT_TRUE(st.ok()) << st;
      return out.Download();
    };
    const std::vector<uint8_t> full = run(0, s.M);
    auto value = [&](int64_t m, int64_t n) -> float {
      if (s.out_f32) {
        float f;
        std::memcpy(&f, full.data() + (m * s.N + n) * 4, 4);
        return f;
      }
      uint16_t h;
      std::memcpy(&h, full.data() + (m * s.N + n) * 2, 2);
      return FromDtype(s.dtype, {h})[0];
    };
    std::vector<float> got, want;
    for (int i = 0; i < 512; ++i) {
      const int64_t m = static_cast<int64_t>(rng() % s.M), n = static_cast<int64_t>(rng() % s.N);
      double acc = 0;
      for (int64_t k = 0; k < s.K; ++k) acc += double{a[m * s.K + k]} * w[n * s.K + k];
      if (s.beta != 0) acc += s.beta * double{init[m * s.N + n]};
      want.push_back(static_cast<float>(acc));
      got.push_back(value(m, n));
    }
    // fp32 sums of K products: rounding errors grow as a random walk, about sqrt(K) x 2^-24
    // (the tensor cores' adder trees included); 8x that, at least 1e-5. At K = 14,336 an H100
    // gave 1.7e-5 against 5.7e-5 allowed.
    const double f32_tol = std::max(1e-5, 8 * std::sqrt(static_cast<double>(s.K)) * 0x1p-24);
    EXPECT_LT(RelErr(got, want), s.out_f32 ? f32_tol : 1e-2);

    // The same rows from products of other sizes: one row (first, last, a random one), blocks
    // at and just above each tier's rows (PinnedGemm::kTiers), so every algorithm kept is
    // compared with the full product.
    const int64_t r0 = static_cast<int64_t>(rng() % s.M);
    std::vector<std::pair<int64_t, int64_t>> parts = {
        {0, 1}, {s.M - 1, 1}, {static_cast<int64_t>(rng() % s.M), 1},
        {r0, std::min<int64_t>(7, s.M - r0)}, {r0, s.M - r0}};
    for (const PinnedGemm::Tier& t : PinnedGemm::kTiers) {
      for (const int64_t rows : {t.max_rows, t.max_rows + 1}) {
        if (rows <= s.M) parts.push_back({static_cast<int64_t>(rng() % (s.M - rows + 1)), rows});
      }
    }
    for (const auto& [first, rows] : parts) {
      const std::vector<uint8_t> part = run(first, rows);
      EXPECT_EQ(std::memcmp(part.data(), full.data() + first * row_bytes, part.size()), 0)
          << "rows [" << first << ", " << first + rows << ") differ from the same rows of the "
          << s.M << "-row product (" << decision << ")";
    }
  }
  std::cout << "bf16: " << (*g)->Summary() << "\nfp16: " << (*g16)->Summary() << "\n";
}

TEST(PinnedGemm, RefusesMisalignedOperandsWhenPinned) {
  absl::StatusOr<std::unique_ptr<PinnedGemm>> g = PinnedGemm::Create(DType::kBf16);
  ASSERT_TRUE(g.ok()) << g.status();
  BANYAN_SEEDED_RNG(rng);
  DeviceArray<uint16_t> w(ToDtype(DType::kBf16, Random(DType::kBf16, 256 * 64, rng)));
  DeviceArray<uint16_t> a(ToDtype(DType::kBf16, Random(DType::kBf16, 8 * 64 + 1, rng)));
  DeviceArray<float> out(8 * 256);
  ASSERT_TRUE((*g)->Prepare(w.get(), 256, 64, CUDA_R_32F, nullptr).ok());
  // InvariantGemm (the fallback, before Hopper) takes any alignment; the pinned algorithm was
  // chosen for 16-byte operands and refuses others instead of reading them wrongly.
  const bool pinned = (*g)->Decision(256, 64, CUDA_R_32F).rfind("fallback", 0) != 0;
  if (Major() >= 9) {
    EXPECT_TRUE(pinned) << (*g)->Decision(256, 64, CUDA_R_32F);
  }
  const absl::Status st =
      (*g)->Run(w.get(), a.get() + 1, out.get(), CUDA_R_32F, 8, 256, 64, 0.0f, nullptr);
  EXPECT_EQ(st.code(), pinned ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kOk) << st;
}

}  // namespace
}  // namespace banyan::engine::cuda
