// Token masks against the reference (every token checked byte by byte against the matcher),
// on random vocabularies and random walks through grammars with calls and pops, where the
// cached, context-free classification has to hand the right tokens to the per-step check.
#include <random>
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
// empty (special) tokens, and some duplicates of earlier tokens.
std::shared_ptr<const Vocabulary> RandomVocabulary(std::mt19937_64& rng,
                                                   const std::string& alphabet, int extra) {
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
  return std::make_shared<const Vocabulary>(std::move(tokens));
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
  auto vocab = RandomVocabulary(rng, "()[]xy", 400);
  const int ended = CheckWalks(rng, c, vocab, 30, 60);
  EXPECT_GT(ended, 0);
}

TEST(TokenMaskTest, MatchesTheReferenceOnAnyJson) {
  BANYAN_SEEDED_RNG(rng);
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(nlohmann::ordered_json::parse("{}"));
  ASSERT_TRUE(g.ok()) << g.status();
  auto c = MustCompile(*g);
  ASSERT_NE(c, nullptr);
  auto vocab = RandomVocabulary(rng, "{}[]\":, 0123-.eatrufnlsx\\", 1500);
  std::vector<std::string> texts;
  CheckWalks(rng, c, vocab, 20, 80, &texts);
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
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  auto c = MustCompile(*g);
  ASSERT_NE(c, nullptr);
  auto vocab = RandomVocabulary(rng, "{}[]\":, 0123abckxyunl", 1500);
  std::vector<std::string> texts;
  CheckWalks(rng, c, vocab, 20, 120, &texts);
  for (const std::string& t : texts) {
    const nlohmann::json j = nlohmann::json::parse(t, nullptr, false);
    ASSERT_TRUE(j.is_object()) << t;
    EXPECT_TRUE(j.contains("a") && j["a"].is_number_integer()) << t;
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

}  // namespace
}  // namespace banyan::text::grammar
