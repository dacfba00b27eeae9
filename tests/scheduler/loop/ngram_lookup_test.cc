// N-gram prompt lookup (scheduler/loop/ngram_lookup.h): hand-made contexts for each rule, then
// random contexts of a small vocabulary (many matches) against a reference written from the
// definition over one concatenated vector, split between prompt and generated tokens anywhere.
#include "scheduler/loop/ngram_lookup.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"

namespace banyan::scheduler {
namespace {

using Ids = std::vector<int32_t>;

TokenContext Split(const Ids& all, size_t head) {
  std::span<const int32_t> s(all);
  return {.head = s.first(head), .tail = s.subspan(head)};
}

// The definition: for n from max_n down to min_n, the latest end e <= size - 1 whose n tokens
// before it equal the last n; the first n that has one wins.
NgramMatch Reference(const Ids& c, const NgramLookup& l) {
  const size_t size = c.size();
  for (int n = l.max_n; n >= l.min_n && n >= 1; --n) {
    if (size < static_cast<size_t>(n) + 1) continue;
    for (size_t e = size - 1; e >= static_cast<size_t>(n); --e) {
      bool same = true;
      for (int k = 1; k <= n && same; ++k) same = c[e - k] == c[size - k];
      if (same) return {.end = e, .n = n};
    }
  }
  return {};
}

TEST(NgramLookupTest, ProposesWhatFollowedTheLatestLongestMatch) {
  const NgramLookup l{.min_n = 2, .max_n = 4};
  // ... 7 8 9 [1 2] 5 6 ... 3 [1 2] 6 ... [1 2]: both earlier "1 2" match two tokens; the
  // latest (followed by 6) drafts.
  const Ids c = {7, 8, 9, 1, 2, 5, 6, 3, 1, 2, 6, 4, 1, 2};
  EXPECT_EQ(NgramDrafts(Split(c, c.size()), l, 3), (Ids{6, 4, 1}));
  // A longer match beats a later one: "9 1 2" occurs only early.
  const Ids d = {9, 1, 2, 5, 6, 3, 1, 2, 7, 9, 1, 2};
  const NgramMatch m = FindNgram(Split(d, 4), l);
  EXPECT_EQ(m.n, 3);
  EXPECT_EQ(m.end, 3u);
  EXPECT_EQ(NgramDrafts(Split(d, 4), l, 2), (Ids{5, 6}));
}

TEST(NgramLookupTest, ShortMatchesAndOffDraftNothing) {
  const Ids c = {1, 2, 3, 4, 5, 3};  // only the one token 3 occurred before
  EXPECT_TRUE(NgramDrafts(Split(c, 3), {.min_n = 2, .max_n = 4}, 4).empty());
  EXPECT_EQ(NgramDrafts(Split(c, 3), {.min_n = 1, .max_n = 4}, 4), (Ids{4, 5, 3, 4}));
  EXPECT_TRUE(NgramDrafts(Split(c, 3), {.min_n = 1, .max_n = 0}, 4).empty());
  EXPECT_TRUE(NgramDrafts(Split(c, 3), {.min_n = 1, .max_n = 4}, 0).empty());
  EXPECT_TRUE(NgramDrafts(Split(Ids{}, 0), {.min_n = 1, .max_n = 4}, 4).empty());
  EXPECT_TRUE(NgramDrafts(Split(Ids{5}, 1), {.min_n = 1, .max_n = 4}, 4).empty());
}

TEST(NgramLookupTest, DraftsContinueAPeriodPastTheContextsEnd) {
  // A run of one token matches itself one position back: the drafts repeat it.
  const Ids c = {4, 4, 4, 4, 4};
  const NgramMatch m = FindNgram(Split(c, 2), {.min_n = 2, .max_n = 3});
  EXPECT_EQ(m.n, 3);
  EXPECT_EQ(m.end, 4u);
  EXPECT_EQ(NgramDrafts(Split(c, 2), {.min_n = 2, .max_n = 3}, 5), (Ids{4, 4, 4, 4, 4}));
  // A loop of three tokens: the latest full match is one period back.
  const Ids loop = {9, 1, 2, 3, 1, 2, 3, 1, 2};
  EXPECT_EQ(NgramDrafts(Split(loop, 5), {.min_n = 2, .max_n = 4}, 7), (Ids{3, 1, 2, 3, 1, 2, 3}));
}

TEST(NgramLookupTest, RandomContextsMatchTheDefinitionWhereverTheySplit) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    // Small vocabularies match often; larger ones leave whole 16-token blocks without the token.
    const int vocab = static_cast<int>(rng() % 2 ? 2 + rng() % 6 : 8 + rng() % 60);
    Ids c(rng() % 80);  // past the 16-token blocks of the scan
    for (int32_t& t : c) t = static_cast<int32_t>(rng() % vocab);
    const int min_n = 1 + static_cast<int>(rng() % 3);
    const NgramLookup l{.min_n = min_n, .max_n = min_n + static_cast<int>(rng() % 4)};
    const size_t head = c.empty() ? 0 : rng() % (c.size() + 1);
    const NgramMatch want = Reference(c, l);
    const NgramMatch got = FindNgram(Split(c, head), l);
    ASSERT_EQ(got.n, want.n) << "trial " << trial << " head " << head;
    ASSERT_EQ(got.end, want.end) << "trial " << trial << " head " << head;
    const int budget = static_cast<int>(rng() % 6);
    const Ids drafts = NgramDrafts(Split(c, head), l, budget);
    if (want.n == 0 || budget == 0) {
      EXPECT_TRUE(drafts.empty());
    } else {
      // The context extended by the drafts reads on from the match: token end + i is draft i.
      Ids extended = c;
      for (int i = 0; i < budget; ++i) extended.push_back(extended[want.end + i]);
      EXPECT_EQ(drafts, Ids(extended.begin() + static_cast<std::ptrdiff_t>(c.size()),
                            extended.end()));
    }
  }
}

}  // namespace
}  // namespace banyan::scheduler
