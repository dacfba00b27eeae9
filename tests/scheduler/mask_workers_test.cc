// MaskWorkers ahead of need: a grammar queued with Prefetch is classified (a short mask per
// class of positions, a long one per position) by the workers, so that a matcher walked anywhere in it finds its mask cached; the
// masks are the same as those classified on demand.
#include "scheduler/mask_workers.h"

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_mask.h"

namespace banyan::scheduler {
namespace {

using text::grammar::CompiledGrammar;
using text::grammar::Matcher;
using text::grammar::TokenBits;
using text::grammar::TokenMasker;
using text::grammar::Vocabulary;

std::shared_ptr<const CompiledGrammar> Schema() {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "n": {"type": "integer", "minimum": 0, "maximum": 99},
                   "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "maxItems": 3}},
    "required": ["name"], "additionalProperties": false})");
  auto g = text::grammar::JsonSchemaToGrammar(schema);
  EXPECT_TRUE(g.ok()) << g.status();
  auto c = CompiledGrammar::Compile(*g);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const CompiledGrammar>(std::move(*c));
}

// Single bytes of JSON's punctuation and some letters, and random strings of them.
std::shared_ptr<const Vocabulary> Vocab(std::mt19937_64& rng) {
  const std::string alphabet = "{}[]\":, 0123456789abenmtgs\\";
  std::vector<std::string> tokens;
  for (char c : alphabet) tokens.push_back(std::string(1, c));
  for (int i = 0; i < 600; ++i) {
    std::string t;
    for (int n = 2 + static_cast<int>(rng() % 5); n > 0; --n) t += alphabet[rng() % alphabet.size()];
    tokens.push_back(t);
  }
  return std::make_shared<const Vocabulary>(std::move(tokens));
}

TEST(MaskWorkersTest, PrefetchClassifiesEveryPositionOnceAndTheMasksAgree) {
  BANYAN_SEEDED_RNG(rng);
  const auto g = Schema();
  ASSERT_NE(g, nullptr);
  const auto vocab = Vocab(rng);
  auto ahead = std::make_shared<TokenMasker>(g, vocab);
  const auto all = text::grammar::PositionsNearestFirst(*g, size_t{1} << 30);
  const size_t positions = all.size();
  ASSERT_GT(positions, 20u);
  std::set<std::pair<int32_t, int32_t>> classes;
  for (const auto& [rule, state] : all) classes.insert({rule, ahead->class_of(rule, state)});
  {
    // One worker: with two, a class could be walked twice when two of its positions are taken
    // at once (a race that costs a walk, not a wrong mask), and the counts below are exact.
    MaskWorkers workers(1);
    workers.Prefetch(ahead, size_t{1} << 30);
    workers.WaitIdle();
    EXPECT_EQ(ahead->classified(), classes.size()) << "a short mask per class";
    EXPECT_EQ(ahead->long_classified(), positions) << "a long mask per position";
    EXPECT_EQ(ahead->walks(), static_cast<int64_t>(classes.size()));
    EXPECT_EQ(workers.stats().walks, static_cast<int64_t>(positions));
    EXPECT_EQ(workers.stats().prefetch_walks, static_cast<int64_t>(positions));
  }
  // Two workers on a fresh masker: the same caches (a class walked twice at most costs time).
  auto ahead2 = std::make_shared<TokenMasker>(g, vocab);
  {
    MaskWorkers workers(2);
    workers.Prefetch(ahead2, size_t{1} << 30);
    workers.WaitIdle();
    EXPECT_EQ(ahead2->classified(), classes.size());
    EXPECT_EQ(ahead2->long_classified(), positions);
  }
  // Random walks: every mask is cached (no walk), and equal to one classified on demand.
  TokenMasker on_demand(g, vocab);
  const int64_t walks = ahead->walks(), walks2 = ahead2->walks();
  for (int w = 0; w < 20; ++w) {
    Matcher m(g);
    for (int step = 0; step < 40; ++step) {
      ASSERT_TRUE(ahead->Ready(m));
      ASSERT_TRUE(ahead2->Ready(m));
      TokenBits a, a2, b;
      ahead->FillMask(m, &a);
      ahead2->FillMask(m, &a2);
      on_demand.FillMask(m, &b);
      ASSERT_EQ(a, b) << "walk " << w << " step " << step;
      ASSERT_EQ(a2, b) << "walk " << w << " step " << step;
      const int32_t id = text::grammar::RandomAllowed(a, vocab->size(), rng);
      if (id < 0) break;
      ASSERT_TRUE(m.Accept(vocab->bytes(id)));
    }
  }
  EXPECT_EQ(ahead->walks(), walks) << "nothing classified after the prefetch";
  EXPECT_EQ(ahead2->walks(), walks2);
}

TEST(MaskWorkersTest, PrefetchStopsAtItsLimitAndYieldsToRequests) {
  BANYAN_SEEDED_RNG(rng);
  const auto g = Schema();
  ASSERT_NE(g, nullptr);
  const auto vocab = Vocab(rng);
  auto masker = std::make_shared<TokenMasker>(g, vocab);
  MaskWorkers workers(1);
  workers.Prefetch(masker, 5);
  // A request for the start while the prefetch may be running: it is classified once either way.
  Matcher start(g);
  workers.Wait(masker, start);
  EXPECT_TRUE(masker->Ready(start));
  workers.WaitIdle();
  EXPECT_EQ(masker->long_classified(), 5u) << "the start is the first of the five";
  EXPECT_LE(masker->classified(), 5u);
  EXPECT_EQ(workers.stats().walks, 5);
}

}  // namespace
}  // namespace banyan::scheduler
