// Integer ranges: the automaton accepts exactly the canonical decimals within the bounds, on
// random bounds against plain comparison.
#include <optional>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/number_range.h"

namespace banyan::text::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> Range(std::optional<int64_t> lo,
                                             std::optional<int64_t> hi, int digits) {
  absl::StatusOr<Expr> e = IntegerRange(lo, hi, digits);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return nullptr;
  Grammar g;
  g.AddRule("root", *std::move(e));
  return MustCompile(g);
}

TEST(NumberRangeTest, RandomBoundsAgreeWithComparison) {
  BANYAN_SEEDED_RNG(rng);
  for (int round = 0; round < 300; ++round) {
    const int digits = 1 + static_cast<int>(rng() % 6);
    const int64_t span = 1;
    int64_t scale = 1;
    for (int i = 0; i < digits; ++i) scale *= 10;
    std::uniform_int_distribution<int64_t> bound(-scale * span, scale * span);
    std::uniform_int_distribution<int64_t> inside(-(scale - 1), scale - 1);
    std::optional<int64_t> lo = inside(rng), hi = inside(rng);
    if (rng() % 5 == 0) lo.reset();
    if (rng() % 5 == 0) hi.reset();
    if (lo && hi && *lo > *hi) std::swap(*lo, *hi);
    auto g = Range(lo, hi, digits);
    ASSERT_NE(g, nullptr);
    const int64_t largest = scale - 1;
    for (int t = 0; t < 80; ++t) {
      const int64_t v = bound(rng);
      const bool want = v >= std::max(lo.value_or(-largest), -largest) &&
                        v <= std::min(hi.value_or(largest), largest);
      EXPECT_EQ(Matches(g, std::to_string(v)), want)
          << v << " in [" << (lo ? std::to_string(*lo) : "-") << ", "
          << (hi ? std::to_string(*hi) : "-") << "] with " << digits << " digits";
    }
    EXPECT_FALSE(Matches(g, "-0"));
    EXPECT_FALSE(Matches(g, "01"));
    EXPECT_FALSE(Matches(g, "+1"));
  }
}

TEST(NumberRangeTest, EdgesAndEmptyRanges) {
  auto g = Range(-9007199254740991, 9007199254740991, 15);  // zod 4's int bounds
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "0"));
  EXPECT_TRUE(Matches(g, "-999999999999999"));
  EXPECT_FALSE(Matches(g, "1000000000000000"));  // 16 digits: over the grammar's bound
  auto one = Range(7, 7, 3);
  ASSERT_NE(one, nullptr);
  EXPECT_TRUE(Matches(one, "7"));
  EXPECT_FALSE(Matches(one, "8"));
  EXPECT_FALSE(IntegerRange(5, 4, 3).ok());
  EXPECT_FALSE(IntegerRange(1000, std::nullopt, 3).ok());  // nothing of 3 digits is >= 1000
}

}  // namespace
}  // namespace banyan::text::grammar
