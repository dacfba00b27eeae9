// PermuteQkRows and the fp16 / bf16 conversions.
#include <cmath>
#include <limits>
#include <random>

#include "model/dtype.h"
#include "model/model_io.h"
#include "gtest/gtest.h"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

Tensor RandomMatrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Tensor t;
  t.shape = {rows, cols};
  t.data.resize(static_cast<size_t>(rows * cols));
  for (float& x : t.data) x = nd(rng);
  return t;
}

TEST(PermuteQkRows, RoundTripOnRandomData) {
  std::mt19937 rng(std::random_device{}());
  for (auto [heads, head_dim, cols] :
       {std::tuple{1, 2, 3}, std::tuple{4, 8, 5}, std::tuple{8, 64, 17}, std::tuple{2, 128, 1}}) {
    const Tensor orig = RandomMatrix(int64_t{heads} * head_dim, cols, rng);
    Tensor t = orig;
    PermuteQkRows(t, heads, head_dim, RopeStyle::kInterleaved, RopeStyle::kHalf);
    if (head_dim > 2) {
      EXPECT_NE(t.data, orig.data);
    }
    PermuteQkRows(t, heads, head_dim, RopeStyle::kHalf, RopeStyle::kInterleaved);
    testing::ExpectSameTensor(t, orig, "interleaved->half->interleaved");
    PermuteQkRows(t, heads, head_dim, RopeStyle::kHalf, RopeStyle::kInterleaved);
    PermuteQkRows(t, heads, head_dim, RopeStyle::kInterleaved, RopeStyle::kHalf);
    testing::ExpectSameTensor(t, orig, "half->interleaved->half");
    PermuteQkRows(t, heads, head_dim, RopeStyle::kHalf, RopeStyle::kHalf);  // no-op
    testing::ExpectSameTensor(t, orig, "identity");
  }
}

// The map written out: HF's permute() is view(heads, hd/2, 2, in).transpose(1, 2), i.e.
// half row (h, j * hd/2 + i) = interleaved row (h, 2i + j).
TEST(PermuteQkRows, MatchesHuggingFacePermute) {
  const int heads = 3, hd = 6, cols = 2;
  Tensor t;
  t.shape = {heads * hd, cols};
  for (int r = 0; r < heads * hd; ++r) {
    for (int c = 0; c < cols; ++c) t.data.push_back(static_cast<float>(r * 10 + c));
  }
  const Tensor inter = t;
  PermuteQkRows(t, heads, hd, RopeStyle::kInterleaved, RopeStyle::kHalf);
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < hd / 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        for (int c = 0; c < cols; ++c) {
          EXPECT_EQ(t.data[(h * hd + j * hd / 2 + i) * cols + c],
                    inter.data[(h * hd + 2 * i + j) * cols + c]);
        }
      }
    }
  }
  // Head 0 of the half layout: rows 0, 2, 4, 1, 3, 5 of the interleaved one.
  EXPECT_EQ(t.data[0], 0);
  EXPECT_EQ(t.data[1 * cols], 20);
  EXPECT_EQ(t.data[2 * cols], 40);
  EXPECT_EQ(t.data[3 * cols], 10);
}

// Applies RoPE at position `pos` to one head's vector q[0..hd) in the given row order.
// Pair i rotates by pos * theta^(-2i / hd) in both orders; only which rows form the pair differ.
void Rope(float* q, int hd, int pos, RopeStyle style) {
  for (int i = 0; i < hd / 2; ++i) {
    const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
    const int a = style == RopeStyle::kInterleaved ? 2 * i : i;
    const int b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + hd / 2;
    const double x = q[a], y = q[b];
    q[a] = static_cast<float>(x * std::cos(angle) - y * std::sin(angle));
    q[b] = static_cast<float>(x * std::sin(angle) + y * std::cos(angle));
  }
}

std::vector<float> MatVec(const Tensor& w, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(w.shape[0]));
  for (int64_t r = 0; r < w.shape[0]; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < w.shape[1]; ++c) acc += double{w.data[r * w.shape[1] + c]} * x[c];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

// The point of the permutation: attention scores q_m . k_n after RoPE are the same whether the
// weights are in the interleaved order with interleaved RoPE or permuted with rotate-half RoPE.
TEST(PermuteQkRows, PreservesRopeAttentionScores) {
  std::mt19937 rng(std::random_device{}());
  const int heads = 4, kv_heads = 2, hd = 16, dim = heads * hd;
  const Tensor wq = RandomMatrix(heads * hd, dim, rng);
  const Tensor wk = RandomMatrix(kv_heads * hd, dim, rng);
  Tensor wq_half = wq, wk_half = wk;
  PermuteQkRows(wq_half, heads, hd, RopeStyle::kInterleaved, RopeStyle::kHalf);
  PermuteQkRows(wk_half, kv_heads, hd, RopeStyle::kInterleaved, RopeStyle::kHalf);
  std::normal_distribution<float> nd;
  std::vector<float> xm(dim), xn(dim);
  for (float& v : xm) v = nd(rng);
  for (float& v : xn) v = nd(rng);
  const int m = 37, n = 5;
  std::vector<float> qi = MatVec(wq, xm), ki = MatVec(wk, xn);
  std::vector<float> qh = MatVec(wq_half, xm), kh = MatVec(wk_half, xn);
  for (int h = 0; h < heads; ++h) Rope(&qi[h * hd], hd, m, RopeStyle::kInterleaved);
  for (int h = 0; h < heads; ++h) Rope(&qh[h * hd], hd, m, RopeStyle::kHalf);
  for (int h = 0; h < kv_heads; ++h) Rope(&ki[h * hd], hd, n, RopeStyle::kInterleaved);
  for (int h = 0; h < kv_heads; ++h) Rope(&kh[h * hd], hd, n, RopeStyle::kHalf);
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    double si = 0, sh = 0, norm = 0;
    for (int d = 0; d < hd; ++d) {
      si += double{qi[h * hd + d]} * ki[g * hd + d];
      sh += double{qh[h * hd + d]} * kh[g * hd + d];
      norm += std::abs(double{qi[h * hd + d]} * ki[g * hd + d]);
    }
    EXPECT_NEAR(si, sh, 1e-5 * norm) << "head " << h;
  }
  // And the unpermuted weights with rotate-half RoPE give different scores (the test has teeth).
  std::vector<float> qw = MatVec(wq, xm), kw = MatVec(wk, xn);
  Rope(&qw[0], hd, m, RopeStyle::kHalf);
  Rope(&kw[0], hd, n, RopeStyle::kHalf);
  double sw = 0, si0 = 0;
  for (int d = 0; d < hd; ++d) {
    sw += double{qw[d]} * kw[d];
    si0 += double{qi[d]} * ki[d];
  }
  EXPECT_GT(std::abs(sw - si0), 1e-3);
}

TEST(Dtype, Bf16) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.4e38f)), std::numeric_limits<float>::infinity());
}

TEST(Dtype, Half) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);               // rounds up to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);     // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  // Every finite half survives half -> float -> half exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
}

// FloatToHalf / FloatToBf16 pick the nearest representable value (ties checked above).
TEST(Dtype, NarrowingIsNearest) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-30, 17);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(mant(rng), exp(rng));
    const uint16_t h = FloatToHalf(f);
    if (std::abs(f) >= 65520.0f) {
      ASSERT_EQ(h & 0x7fff, 0x7c00) << f;  // overflow saturates to infinity
      continue;
    }
    const double err = std::abs(double{HalfToFloat(h)} - f);
    for (int delta : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + delta);
      if ((n & 0x7c00) == 0x7c00 || ((n ^ h) & 0x8000)) continue;  // inf/NaN or sign flip
      ASSERT_LE(err, std::abs(double{HalfToFloat(n)} - f)) << f;
    }
    const uint16_t b = FloatToBf16(f);
    const double berr = std::abs(double{Bf16ToFloat(b)} - f);
    for (int delta : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(b + delta);
      if ((n & 0x7f80) == 0x7f80 || ((n ^ b) & 0x8000)) continue;
      ASSERT_LE(berr, std::abs(double{Bf16ToFloat(n)} - f)) << f;
    }
  }
}

}  // namespace
}  // namespace banyan::model
