#include "common/philox.h"

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/sampler/randomized_test.h"

namespace banyan::engine {
namespace {

// Known answers from Random123's tests/kat_vectors, "philox4x32 10" lines:
// counter (4 words), key (2 words), expected output (4 words).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    Philox4x32Block ctr;
    uint32_t key0, key1;
    Philox4x32Block want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32Block got = Philox4x32_10(k.ctr, k.key0, k.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
}

TEST(Philox, UnitFloatIsTopTwentyFourBits) {
  EXPECT_EQ(ToUnitFloat(0u), 0.0f);
  EXPECT_EQ(ToUnitFloat(0xffu), 0.0f);  // low 8 bits are dropped
  EXPECT_EQ(ToUnitFloat(0x100u), std::ldexp(1.0f, -24));
  EXPECT_EQ(ToUnitFloat(0x80000000u), 0.5f);
  EXPECT_EQ(ToUnitFloat(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_LT(ToUnitFloat(0xffffffffu), 1.0f);
}

class PhiloxRandomTest : public RandomizedTest {};

// The documented layout: key = seed halves, counter = {step halves, stream, 0}, u from word 0.
TEST_F(PhiloxRandomTest, SampleUniformFollowsTheDocumentedLayout) {
  for (int trial = 0; trial < 100; ++trial) {
    const uint64_t seed = Bits64();
    const uint64_t step = Bits64();
    const uint32_t stream = static_cast<uint32_t>(Bits64());
    const Philox4x32Block ctr{
        {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), stream, 0}};
    const Philox4x32Block x =
        Philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    EXPECT_EQ(SampleUniform(seed, stream, step), ToUnitFloat(x.v[0]));
  }
}

TEST_F(PhiloxRandomTest, SeedsStreamsAndStepsGiveDifferentStreams) {
  const uint64_t seed = Bits64();
  auto draw = [](uint64_t s, uint32_t stream) {
    std::vector<float> u;
    for (uint64_t t = 0; t < 32; ++t) u.push_back(SampleUniform(s, stream, t));
    return u;
  };
  const std::vector<float> base = draw(seed, 0);
  EXPECT_EQ(base, draw(seed, 0));
  EXPECT_NE(base, draw(seed + 1, 0));
  EXPECT_NE(base, draw(seed ^ (uint64_t{1} << 40), 0));  // the high key word matters
  EXPECT_NE(base, draw(seed, 1));
  // The high counter word matters too.
  EXPECT_NE(SampleUniform(seed, 0, 5), SampleUniform(seed, 0, 5 + (uint64_t{1} << 32)));
  EXPECT_GT(std::set<float>(base.begin(), base.end()).size(), 30u);
}

// 16 equal bins over 160k consecutive steps: chi-square with 15 degrees of freedom. The bound is
// p ~ 1e-7, so a correct generator essentially never fails.
TEST_F(PhiloxRandomTest, StepsAreUniform) {
  const uint64_t seed = Bits64();
  constexpr int kBins = 16, kDraws = 160000;
  std::vector<int> hist(kBins, 0);
  double sum = 0.0;
  for (uint64_t t = 0; t < kDraws; ++t) {
    const float u = SampleUniform(seed, 0, t);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ++hist[static_cast<int>(u * kBins)];
    sum += u;
  }
  const double expected = static_cast<double>(kDraws) / kBins;
  double chi2 = 0.0;
  for (int c : hist) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 60.0);
  EXPECT_NEAR(sum / kDraws, 0.5, 0.005);
}

}  // namespace
}  // namespace banyan::engine
