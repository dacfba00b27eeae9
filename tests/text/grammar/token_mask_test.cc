// Token masks against the reference (every token checked byte by byte against the matcher),
// on random vocabularies and random walks through grammars with calls and pops, where the
// cached, context-free classification has to hand the right tokens to the per-step check.
#include <algorithm>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_mask.h"

namespace banyan::text::grammar {
namespace {

// Every single byte of `alphabet`, then random tokens of 2..6 bytes drawn from it, a few
// empty (special) tokens, and some duplicates of earlier tokens. `short_bytes` 3 makes the
// tokens of 4..6 bytes long ones (classified per position, not per class).
std::shared_ptr<const Vocabulary> RandomVocabulary(std::mt19937_64& rng,
                                                   const std::string& alphabet, int extra,
                                                   int32_t short_bytes = Vocabulary::kShortBytes) {
  std::vector<std::string> tokens;
  tokens.push_back("");  // a special token: never allowed
  for (char c : alphabet) tokens.push_back(std::string(1, c));
  std::uniform_int_distribution<int> len(2, 6);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < extra; ++i) {
    std::string t;
    for (int n = len(rng); n > 0; --n) t += alphabet[pick(rng)];
    tokens.push_back(t);
    if (i % 37 == 0) tokens.push_back(t);  // the same bytes under two ids
  }
  tokens.push_back("");
  return std::make_shared<const Vocabulary>(std::move(tokens), short_bytes);
}

// A JSON Schema compiled, or null with a test failure.
std::shared_ptr<const CompiledGrammar> CompileSchema(const nlohmann::ordered_json& schema) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? MustCompile(*g) : nullptr;
}

// {"s": a string of at most max_length characters}, compiled.
std::shared_ptr<const CompiledGrammar> OneStringObject(int max_length) {
  return CompileSchema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"s":{"type":"string","maxLength":)" +
      std::to_string(max_length) + R"(}},"required":["s"]})"));
}

// Random walks: at every step the fast mask must equal the reference, and the walk takes a
// random allowed token. Returns how many walks could end.
int CheckWalks(std::mt19937_64& rng, const std::shared_ptr<const CompiledGrammar>& g,
               const std::shared_ptr<const Vocabulary>& vocab, int walks, int max_steps,
               std::vector<std::string>* ended_texts = nullptr) {
  TokenMasker masker(g, vocab);
  int ended = 0;
  for (int w = 0; w < walks; ++w) {
    Matcher m(g);
    std::string text;
    for (int step = 0; step < max_steps; ++step) {
      TokenBits fast, slow;
      masker.FillMask(m, &fast);
      masker.FillMaskSlow(m, &slow);
      EXPECT_EQ(fast, slow) << "walk " << w << " step " << step << " after '" << text << "'";
      if (fast != slow) return ended;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (TestBit(fast, id)) allowed.push_back(id);
      }
      const bool can_end = m.CanEnd();
      if (allowed.empty() || (can_end && rng() % 4 == 0)) {
        EXPECT_TRUE(can_end) << "a dead end after '" << text << "'";
        if (can_end) {
          ++ended;
          if (ended_texts != nullptr) ended_texts->push_back(text);
        }
        break;
      }
      const int32_t id = allowed[rng() % allowed.size()];
      EXPECT_TRUE(m.Accept(vocab->bytes(id)));
      text += vocab->bytes(id);
    }
  }
  return ended;
}

TEST(TokenMaskTest, MatchesTheReferenceThroughCallsAndPops) {
  BANYAN_SEEDED_RNG(rng);
  // s := ("(" s ")" | "[" s "]" | "x")* : every bracket a call, every close a pop.
  Grammar g;
  const int32_t s = g.AddRule("s");
  g.SetBody(s, Star(Alt({Seq({Literal("("), Ref(s), Literal(")")}),
                         Seq({Literal("["), Ref(s), Literal("]")}), Literal("x")})));
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  for (int32_t short_bytes : {Vocabulary::kShortBytes, 3}) {
    SCOPED_TRACE(::testing::Message() << "short tokens up to " << short_bytes << " bytes");
    auto vocab = RandomVocabulary(rng, "()[]xy", 400, short_bytes);
    const int ended = CheckWalks(rng, c, vocab, 30, 60);
    EXPECT_GT(ended, 0);
  }
}

TEST(TokenMaskTest, MatchesTheReferenceOnAnyJson) {
  BANYAN_SEEDED_RNG(rng);
  auto c = CompileSchema(nlohmann::ordered_json::parse("{}"));
  ASSERT_NE(c, nullptr);
  std::vector<std::string> texts;
  for (int32_t short_bytes : {Vocabulary::kShortBytes, 3}) {
    SCOPED_TRACE(::testing::Message() << "short tokens up to " << short_bytes << " bytes");
    auto vocab = RandomVocabulary(rng, "{}[]\":, 0123-.eatrufnlsx\\", 1500, short_bytes);
    CheckWalks(rng, c, vocab, 20, 80, &texts);
  }
  for (const std::string& t : texts) {
    EXPECT_FALSE(nlohmann::json::parse(t, nullptr, false).is_discarded()) << t;
  }
}

TEST(TokenMaskTest, MatchesTheReferenceOnASchema) {
  BANYAN_SEEDED_RNG(rng);
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "a": {"type": "integer"},
      "b": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3},
      "c": {"enum": ["x", "yy", null]}
    },
    "required": ["a"],
    "$defs": {"node": {"type": "object", "properties": {"k": {"$ref": "#/$defs/node"}}}}
  })");
  auto c = CompileSchema(schema);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> texts;
  for (int32_t short_bytes : {Vocabulary::kShortBytes, 3}) {
    SCOPED_TRACE(::testing::Message() << "short tokens up to " << short_bytes << " bytes");
    auto vocab = RandomVocabulary(rng, "{}[]\":, 0123abckxyunl", 1500, short_bytes);
    CheckWalks(rng, c, vocab, 20, 120, &texts);
  }
  for (const std::string& t : texts) {
    const nlohmann::json j = nlohmann::json::parse(t, nullptr, false);
    ASSERT_TRUE(j.is_object()) << t;
    EXPECT_TRUE(j.contains("a") && j["a"].is_number_integer()) << t;
  }
}

// FillMask into a caller's span (the engine loop's fill threads write a late step's masks
// straight into the sampler's upload): the same bits as into a vector, whatever the span held
// before, and every word past the vocabulary's (a padded LM head) zeroed.
TEST(TokenMaskTest, FillMaskIntoASpanOverwritesAndPads) {
  BANYAN_SEEDED_RNG(rng);
  auto c = CompileSchema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"a":{"enum":["x","yz"]},"b":{"type":"integer"}}})"));
  ASSERT_NE(c, nullptr);
  auto vocab = RandomVocabulary(rng, "{}\":, 0123abxyz", 400);
  TokenMasker masker(c, vocab);
  const size_t words = (static_cast<size_t>(vocab->size()) + 63) / 64;
  Matcher m(c);
  for (int step = 0; step < 60; ++step) {
    TokenBits expected;
    masker.FillMask(m, &expected);
    ASSERT_EQ(expected.size(), words);
    std::vector<uint64_t> slot(words + 3, ~uint64_t{0});  // poisoned, three padding words
    masker.FillMask(m, std::span<uint64_t>(slot));
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), slot.begin())) << "step " << step;
    for (size_t w = words; w < slot.size(); ++w) EXPECT_EQ(slot[w], 0u) << "padding word " << w;
    const int32_t id = RandomAllowed(expected, vocab->size(), rng);
    if (id < 0) break;
    ASSERT_TRUE(m.Accept(vocab->bytes(id)));
  }
}

TEST(TokenMaskTest, SpecialTokensAreNeverAllowed) {
  Grammar g;
  g.AddRule("root", Star(Byte(ByteSet::Range(0, 255))));
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  auto vocab = std::make_shared<const Vocabulary>(std::vector<std::string>{"a", "", "bc", ""});
  TokenMasker masker(c, vocab);
  Matcher m(c);
  TokenBits mask;
  masker.FillMask(m, &mask);
  EXPECT_TRUE(TestBit(mask, 0));
  EXPECT_FALSE(TestBit(mask, 1));
  EXPECT_TRUE(TestBit(mask, 2));
  EXPECT_FALSE(TestBit(mask, 3));
}

// What the mask workers classify ahead of need: every position a matcher's top stands on in
// random walks through a grammar with calls and pops, each once, the root's start first, and no
// more than the limit.
TEST(TokenMaskTest, PositionsNearestFirstCoverEveryTopOnce) {
  BANYAN_SEEDED_RNG(rng);
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "s": {"type": "string", "maxLength": 6},
      "b": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}
    },
    "$defs": {"node": {"type": "object", "properties": {"k": {"$ref": "#/$defs/node"}}}}
  })");
  auto c = CompileSchema(schema);
  ASSERT_NE(c, nullptr);
  const auto all = PositionsNearestFirst(*c, size_t{1} << 30);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0], std::make_pair(c->root(), 0));
  std::set<std::pair<int32_t, int32_t>> listed(all.begin(), all.end());
  EXPECT_EQ(listed.size(), all.size()) << "each position once";
  const auto few = PositionsNearestFirst(*c, 3);
  ASSERT_EQ(few.size(), 3u);
  EXPECT_TRUE(std::equal(few.begin(), few.end(), all.begin())) << "a prefix of the whole order";

  auto vocab = RandomVocabulary(rng, "{}[]\":, 0123bksxyz", 800);
  TokenMasker masker(c, vocab);
  int tops = 0;
  for (int w = 0; w < 20; ++w) {
    Matcher m(c);
    for (int step = 0; step < 60; ++step) {
      for (const Top& t : m.tops()) {
        ++tops;
        EXPECT_TRUE(listed.contains({t.rule, t.state})) << "rule " << t.rule << " state " << t.state;
      }
      TokenBits mask;
      masker.FillMask(m, &mask);
      const int32_t id = RandomAllowed(mask, vocab->size(), rng);
      if (id < 0) break;
      ASSERT_TRUE(m.Accept(vocab->bytes(id)));
    }
  }
  EXPECT_GE(tops, 20) << "each walk stands on the start at least";
}

// A cache bounded to a few positions evicts the oldest and classifies them again when met: the
// masks stay those of the reference, and the cache never holds more than its bound.
TEST(TokenMaskTest, ABoundedCacheEvictsAndStaysExact) {
  BANYAN_SEEDED_RNG(rng);
  auto c = OneStringObject(30);
  ASSERT_NE(c, nullptr);
  auto vocab = RandomVocabulary(rng, "{}\":, sabc\\", 300, /*short_bytes=*/3);
  const size_t bytes_per_position = ((vocab->size() + 63) / 64) * 8;
  TokenMasker masker(c, vocab, 16 * bytes_per_position, /*max_long_cached=*/8);
  ASSERT_EQ(masker.max_cached(), 16u);
  ASSERT_EQ(masker.max_long_cached(), 8u);
  masker.PrepareStart();
  for (int w = 0; w < 10; ++w) {
    Matcher m(c);
    for (int step = 0; step < 40; ++step) {
      TokenBits fast, slow;
      masker.FillMask(m, &fast);
      masker.FillMaskSlow(m, &slow);
      ASSERT_EQ(fast, slow) << "walk " << w << " step " << step;
      EXPECT_LE(masker.classified(), 16u + 1u) << "the bound, plus the pinned start";
      EXPECT_LE(masker.long_classified(), masker.max_long_cached() + 1u);
      const int32_t id = RandomAllowed(fast, vocab->size(), rng);
      if (id < 0) break;
      ASSERT_TRUE(m.Accept(vocab->bytes(id)));
    }
  }
  EXPECT_GT(masker.evictions(), 0);
  Matcher start(c);
  EXPECT_TRUE(masker.Ready(start)) << "the start is never evicted";
}

// The default budget takes a realistic tool schema whole: a flight search's arguments (long
// strings, optional properties before required ones, as a client that sorts its keys sends
// them) are over 40,000 automaton states, and their classes are a few thousand. With 2^25 this
// schema kept a class per state, and a served constrained load paid a vocabulary walk per
// position met.
TEST(TokenMaskTest, DefaultBudgetClassesALargeToolSchema) {
  auto c = CompileSchema(nlohmann::ordered_json::parse(R"({
    "additionalProperties": false,
    "properties": {
      "airlines": {"items": {"maxLength": 40, "type": "string"}, "maxItems": 5, "type": "array"},
      "cabin": {"enum": ["economy", "premium_economy", "business", "first"]},
      "departure_date": {"pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "type": "string"},
      "destination": {"maxLength": 64, "type": "string"},
      "max_stops": {"maximum": 3, "minimum": 0, "type": "integer"},
      "notes": {"maxLength": 400, "type": "string"},
      "origin": {"maxLength": 64, "type": "string"},
      "passengers": {"additionalProperties": false,
                     "properties": {"adults": {"maximum": 9, "minimum": 1, "type": "integer"},
                                    "children": {"maximum": 8, "minimum": 0, "type": "integer"}},
                     "required": ["adults"], "type": "object"},
      "return_date": {"pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "type": ["string", "null"]}
    },
    "required": ["origin", "destination", "departure_date", "passengers", "cabin"],
    "type": "object"})"));
  ASSERT_NE(c, nullptr);
  size_t classes = 0;
  BoundedClasses(*c, 16, &classes);
  EXPECT_GT(c->total_states(), 40000);
  EXPECT_LT(classes * 8, static_cast<size_t>(c->total_states()))
      << classes << " classes of " << c->total_states() << " states";
}

// A string of maxLength 200 is hundreds of automaton states (a counter), but over the next 16
// bytes only the states within 16 characters of either end differ: the classes collapse the
// rest, and the short masks are classified once per class, the masks staying exact.
TEST(TokenMaskTest, BoundedClassesCollapseALongStringsCounter) {
  BANYAN_SEEDED_RNG(rng);
  auto c = OneStringObject(200);
  ASSERT_NE(c, nullptr);
  size_t deep = 0, shallow = 0;
  BoundedClasses(*c, 16, &deep);
  BoundedClasses(*c, 1 << 20, &shallow);  // the full equivalence: the counter stays
  EXPECT_GT(c->total_states(), 200);
  EXPECT_LT(deep * 4, static_cast<size_t>(c->total_states()))
      << deep << " classes of " << c->total_states() << " states";
  EXPECT_GT(shallow, deep);
  size_t none = 0;  // no budget: a class per state
  const auto identity = BoundedClasses(*c, 16, &none, /*budget=*/0);
  EXPECT_EQ(none, static_cast<size_t>(c->total_states()));
  for (int32_t r = 0; r < c->num_rules(); ++r) {
    for (int32_t st = 0; st < c->num_states(r); ++st) EXPECT_EQ(identity[r][st], st);
  }
  auto vocab = RandomVocabulary(rng, "{}\":, sabc\\", 600, /*short_bytes=*/4);
  TokenMasker masker(c, vocab);
  EXPECT_EQ(masker.num_classes(), [&] {
    size_t n = 0;
    BoundedClasses(*c, 4, &n);
    return n;
  }());
  CheckWalks(rng, c, vocab, 20, 100);  // exact against the reference
  for (int w = 0; w < 20; ++w) {
    Matcher m(c);
    for (int step = 0; step < 100; ++step) {
      TokenBits mask;
      masker.FillMask(m, &mask);
      const int32_t id = RandomAllowed(mask, vocab->size(), rng);
      if (id < 0) break;
      ASSERT_TRUE(m.Accept(vocab->bytes(id)));
    }
  }
  EXPECT_EQ(masker.walks(), static_cast<int64_t>(masker.classified())) << "a short walk per class";
  EXPECT_EQ(masker.long_walks(), static_cast<int64_t>(masker.long_classified()));
  EXPECT_LT(masker.walks() * 2, masker.long_walks())
      << "positions met share their classes' short walks";
}

}  // namespace
}  // namespace banyan::text::grammar
