// The automaton and its matcher on hand-written grammars: acceptance, calls and pops,
// rollback, and the compile-time refusals (undefined rules, left recursion, size limits).
#include <string>

#include "gtest/gtest.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"

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

}  // namespace
}  // namespace banyan::text::grammar
