// The automaton and its matcher on hand-written grammars: acceptance, calls and pops,
// rollback, the compile-time refusals (undefined rules, left recursion, size limits), and the
// intersection of two regular expressions.
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"
#include "text/grammar/number_range.h"
#include "text/grammar/regex.h"

namespace banyan::text::grammar {
namespace {

TEST(AutomatonTest, RegularExpressions) {
  Grammar g;
  // (ab|a)*c{2,3}d?
  g.AddRule("root", Seq({Star(Alt({Literal("ab"), Literal("a")})),
                         Repeat(Literal("c"), 2, 3), Opt(Literal("d"))}));
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  for (const char* yes : {"cc", "ccc", "abacc", "aaabccd", "abcccd"}) {
    EXPECT_TRUE(Matches(c, yes)) << yes;
  }
  for (const char* no : {"", "c", "cccc", "bcc", "abccdd", "ccdc"}) {
    EXPECT_FALSE(Matches(c, no)) << no;
  }
}

TEST(AutomatonTest, AlternativeLoopsDoNotLeakIntoSiblings) {
  Grammar g;
  g.AddRule("root", Alt({Star(Literal("a")), Literal("b")}));
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Matches(c, "aaa"));
  EXPECT_TRUE(Matches(c, "b"));
  EXPECT_FALSE(Matches(c, "ab"));
  EXPECT_FALSE(Matches(c, "ba"));
}

TEST(AutomatonTest, RecursiveRulesPushAndPop) {
  // balanced := ("(" balanced ")")*
  Grammar g;
  const int32_t b = g.AddRule("balanced");
  g.SetBody(b, Star(Seq({Literal("("), Ref(b), Literal(")")})));
  g.set_root(b);
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  for (const char* yes : {"", "()", "(())", "()(())", "((()()))()"}) {
    EXPECT_TRUE(Matches(c, yes)) << yes;
  }
  for (const char* no : {"(", ")", "(()", "())", "(()))("}) {
    EXPECT_FALSE(Matches(c, no)) << no;
  }
  // A prefix is accepted byte by byte but cannot end.
  Matcher m(c);
  EXPECT_TRUE(m.Accept("(("));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.Accept(")))"));  // all or nothing: the state is unchanged
  EXPECT_TRUE(m.Accept("))"));
  EXPECT_TRUE(m.CanEnd());
}

TEST(AutomatonTest, NullableCalleesAndEndThroughPops) {
  // root := "x" ws "y" ws ; ws := " "*
  Grammar g;
  const int32_t ws = g.AddRule("ws", Star(Literal(" ")));
  const int32_t root = g.AddRule("root", Seq({Literal("x"), Ref(ws), Literal("y"), Ref(ws)}));
  g.set_root(root);
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Matches(c, "xy"));
  EXPECT_TRUE(Matches(c, "x  y   "));
  EXPECT_FALSE(Matches(c, "x y x"));
  EXPECT_TRUE(c->nullable(ws));
  EXPECT_FALSE(c->nullable(root));
}

TEST(AutomatonTest, RollbackRestoresEarlierSteps) {
  Grammar g;
  const int32_t b = g.AddRule("balanced");
  g.SetBody(b, Star(Seq({Literal("["), Ref(b), Literal("]")})));
  g.set_root(b);
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  Matcher m(c);
  ASSERT_TRUE(m.Accept("["));
  ASSERT_TRUE(m.Accept("[["));
  ASSERT_TRUE(m.Accept("]"));
  EXPECT_EQ(m.steps(), 3);
  m.Rollback(2);
  EXPECT_EQ(m.steps(), 1);
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accept("]"));
  EXPECT_TRUE(m.CanEnd());
}

TEST(AutomatonTest, RefusesUndefinedAndLeftRecursiveRules) {
  {
    Grammar g;
    const int32_t a = g.AddRule("a");
    g.AddRule("root", Ref(a));
    g.set_root(1);
    absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("'a'"), std::string::npos) << c.status();
  }
  {
    // e := e "+" "1" | "1": left recursion, directly.
    Grammar g;
    const int32_t e = g.AddRule("e");
    g.SetBody(e, Alt({Seq({Ref(e), Literal("+1")}), Literal("1")}));
    absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("left-recursive"), std::string::npos) << c.status();
  }
  {
    // a := ws b ; b := a "x" ; ws := " "*: left recursion through a nullable call.
    Grammar g;
    const int32_t a = g.AddRule("a");
    const int32_t b = g.AddRule("b");
    const int32_t ws = g.AddRule("ws", Star(Literal(" ")));
    g.SetBody(a, Seq({Ref(ws), Ref(b)}));
    g.SetBody(b, Seq({Ref(a), Literal("x")}));
    absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("left-recursive"), std::string::npos) << c.status();
  }
}

TEST(AutomatonTest, SizeLimitsAreErrorsNotAllocations) {
  Grammar g;
  g.AddRule("root", Repeat(Alt({Literal("ab"), Literal("cd")}), 0, 1000000));
  CompileLimits limits;
  limits.max_nfa_states = 10000;
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g, limits);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("10000"), std::string::npos) << c.status();
}

TEST(AutomatonTest, Utf8CharAcceptsExactlyWellFormedScalars) {
  Grammar g;
  g.AddRule("root", Star(Utf8Char(ByteSet::Chars("\""))));
  auto c = MustCompile(g);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Matches(c, "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(Matches(c, "\""));
  EXPECT_FALSE(Matches(c, "\xC0\x80"));          // overlong
  EXPECT_FALSE(Matches(c, "\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(Matches(c, "\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(Matches(c, "\xE2\x82"));          // cut short
}

std::shared_ptr<const CompiledGrammar> OneRule(Expr e) {
  Grammar g;
  g.set_root(g.AddRule("root", std::move(e)));
  return MustCompile(g);
}

Expr WholeRegex(const std::string& pattern) {
  absl::StatusOr<Expr> e = RegexToExpr(pattern, RegexMatch::kWhole, RegexText::kUtf8);
  EXPECT_TRUE(e.ok()) << pattern << " " << e.status();
  return e.ok() ? *std::move(e) : Empty();
}

// Every state of a trimmed DFA reaches an accepting one: a matcher never walks into a dead end.
bool AllStatesLive(const ByteDfa& dfa) {
  std::vector<char> live(dfa.states.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < dfa.states.size(); ++s) {
      if (live[s]) continue;
      bool l = dfa.states[s].accepting;
      for (const ByteDfa::Edge& e : dfa.states[s].edges) l = l || live[e.next];
      if (l) live[s] = 1, changed = true;
    }
  }
  for (char l : live) {
    if (!l) return false;
  }
  return true;
}

// The product accepts exactly what both accept, over random texts of a small alphabet.
TEST(AutomatonTest, IntersectionIsTheStringsBothAccept) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"[ab]*a[ab]{2}", "(ab|ba)*"},     {"a*b*c*", "[abc]{2,4}"},
      {"(a|bc)+", "[^c]*c[^c]*|a*"},     {"[a-c]*", "c?b+a?"},
      {"(abc)*|b", "a[bc]*|b|"},          {"x?[ab]*", "(a[ab])*"},
  };
  std::mt19937 rng(std::random_device{}());
  int checked = 0, in_both = 0;
  for (const auto& [pa, pb] : pairs) {
    const Expr a = WholeRegex(pa), b = WholeRegex(pb);
    absl::StatusOr<ByteDfa> dfa = IntersectDfa(*ExprToDfa(a), *ExprToDfa(b));
    ASSERT_TRUE(dfa.ok()) << pa << " & " << pb << " " << dfa.status();
    EXPECT_TRUE(AllStatesLive(*dfa)) << pa << " & " << pb;
    auto both = OneRule(Dfa(std::make_shared<const ByteDfa>(*dfa)));
    auto ga = OneRule(a), gb = OneRule(b);
    ASSERT_TRUE(both && ga && gb);
    for (int t = 0; t < 400; ++t) {
      std::string text(rng() % 7, ' ');
      for (char& ch : text) ch = "abcx"[rng() % 4];
      const bool expected = Matches(ga, text) && Matches(gb, text);
      EXPECT_EQ(Matches(both, text), expected) << pa << " & " << pb << " : '" << text << "'";
      ++checked;
      in_both += expected;
    }
  }
  EXPECT_EQ(checked, 2400);
  EXPECT_GT(in_both, 20) << "the texts must exercise the accepting side too";
}

TEST(AutomatonTest, IntersectionRefusesEmptyRecursiveAndOversizedProducts) {
  absl::StatusOr<Expr> none = IntersectExprs(Literal("ab"), Literal("ba"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no string matches both"), std::string::npos);
  absl::StatusOr<Expr> calls = IntersectExprs(Ref(0), Literal("a"));
  ASSERT_FALSE(calls.ok());
  EXPECT_NE(calls.status().message().find("calls rules"), std::string::npos);
  CompileLimits small;
  small.max_dfa_states = 50;
  absl::StatusOr<Expr> big =
      IntersectExprs(WholeRegex("[ab]*"), WholeRegex("[ab]{0,60}"), small);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  CompileLimits little_work;
  little_work.max_work = 100;
  EXPECT_EQ(IntersectExprs(WholeRegex("[a-z]{40}"), WholeRegex("[a-m]*"), little_work)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(AutomatonTest, MultiplesDfaAcceptsExactlyTheMultiples) {
  for (int64_t k : {1, 2, 3, 7, 10, 25, 999, 1000}) {
    auto g = OneRule(Dfa(std::make_shared<const ByteDfa>(MultiplesDfa(k))));
    ASSERT_NE(g, nullptr);
    for (int64_t v = -2100; v <= 2100; ++v) {
      EXPECT_EQ(Matches(g, std::to_string(v)), v % k == 0) << k << " " << v;
    }
    EXPECT_TRUE(Matches(g, std::to_string(k * 123456789012LL))) << k;
    EXPECT_FALSE(Matches(g, absl::StrCat("0", k))) << "leading zero";
    EXPECT_FALSE(Matches(g, "")) << k;
    EXPECT_FALSE(Matches(g, "-")) << k;
  }
}

// DecimalMultiplesDfa against integer arithmetic: a decimal "I.F" (F up to `scale` digits) is
// a multiple of m / 10^scale exactly when I followed by F padded with zeros to `scale` digits is
// a multiple of m. Random decimals of up to 12 digits (the padded integer fits int64).
TEST(AutomatonTest, DecimalMultiplesDfaAcceptsExactlyTheMultiples) {
  BANYAN_SEEDED_RNG(rng);
  for (auto [m, scale] : std::vector<std::pair<int64_t, int>>{
           {1, 2}, {5, 1}, {15, 1}, {25, 2}, {1, 4}, {3, 3}, {999, 2}, {1000 - 1, 6}, {7, 6}}) {
    auto g = OneRule(Dfa(std::make_shared<const ByteDfa>(DecimalMultiplesDfa(m, scale))));
    ASSERT_NE(g, nullptr);
    for (int round = 0; round < 3000; ++round) {
      const int int_digits = 1 + static_cast<int>(rng() % 5);
      const int frac_digits = static_cast<int>(rng() % (scale + 2));  // sometimes too many
      std::string whole = std::to_string(rng() % 100000);
      whole = whole.substr(0, int_digits);
      std::string frac;
      for (int i = 0; i < frac_digits; ++i) frac += static_cast<char>('0' + rng() % 10);
      const bool negative = rng() % 3 == 0;
      const std::string text =
          absl::StrCat(negative ? "-" : "", whole, frac.empty() ? "" : ".", frac);
      bool expected = false;
      if (frac_digits <= scale) {
        std::string padded = whole + frac + std::string(scale - frac_digits, '0');
        expected = std::stoll(padded) % m == 0;
      }
      EXPECT_EQ(Matches(g, text), expected) << m << "e-" << scale << " " << text;
    }
    EXPECT_FALSE(Matches(g, "1.")) << "a point needs a digit after it";
    EXPECT_FALSE(Matches(g, ".5"));
    EXPECT_FALSE(Matches(g, "01")) << "leading zero";
    EXPECT_FALSE(Matches(g, "1e2")) << "no exponent";
    EXPECT_TRUE(Matches(g, "0"));
  }
}

TEST(AutomatonTest, ExactDecimalReadsTheDigitsNotADouble) {
  int64_t m = 0;
  int scale = 0;
  ASSERT_TRUE(ExactDecimal("0.01", &m, &scale));
  EXPECT_EQ(m, 1);
  EXPECT_EQ(scale, 2);
  ASSERT_TRUE(ExactDecimal("2.50", &m, &scale));
  EXPECT_EQ(m, 25);
  EXPECT_EQ(scale, 1);
  ASSERT_TRUE(ExactDecimal("1e-07", &m, &scale));
  EXPECT_EQ(m, 1);
  EXPECT_EQ(scale, 7);
  ASSERT_TRUE(ExactDecimal("1.5E+2", &m, &scale));
  EXPECT_EQ(m, 150);
  EXPECT_EQ(scale, 0);
  ASSERT_TRUE(ExactDecimal("5.0", &m, &scale));
  EXPECT_EQ(m, 5);
  EXPECT_EQ(scale, 0);
  EXPECT_FALSE(ExactDecimal("0", &m, &scale));
  EXPECT_FALSE(ExactDecimal("-1", &m, &scale));
  EXPECT_FALSE(ExactDecimal("1e+30", &m, &scale));
  EXPECT_FALSE(ExactDecimal("1e", &m, &scale));
}

}  // namespace
}  // namespace banyan::text::grammar
