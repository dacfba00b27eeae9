// Regular expressions → automaton: against std::regex (ECMAScript) on random ASCII patterns and
// texts, on Unicode classes against explicit cases, inside JSON strings, and the refusals.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "tests/text/grammar/pcre2_oracle.h"
#include "text/grammar/regex.h"

namespace banyan::text::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> FromRegex(const std::string& pattern, RegexMatch match,
                                                 RegexText text = RegexText::kUtf8) {
  absl::StatusOr<Expr> e = RegexToExpr(pattern, match, text);
  EXPECT_TRUE(e.ok()) << pattern << ": " << e.status();
  if (!e.ok()) return nullptr;
  Grammar g;
  g.AddRule("root", *std::move(e));
  return MustCompile(g);
}

std::string Refusal(const std::string& pattern) {
  absl::StatusOr<Expr> e = RegexToExpr(pattern, RegexMatch::kWhole, RegexText::kUtf8);
  if (e.ok()) return "";
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(e.status().message());
}

// A random pattern over a small alphabet, in the syntax both engines share. Inside a group that
// repeats without bound (`*`, `+`) nothing repeats without bound again, so that the backtracking
// oracle answers nearly every text within its match limit (std::regex, the oracle before PCRE2,
// once took over 20 minutes on one pattern of nested unbounded repetition).
std::string RandomPattern(std::mt19937_64& rng, int depth, bool in_unbounded = false) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  std::string out;
  const int items = 1 + pick(3);
  for (int i = 0; i < items; ++i) {
    std::string atom;
    const int kind = depth < 2 ? pick(7) : pick(4);
    const bool group = kind >= 4;
    // Decided before the group's content, so the content knows whether it repeats unboundedly.
    int quantifier = pick(7);
    if (in_unbounded && quantifier <= 1) quantifier = 2;  // `?` instead of `*` / `+`
    const bool unbounded = in_unbounded || (group && quantifier <= 1);
    switch (kind) {
      case 0: atom = std::string(1, "abc"[pick(3)]); break;
      case 1: atom = "[a-b]"; break;
      case 2: atom = std::vector<std::string>{"\\d", "[^a]", ".", "[bc0-1]"}[pick(4)]; break;
      case 3: atom = "x"; break;
      case 4: atom = "(" + RandomPattern(rng, depth + 1, unbounded) + ")"; break;
      case 5:
        atom = "(?:" + RandomPattern(rng, depth + 1, unbounded) + "|" +
               RandomPattern(rng, depth + 1, unbounded) + ")";
        break;
      default: atom = "(" + RandomPattern(rng, depth + 1, unbounded) + ")"; break;
    }
    switch (quantifier) {
      case 0: atom += "*"; break;
      case 1: atom += "+"; break;
      case 2: atom += "?"; break;
      case 3: atom += "{" + std::to_string(pick(2)) + "," + std::to_string(1 + pick(2)) + "}"; break;
      case 4: atom += "{2}"; break;
      default: break;
    }
    out += atom;
  }
  if (pick(4) == 0) out += "|" + RandomPattern(rng, depth + 1, in_unbounded);
  return out;
}

TEST(RegexTest, AgreesWithPcre2OnRandomPatterns) {
  BANYAN_SEEDED_RNG(rng);
  const std::string alphabet = "abcx01\n";
  int checked = 0, matched = 0, unanswered = 0, too_large = 0;
  for (int p = 0; p < 200; ++p) {
    const std::string pattern = RandomPattern(rng, 0);
    const Pcre2Oracle oracle(pattern);
    ASSERT_TRUE(oracle.ok()) << pattern;
    // Some patterns (`a.{20}`-like, `(a|b){2}...` runs; more often as a search, `.*(pattern)`)
    // need exponentially many DFA states, which the work budget refuses as too large, as it
    // must. Such a pattern is skipped, counted, and must stay rare.
    // The automaton of `pattern` as `match` (ResourceExhausted when it is too large).
    auto compile = [&](RegexMatch match) -> absl::StatusOr<std::shared_ptr<const CompiledGrammar>> {
      absl::StatusOr<Expr> e = RegexToExpr(pattern, match, RegexText::kUtf8);
      if (!e.ok()) return e.status();
      Grammar g;
      g.AddRule("root", *std::move(e));
      absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
      if (!c.ok()) return c.status();
      return std::make_shared<const CompiledGrammar>(*std::move(c));
    };
    auto whole_or = compile(RegexMatch::kWhole);
    auto search_or = whole_or.ok() ? compile(RegexMatch::kSearch) : whole_or;
    if (!search_or.ok()) {
      ASSERT_EQ(search_or.status().code(), absl::StatusCode::kResourceExhausted)
          << pattern << ": " << search_or.status();
      ++too_large;
      continue;
    }
    const std::shared_ptr<const CompiledGrammar> whole = *whole_or, search = *search_or;
    for (int t = 0; t < 60; ++t) {
      std::string text;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += alphabet[rng() % alphabet.size()];
      const int want_whole = oracle.Match(text, true);
      const int want_search = oracle.Match(text, false);
      if (want_whole < 0 || want_search < 0) {
        ++unanswered;
        continue;
      }
      EXPECT_EQ(Matches(whole, text), want_whole == 1) << "/" << pattern << "/ whole on '" << text << "'";
      EXPECT_EQ(Matches(search, text), want_search == 1) << "/" << pattern << "/ search on '" << text << "'";
      ++checked;
      matched += want_whole;
    }
  }
  EXPECT_GT(matched, checked / 50) << "the random texts rarely match: the test proves little";
  EXPECT_LT(unanswered, checked / 20) << "the oracle left too many texts unanswered";
  EXPECT_LE(too_large, 10) << "too many search automata refused as too large: the test proves little";
}

TEST(RegexTest, UnicodeClassesAreCodePoints) {
  auto g = FromRegex("[é-ü]+[^a-z]\\u00e9.", RegexMatch::kWhole);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "éü\xE2\x82\xAC" "é\xF0\x9F\x98\x80"));  // é ü € é 😀
  EXPECT_TRUE(Matches(g, "ñ1éx"));
  EXPECT_FALSE(Matches(g, "e1éx"));     // e is below é
  EXPECT_FALSE(Matches(g, "éaéx"));     // a is excluded
  EXPECT_FALSE(Matches(g, "é1é\n"));    // . excludes line terminators
  EXPECT_FALSE(Matches(g, "é\xC3" "é")); // a cut character is not a code point
  auto any = FromRegex("[^x]", RegexMatch::kWhole);
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(Matches(any, "\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(Matches(any, "\xED\xA0\x80"));      // a surrogate is no code point
  EXPECT_FALSE(Matches(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(RegexTest, InsideAJsonString) {
  auto g = FromRegex("^a\"b\\\\c\\n[^z]$", RegexMatch::kSearch, RegexText::kJsonString);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "a\\\"b\\\\c\\n\\t"));  // a"b\c<newline><tab> as JSON writes them
  EXPECT_FALSE(Matches(g, "a\"b\\\\c\\n\\t"));   // a bare quote would end the string
  EXPECT_FALSE(Matches(g, "a\\\"b\\\\c\nx"));    // a raw newline is not allowed in JSON
  auto search = FromRegex("ab", RegexMatch::kSearch, RegexText::kJsonString);
  ASSERT_NE(search, nullptr);
  EXPECT_TRUE(Matches(search, "x\\\"ab\\u0001"));
  EXPECT_FALSE(Matches(search, "a\\\"b"));
}

TEST(RegexTest, ExponentialAutomataAreRefusedQuickly) {
  // `.*a.{20}` in a search: the DFA must remember the last 21 positions (2^21 states).
  absl::StatusOr<Expr> e = RegexToExpr("a.{20}$", RegexMatch::kSearch, RegexText::kUtf8);
  ASSERT_TRUE(e.ok()) << e.status();
  Grammar g;
  g.AddRule("root", *std::move(e));
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
}

TEST(RegexTest, RefusesWhatIsNotRegularOrNotSupported) {
  EXPECT_NE(Refusal("(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(Refusal("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(Refusal("a(?<!b)").find("lookaround"), std::string::npos);
  EXPECT_NE(Refusal("\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(Refusal("\\p{L}").find("Unicode property"), std::string::npos);
  EXPECT_NE(Refusal("a{2000}").find("repetition count over 1000"), std::string::npos);
  EXPECT_NE(Refusal("(ab").find("unterminated '('"), std::string::npos);
  EXPECT_NE(Refusal("ab)").find("unmatched ')'"), std::string::npos);
  EXPECT_NE(Refusal("[z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(Refusal("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(Refusal("a^b").find("'^' or '$' inside"), std::string::npos);
  EXPECT_NE(Refusal("\xC3").find("invalid UTF-8"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "(";
  EXPECT_NE(Refusal(deep).find("nested more than 64"), std::string::npos);
  EXPECT_NE(Refusal("x").size(), 1u);  // a plain pattern compiles: no message
}

}  // namespace
}  // namespace banyan::text::grammar
