// FP8: the E4M3 codec against the format's definition (all 256 codes, round trips, ties to
// even, saturation), QuantizedTensor's Dequantize per scale kind, --quantization fp8's rule,
// the dummy FP8 weights and the 70B shape, and the writer refusing FP8 weights.
#include <cmath>
#include <cstring>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/dtype.h"
#include "model/dummy_weights.h"
#include "model/model_bundle.h"
#include "model/model_io.h"
#include "model/quantized.h"
#include "model/weights_layout.h"
#include "tests/model/fp8_test_util.h"
#include "tests/testing/random.h"

namespace banyan::model {
namespace {

using ::testing::HasSubstr;
using testing::Fp8E4M3Definition;
using testing::NearestFp8E4M3;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Fp8E4M3, DecodesAll256CodesByTheDefinition) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double want = Fp8E4M3Definition(static_cast<uint8_t>(c));
    const float got = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_TRUE(IsFp8E4M3Nan(static_cast<uint8_t>(c))) << c;
      ++nans;
      continue;
    }
    EXPECT_FALSE(IsFp8E4M3Nan(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;  // -0 included
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only: no infinities in e4m3fn
  // Landmarks of the format.
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);
  for (int m = 1; m < 8; ++m) EXPECT_EQ(Fp8E4M3ToFloat(m), m * std::ldexp(1.0f, -9)) << m;
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (IsFp8E4M3Nan(static_cast<uint8_t>(c))) continue;
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Fp8E4M3, RoundsToNearestWithTiesToEven) {
  // Between each pair of neighbouring codes: the midpoint goes to the even code, anything on
  // either side of it to that side's code. Positive and negative.
  for (int c = 0; c < 0x7e; ++c) {
    for (int sign : {0, 0x80}) {
      const uint8_t lo = static_cast<uint8_t>(c | sign), hi = static_cast<uint8_t>((c + 1) | sign);
      const float a = Fp8E4M3ToFloat(lo), b = Fp8E4M3ToFloat(hi);
      const float mid = (a + b) / 2;  // exact: neighbours differ in one bit of a short significand
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2);
      const uint8_t even = (lo & 1) == 0 ? lo : hi;
      EXPECT_EQ(FloatToFp8E4M3(mid), even) << "between codes " << int{lo} << " and " << int{hi};
      EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, a)), lo) << int{lo};
      EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, b)), hi) << int{hi};
    }
  }
  // Random floats over the whole range against the brute-force nearest code.
  BANYAN_SEEDED_RNG(rng);
  std::uniform_real_distribution<float> exp(-14, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(exp(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    ASSERT_EQ(FloatToFp8E4M3(x), NearestFp8E4M3(x)) << "x = " << x;
  }
}

TEST(Fp8E4M3, SaturatesAndKeepsNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(FloatToFp8E4M3(x), 0x7e) << x;
    EXPECT_EQ(FloatToFp8E4M3(-x), 0xfe) << -x;
  }
  EXPECT_TRUE(IsFp8E4M3Nan(FloatToFp8E4M3(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsFp8E4M3Nan(FloatToFp8E4M3(-std::numeric_limits<float>::quiet_NaN())));
  // Below the smallest subnormal: half of it is a tie to 0 (even), anything above goes to it.
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(1e-30f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-1e-30f), 0x80);  // -0 keeps its sign
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Fp8E5M2, DecodesAsTheTopByteOfAHalf) {
  EXPECT_EQ(Fp8E5M2ToFloat(0x3c), 1.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(Fp8E5M2ToFloat(0x7c)));
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(0x7d)));
  EXPECT_EQ(Fp8E5M2ToFloat(0x01), std::ldexp(1.0f, -16));
}

// A [rows, cols] QuantizedTensor of random finite codes and random positive scales.
QuantizedTensor RandomQuantized(Fp8ScaleKind kind, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  QuantizedTensor q;
  q.shape = {rows, cols};
  q.scale_kind = kind;
  q.codes.resize(static_cast<size_t>(rows * cols));
  for (uint8_t& c : q.codes) {
    do c = static_cast<uint8_t>(rng()); while (IsFp8E4M3Nan(c));
  }
  int64_t n = 1;
  for (int64_t s : Fp8ScaleShape(kind, rows, cols)) n *= s;
  std::uniform_real_distribution<float> u(0.001f, 2.0f);
  for (int64_t i = 0; i < n; ++i) q.scales.push_back(u(rng));
  return q;
}

TEST(QuantizedTensor, DequantizeFollowsTheScaleLayout) {
  BANYAN_SEEDED_RNG(rng);
  for (Fp8ScaleKind kind :
       {Fp8ScaleKind::kPerTensor, Fp8ScaleKind::kPerChannel, Fp8ScaleKind::kBlock128}) {
    SCOPED_TRACE(std::string(Fp8ScaleKindName(kind)));
    const int64_t rows = 300, cols = 130;  // partial blocks in both directions
    QuantizedTensor q = RandomQuantized(kind, rows, cols, rng);
    ASSERT_TRUE(CheckQuantized(q, "q").ok());
    Tensor t;
    t.data.assign(1, std::numeric_limits<float>::quiet_NaN());  // poisoned
    t = Dequantize(q);
    ASSERT_EQ(t.shape, q.shape);
    ASSERT_EQ(t.data.size(), static_cast<size_t>(rows * cols));
    size_t wrong = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const double s = kind == Fp8ScaleKind::kPerTensor  ? q.scales[0]
                         : kind == Fp8ScaleKind::kPerChannel ? q.scales[i]
                                                             : q.scales[(i / 128) * 2 + j / 128];
        // The exact product, rounded once to fp32.
        const float want = static_cast<float>(Fp8E4M3Definition(q.codes[i * cols + j]) * s);
        if (Bits(t.data[i * cols + j]) != Bits(want)) ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0u);
    // A row range gives the same rows.
    std::vector<float> part(static_cast<size_t>(3 * cols), std::numeric_limits<float>::quiet_NaN());
    DequantizeRows(q, 127, 130, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), t.data.data() + 127 * cols, part.size() * 4));
  }
}

TEST(QuantizedTensor, CheckRefusesBrokenInvariants) {
  BANYAN_SEEDED_RNG(rng);
  const QuantizedTensor good = RandomQuantized(Fp8ScaleKind::kBlock128, 200, 300, rng);
  ASSERT_TRUE(CheckQuantized(good, "w").ok());
  auto error = [](const QuantizedTensor& q) { return std::string(CheckQuantized(q, "w").message()); };
  QuantizedTensor q = good;
  q.scales.pop_back();
  EXPECT_THAT(error(q), HasSubstr("128x128-block scales, expected 6"));
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    q = good;
    q.scales[3] = bad;
    EXPECT_THAT(error(q), HasSubstr("scale 3 is")) << bad;
  }
  q = good;
  q.codes[450] = 0xff;
  EXPECT_THAT(error(q), HasSubstr("FP8 value 450 (row 1) is NaN"));
  q = good;
  q.codes.pop_back();
  EXPECT_THAT(error(q), HasSubstr("FP8 values for shape"));
}

// Reordering FP8 Wq rows for RoPE moves codes and per-channel scales with their rows: the
// dequantized result is the dense permutation of the dequantized source.
TEST(QuantizedTensor, PermuteQkRowsMatchesTheDensePermutation) {
  BANYAN_SEEDED_RNG(rng);
  for (Fp8ScaleKind kind :
       {Fp8ScaleKind::kPerTensor, Fp8ScaleKind::kPerChannel, Fp8ScaleKind::kBlock128}) {
    for (RopeStyle from : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      const RopeStyle to = from == RopeStyle::kHalf ? RopeStyle::kInterleaved : RopeStyle::kHalf;
      SCOPED_TRACE(std::string(Fp8ScaleKindName(kind)));
      QuantizedTensor q = RandomQuantized(kind, 4 * 64, 200, rng);  // 4 heads of 64
      Tensor want = Dequantize(q);
      PermuteQkRows(want, 4, 64, from, to);
      ASSERT_TRUE(PermuteQkRows(q, 4, 64, from, to).ok());
      EXPECT_EQ(Dequantize(q).data, want.data);
    }
  }
  // head_dim 256 would move rows between 128-row blocks: refused.
  QuantizedTensor q = RandomQuantized(Fp8ScaleKind::kBlock128, 2 * 256, 128, rng);
  const absl::Status s = PermuteQkRows(q, 2, 256, RopeStyle::kInterleaved, RopeStyle::kHalf);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rows would change blocks"));
}

TEST(QuantizeFp8, PerChannelRule) {
  BANYAN_SEEDED_RNG(rng);
  Tensor w;
  w.shape = {40, 70};
  std::normal_distribution<float> n(0, 0.3f);
  for (int64_t i = 0; i < w.numel(); ++i) w.data.push_back(n(rng));
  for (int64_t j = 0; j < 70; ++j) w.data[5 * 70 + j] = 0;  // a row of zeros
  w.data[7 * 70 + 3] = 1e-40f;                                // a row of one subnormal
  for (int64_t j = 0; j < 70; ++j) {
    if (j != 3) w.data[7 * 70 + j] = 0;
  }
  QuantizedTensor q;
  ASSERT_TRUE(QuantizeFp8PerChannel(w, "w", &q).ok());
  ASSERT_TRUE(CheckQuantized(q, "w").ok());
  EXPECT_EQ(q.scale_kind, Fp8ScaleKind::kPerChannel);
  for (int64_t i = 0; i < 40; ++i) {
    float amax = 0;
    for (int64_t j = 0; j < 70; ++j) amax = std::max(amax, std::fabs(w.data[i * 70 + j]));
    const float scale = amax / 448.0f > 0 ? amax / 448.0f : 1.0f;
    ASSERT_EQ(q.scales[i], scale) << "row " << i;
    for (int64_t j = 0; j < 70; ++j) {
      const float quotient = w.data[i * 70 + j] / scale;
      ASSERT_EQ(q.codes[i * 70 + j], NearestFp8E4M3(quotient)) << i << ", " << j;
    }
  }
  // The row's largest magnitude lands on +-448 (up to the division's rounding).
  EXPECT_EQ(q.scales[5], 1.0f);
  EXPECT_EQ(q.codes[5 * 70], 0);
  // Dequantized, every value is within half a step of the source: |err| <= amax * 2^-4.
  const Tensor back = Dequantize(q);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t row = i / 70;
    EXPECT_LE(std::fabs(back.data[i] - w.data[i]), q.scales[row] * 448.0f / 16.0f + 1e-30f) << i;
  }
  w.data[9] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(std::string(QuantizeFp8PerChannel(w, "the w", &q).message()),
              HasSubstr("the w: weight [0, 9] is inf"));
}

TEST(QuantizeFp8, WeightsKeepEmbeddingsNormsAndLmHeadDense) {
  ModelConfig c = testing::SmallArchConfig("qwen2");  // with q/k/v biases
  const ModelWeights dense = MakeDummyWeights(c, 5);
  ModelWeights w = dense;
  ASSERT_TRUE(QuantizeWeightsFp8(&w).ok());
  ASSERT_TRUE(ValidateWeights(w).ok()) << ValidateWeights(w);
  EXPECT_TRUE(HasQuantizedWeights(w));
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    SCOPED_TRACE(SlotName(slot));
    if (IsProjection(slot.kind)) {
      EXPECT_TRUE(SlotTensor(w, slot).data.empty());
      QuantizedTensor want;
      ASSERT_TRUE(QuantizeFp8PerChannel(SlotTensor(dense, slot), "x", &want).ok());
      EXPECT_EQ(SlotQuantized(w, slot)->codes, want.codes);
      EXPECT_EQ(SlotQuantized(w, slot)->scales, want.scales);
    } else {
      EXPECT_EQ(SlotTensor(w, slot).data, SlotTensor(dense, slot).data);
    }
  }
  // Quantizing again changes nothing.
  ModelWeights again = w;
  ASSERT_TRUE(QuantizeWeightsFp8(&again).ok());
  EXPECT_EQ(again.layers[1].fp8.w_down.codes, w.layers[1].fp8.w_down.codes);
  // The HF writer has no layout for projections with different scale kinds: it refuses.
  ModelWeights mixed = w;
  mixed.layers[1].fp8.wo.scale_kind = Fp8ScaleKind::kPerTensor;
  mixed.layers[1].fp8.wo.scales.resize(1);
  ASSERT_TRUE(ValidateWeights(mixed).ok());
  testing::TempDir dir;
  const absl::Status written = WriteHfFolder(mixed, dir.path());
  EXPECT_EQ(written.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(written.message()), HasSubstr("have no single checkpoint layout"));
  // A projection held in both forms, or in neither, is not a valid model.
  ModelWeights both = w;
  both.layers[0].wk = dense.layers[0].wk;
  EXPECT_THAT(std::string(ValidateWeights(both).message()), HasSubstr("both in FP8 and as fp32"));
  ModelWeights neither = w;
  neither.layers[0].fp8.wk = QuantizedTensor{};
  EXPECT_THAT(std::string(ValidateWeights(neither).message()),
              HasSubstr("tensor shape mismatch for layers.0.wk"));
}

TEST(QuantizeFp8, AtLoadEqualsAfterLoad) {
  const ModelWeights dense = MakeDummyWeights(testing::SmallArchConfig("qwen3"), 3);
  testing::TempDir dir;
  ASSERT_TRUE(WriteHfFolder(dense, dir.path()).ok());
  auto at_load = LoadModel(dir.path(), WeightQuantization::kFp8);  // one projection at a time
  ASSERT_TRUE(at_load.ok()) << at_load.status();
  auto after = LoadModel(dir.path());
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_FALSE(HasQuantizedWeights(*after));
  ASSERT_TRUE(QuantizeWeightsFp8(&*after).ok());
  for (const TensorSlot& slot : ListTensorSlots(dense.config)) {
    SCOPED_TRACE(SlotName(slot));
    EXPECT_EQ(SlotTensor(*at_load, slot).data, SlotTensor(*after, slot).data);
    if (IsProjection(slot.kind)) {
      EXPECT_FALSE(SlotQuantized(*at_load, slot)->empty());
      EXPECT_EQ(SlotQuantized(*at_load, slot)->codes, SlotQuantized(*after, slot)->codes);
      EXPECT_EQ(SlotQuantized(*at_load, slot)->scales, SlotQuantized(*after, slot)->scales);
    }
  }
}

TEST(DummyFp8, SameValuesQuantizedAndTheSeventyBShape) {
  const ModelConfig c = *NamedShapeConfig("tiny-d64-gqa4");
  const ModelWeights dense = MakeDummyWeights(c, 9);
  const ModelWeights fp8 = MakeDummyWeights(c, 9, WeightQuantization::kFp8);
  ModelWeights want = dense;
  ASSERT_TRUE(QuantizeWeightsFp8(&want).ok());
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    SCOPED_TRACE(SlotName(slot));
    EXPECT_EQ(SlotTensor(fp8, slot).data, SlotTensor(want, slot).data);
    if (IsProjection(slot.kind)) {
      EXPECT_EQ(SlotQuantized(fp8, slot)->codes, SlotQuantized(want, slot)->codes);
      EXPECT_EQ(SlotQuantized(fp8, slot)->scales, SlotQuantized(want, slot)->scales);
    }
  }
  auto big = NamedShapeConfig("llama-3-70b-shape");
  ASSERT_TRUE(big.ok());
  const ModelConfig small = *NamedShapeConfig("llama-3-8b-shape");
  EXPECT_EQ(big->dim, 8192);
  EXPECT_EQ(big->n_layers, 80);
  EXPECT_EQ(big->n_heads, 64);
  EXPECT_EQ(big->n_kv_heads, 8);
  EXPECT_EQ(big->hidden_dim, 28672);
  EXPECT_EQ(big->vocab_size, 128256);
  EXPECT_EQ(big->head_dim(), 128);
  EXPECT_EQ(big->rope_theta, small.rope_theta);
  EXPECT_EQ(big->norm_eps, small.norm_eps);
  EXPECT_EQ(big->max_seq_len, small.max_seq_len);
  // Without host weights (the CUDA backend generates its own) nothing is materialised.
  auto b = LoadDummyBundle("dummy:llama-3-70b-shape", /*host_weights=*/false, "",
                           WeightQuantization::kFp8);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->weights.layers.empty());
  // With host weights (the CPU backend), --quantization fp8 reaches them through the bundle.
  auto hb = LoadDummyBundle("dummy:tiny-d64-gqa4:seed=9", /*host_weights=*/true, "",
                            WeightQuantization::kFp8);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->weights.layers[1].fp8.w_up.codes, fp8.layers[1].fp8.w_up.codes);
  EXPECT_TRUE(hb->weights.layers[1].w_up.data.empty());
}

TEST(WeightQuantizationFlag, Parses) {
  WeightQuantization q = WeightQuantization::kFp8;
  ASSERT_TRUE(ParseWeightQuantization("none", &q).ok());
  EXPECT_EQ(q, WeightQuantization::kNone);
  ASSERT_TRUE(ParseWeightQuantization("fp8", &q).ok());
  EXPECT_EQ(q, WeightQuantization::kFp8);
  EXPECT_THAT(std::string(ParseWeightQuantization("awq", &q).message()),
              HasSubstr("expected none|fp8, got 'awq'"));
}

}  // namespace
}  // namespace banyan::model
