// GBNF → grammar: each syntax feature on the strings it accepts and refuses, each error with its
// line and column, regular grammars against PCRE2 on random grammars and texts, and recursive
// grammars against recognizers written by hand.
#include "text/grammar/gbnf.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/random.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "tests/text/grammar/pcre2_oracle.h"

namespace banyan::text::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> FromGbnf(const std::string& text) {
  absl::StatusOr<Grammar> g = GbnfToGrammar(text);
  EXPECT_TRUE(g.ok()) << text << "\n" << g.status();
  if (!g.ok()) return nullptr;
  return MustCompile(*g);
}

std::string Refusal(const std::string& text, const GbnfLimits& limits = {}) {
  absl::StatusOr<Grammar> g = GbnfToGrammar(text, limits);
  if (g.ok()) return "(accepted)";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

TEST(GbnfTest, LiteralsAndEscapes) {
  auto g = FromGbnf(R"(root ::= "a\"b\\c" "\n\t\r" "\x41\u00e9\U0001F600" "\[\]\-" "ü")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "a\"b\\c\n\t\rA\xC3\xA9\xF0\x9F\x98\x80[]-\xC3\xBC"));
  EXPECT_FALSE(Matches(g, "a\"b\\c\n\t\rA\xC3\xA9\xF0\x9F\x98\x80[]-"));
  // \xHH is a code point, not a byte: U+00FF is two bytes of UTF-8.
  auto ff = FromGbnf(R"(root ::= "\xff")");
  ASSERT_NE(ff, nullptr);
  EXPECT_TRUE(Matches(ff, "\xC3\xBF"));
  EXPECT_FALSE(Matches(ff, "\xFF"));
  auto empty = FromGbnf(R"(root ::= "")");
  ASSERT_NE(empty, nullptr);
  EXPECT_TRUE(Matches(empty, ""));
  EXPECT_FALSE(Matches(empty, "a"));
}

TEST(GbnfTest, ClassesAreCodePoints) {
  auto g = FromGbnf(R"(root ::= [a-cx] [^a-z\n] [é-ü] [\u20ac\-\]])");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "a1\xC3\xA9\xE2\x82\xAC"));  // a 1 é €
  EXPECT_TRUE(Matches(g, "x\xF0\x9F\x98\x80\xC3\xB1-"));  // x 😀 ñ -
  EXPECT_TRUE(Matches(g, "b!\xC3\xBC]"));
  EXPECT_FALSE(Matches(g, "d1\xC3\xA9-"));   // d is outside [a-cx]
  EXPECT_FALSE(Matches(g, "aq\xC3\xA9-"));   // q is excluded
  EXPECT_FALSE(Matches(g, "a\n\xC3\xA9-"));  // so is the newline
  EXPECT_FALSE(Matches(g, "a1e-"));          // e is below é
  EXPECT_FALSE(Matches(g, "a1\xC3\xA9x"));
  auto neg = FromGbnf("root ::= [^x]");
  ASSERT_NE(neg, nullptr);
  EXPECT_TRUE(Matches(neg, "\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(Matches(neg, "\xED\xA0\x80"));      // a surrogate is no code point
  EXPECT_FALSE(Matches(neg, "\xC3"));              // nor is a cut character
  auto none = FromGbnf("root ::= [] | \"a\"");
  ASSERT_NE(none, nullptr);
  EXPECT_TRUE(Matches(none, "a"));
  EXPECT_FALSE(Matches(none, ""));
}

TEST(GbnfTest, AnyCharacter) {
  auto g = FromGbnf("root ::= . .");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "\n\xE2\x82\xAC"));  // a newline is a character too
  EXPECT_FALSE(Matches(g, "a"));
  EXPECT_FALSE(Matches(g, "abc"));
  EXPECT_FALSE(Matches(g, "a\xFF"));
}

TEST(GbnfTest, AlternativesGroupsAndRepetitions) {
  auto g = FromGbnf(R"(root ::= ("ab" | "c")+ "x"? [0-9]* ("y"{2} | "z"{1,} | "w"{0,2}) "-"{3,5})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "abyy---"));
  EXPECT_TRUE(Matches(g, "cabcx123zzz-----"));
  EXPECT_TRUE(Matches(g, "c----"));  // w{0,2} zero times
  EXPECT_TRUE(Matches(g, "cww---"));
  EXPECT_FALSE(Matches(g, "x---"));      // + needs one
  EXPECT_FALSE(Matches(g, "cy---"));     // {2}
  EXPECT_FALSE(Matches(g, "cwww---"));   // {0,2}
  EXPECT_FALSE(Matches(g, "c--"));       // {3,5}
  EXPECT_FALSE(Matches(g, "c------"));
  EXPECT_FALSE(Matches(g, "cxx---"));
}

TEST(GbnfTest, RulesCommentsAndLayout) {
  const std::string text = R"(# a list of greetings
root ::= greeting ( ", "   # between them
                   greeting )*   # any number
greeting ::=
  "hello" |
  "hi" name-2?
name-2 ::= " " [A-Z] [a-z]+
# unreachable rules must still be well-formed
unused ::= "u")";
  auto g = FromGbnf(text);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "hello"));
  EXPECT_TRUE(Matches(g, "hi Bob, hello, hi"));
  EXPECT_FALSE(Matches(g, "hi bob"));
  EXPECT_FALSE(Matches(g, "hello,hi"));
  EXPECT_FALSE(Matches(g, "u"));
  // Carriage returns end lines as newlines do.
  auto crlf = FromGbnf("root ::= a |\r\n  b\r\na ::= \"a\"\r\nb ::= \"b\"\r\n");
  ASSERT_NE(crlf, nullptr);
  EXPECT_TRUE(Matches(crlf, "b"));
}

TEST(GbnfTest, NonRecursiveRulesAreInlined) {
  absl::StatusOr<Grammar> g =
      GbnfToGrammar("root ::= a b a\na ::= b \"x\"\nb ::= [0-9]\nc ::= \"(\" c? \")\"");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_rules(), 1);  // a and b inlined, c unreachable
  absl::StatusOr<Grammar> rec = GbnfToGrammar("root ::= \"<\" list \">\"\nlist ::= item (\",\" item)*\nitem ::= \"i\" | \"<\" list \">\"");
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->num_rules(), 3);  // list and item call each other: both kept, as rules
  auto c = MustCompile(*rec);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Matches(c, "<i,<i,<i>>,i>"));
  EXPECT_FALSE(Matches(c, "<i,<i>"));
}

TEST(GbnfTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(Refusal("root ::= a\n  | \"x\" b\nb ::= \"y\""),
            "GBNF: expected a rule name, found '|' at line 2, column 3");
  EXPECT_EQ(Refusal("root ::= \"x\" missing-rule"),
            "GBNF: rule 'missing-rule' is not defined at line 1, column 14");
  EXPECT_EQ(Refusal("start ::= \"x\""), "GBNF: the grammar defines no 'root' rule (the start)");
  EXPECT_EQ(Refusal(""), "GBNF: the grammar has no rules");
  EXPECT_EQ(Refusal("  # only a comment\n\n"), "GBNF: the grammar has no rules");
  EXPECT_EQ(Refusal("root ::= \"x\"\nroot ::= \"y\""),
            "GBNF: rule 'root' is defined twice at line 2, column 1");
  EXPECT_EQ(Refusal("root ::= \"abc"), "GBNF: an unterminated string literal at line 1, column 10");
  EXPECT_EQ(Refusal("root ::= \"é\" [a-z"),
            "GBNF: an unterminated character class '[' at line 1, column 14");
  EXPECT_EQ(Refusal("root ::= (\"a\"\n  \"b\""), "GBNF: an unterminated '(' at line 1, column 10");
  EXPECT_EQ(Refusal("root ::= \"a\")"), "GBNF: an unmatched ')' at line 1, column 13");
  EXPECT_EQ(Refusal("root ::= \"a\\q\""), "GBNF: a bad escape '\\q' at line 1, column 12");
  EXPECT_EQ(Refusal("root ::= [\\x4]"),
            "GBNF: a bad escape: '\\x' needs 2 hexadecimal digits at line 1, column 11");
  EXPECT_EQ(Refusal("root ::= \"\\U00110000\""),
            "GBNF: a bad escape: not a Unicode scalar value at line 1, column 11");
  EXPECT_EQ(Refusal("root ::= \"\\uD800\""),
            "GBNF: a bad escape: not a Unicode scalar value at line 1, column 11");
  EXPECT_EQ(Refusal("root ::= [z-a]"), "GBNF: a class range out of order at line 1, column 11");
  EXPECT_EQ(Refusal("root \"x\""),
            "GBNF: expected '::=' after the rule name 'root', found '\"' at line 1, column 6");
  EXPECT_EQ(Refusal("root ::= * \"x\""),
            "GBNF: a repetition '*' with nothing to repeat at line 1, column 10");
  EXPECT_EQ(Refusal("root ::= \"x\"{3,2}"),
            "GBNF: a repetition {3,2} with n < m at line 1, column 13");
  EXPECT_EQ(Refusal("root ::= \"x\"{3"), "GBNF: an unterminated '{' at line 1, column 13");
  EXPECT_EQ(Refusal("root ::= \"x\"{,2}"),
            "GBNF: expected a number in {m,n}, found ',' at line 1, column 14");
  EXPECT_EQ(Refusal("root ::= \"x\"{2001}"),
            "GBNF: a repetition count over 2000 at line 1, column 14");
  EXPECT_EQ(Refusal("root ::= <think>"),
            "GBNF: a token reference '<...>' (not supported) at line 1, column 10");
  EXPECT_EQ(Refusal("root ::= \"a\" ; \"b\""), "GBNF: unexpected ';' at line 1, column 14");
  EXPECT_EQ(Refusal("root ::= \"\xC3\""), "GBNF: a byte that is not UTF-8 at line 1, column 11");
  EXPECT_EQ(Refusal("root_x ::= \"a\""),
            "GBNF: expected '::=' after the rule name 'root', found '_' at line 1, column 5");
}

TEST(GbnfTest, LimitsAreRefused) {
  GbnfLimits small;
  small.max_length = 20;
  small.max_rules = 2;
  small.max_depth = 2;
  EXPECT_EQ(Refusal("root ::= \"aaaaaaaaaaaaaaaaaaaa\"", small),
            "GBNF: the grammar is longer than 20 bytes");
  EXPECT_EQ(Refusal("root ::= a b", small), "GBNF: more than 2 rules at line 1, column 12");
  EXPECT_EQ(Refusal("root ::= (((\"\")))", small),
            "GBNF: groups nested more than 2 deep at line 1, column 12");
  // Over the automaton's limits: refused when it compiles, as any grammar is.
  absl::StatusOr<Grammar> big = GbnfToGrammar("root ::= (\"ab\"{100}){200}");
  ASSERT_TRUE(big.ok()) << big.status();
  CompileLimits limits;
  limits.max_nfa_states = 10000;
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(*big, limits);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
}

TEST(GbnfTest, LeftRecursionIsRefusedWhenCompiled) {
  absl::StatusOr<Grammar> g = GbnfToGrammar("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(*g);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'expr' is left-recursive"), std::string::npos)
      << c.status();
}

// ---- Regular grammars against PCRE2 ----

// The characters random texts are made of (UTF-8), and the grammar pieces over them.
const std::vector<std::string> kAlphabet = {"a", "b", "c", "\xC3\xA9", "\xE2\x82\xAC", "\n", "\""};

struct Piece {
  std::string gbnf;
  std::string regex;                 // PCRE2 with PCRE2_UTF | PCRE2_DOTALL
  std::vector<std::string> members;  // kLiteral: one, the text; kClass: those of kAlphabet
};

const std::vector<Piece> kLiterals = {
    {R"("a")", "a", {"a"}},          {R"("bc")", "bc", {"bc"}},
    {R"("\u00e9")", "\xC3\xA9", {"\xC3\xA9"}}, {R"("\n")", R"(\n)", {"\n"}},
    {R"("\"")", "\"", {"\""}},       {R"("")", "", {""}},
    {"\"\xE2\x82\xAC" "a\"", "\xE2\x82\xAC" "a", {"\xE2\x82\xAC" "a"}},
};
const std::vector<Piece> kClasses = {
    {"[ab]", "[ab]", {"a", "b"}},
    {"[^a]", "[^a]", {"b", "c", "\xC3\xA9", "\xE2\x82\xAC", "\n", "\""}},
    {"[a-c]", "[a-c]", {"a", "b", "c"}},
    {R"([\u00e0-\u00ff\x22])", R"([\x{e0}-\x{ff}\x{22}])", {"\xC3\xA9", "\""}},
    {R"([^\n\u20ac])", R"([^\n\x{20ac}])", {"a", "b", "c", "\xC3\xA9", "\""}},
    {".", ".", kAlphabet},
};

// A random regular expression tree written both ways, with a sampler of its members.
struct Node {
  enum class Kind { kPiece, kSeq, kAlt, kRepeat, kRule } kind = Kind::kPiece;
  const Piece* piece = nullptr;
  int rule = -1;  // kRule: an earlier rule of the grammar
  int min = 0, max = -1;
  std::vector<Node> kids;
};

class RandomRegularGrammar {
 public:
  explicit RandomRegularGrammar(std::mt19937_64& rng) : rng_(rng) {
    const int rules = 1 + Pick(3);
    for (int r = 0; r < rules; ++r) bodies_.push_back(Random(0));
  }

  std::string Gbnf() const {
    std::string out = "# a random regular grammar\n";
    for (size_t r = 0; r < bodies_.size(); ++r) {
      out += (r + 1 == bodies_.size() ? std::string("root") : "r" + std::to_string(r)) + " ::= " +
             ToGbnf(bodies_[r]) + "\n";
    }
    return out;
  }
  std::string Regex() const { return ToRegex(bodies_.back()); }
  std::string Sample() { return Sample(bodies_.back()); }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % n); }

  Node Random(int depth) {
    Node n;
    const int kind = depth < 3 ? Pick(6) : Pick(2);
    if (kind == 0) {
      n.piece = &kLiterals[Pick(static_cast<int>(kLiterals.size()))];
    } else if (kind == 1) {
      n.piece = &kClasses[Pick(static_cast<int>(kClasses.size()))];
    } else if (kind == 2 || kind == 3) {
      n.kind = kind == 2 ? Node::Kind::kSeq : Node::Kind::kAlt;
      for (int i = 1 + Pick(3); i > 0; --i) n.kids.push_back(Random(depth + 1));
    } else if (kind == 4) {
      n.kind = Node::Kind::kRepeat;
      static const int kBounds[][2] = {{0, -1}, {1, -1}, {0, 1}, {2, 2}, {1, 3}, {2, -1}, {0, 2}};
      const auto& b = kBounds[Pick(7)];
      n.min = b[0];
      n.max = b[1];
      // Unbounded repetition of something that can be empty: legal, but PCRE2 then explores
      // exponentially; kept away from nesting by repeating only pieces and rules here.
      n.kids.push_back(Pick(2) == 0 || bodies_.empty() ? Random(3) : RuleRef());
    } else {
      n = bodies_.empty() ? Random(3) : RuleRef();
    }
    return n;
  }
  Node RuleRef() {
    Node n;
    n.kind = Node::Kind::kRule;
    n.rule = Pick(static_cast<int>(bodies_.size()));
    return n;
  }

  std::string ToGbnf(const Node& n) const {
    switch (n.kind) {
      case Node::Kind::kPiece: return n.piece->gbnf;
      case Node::Kind::kRule: return "r" + std::to_string(n.rule);
      case Node::Kind::kSeq:
      case Node::Kind::kAlt: {
        std::string out = "(";
        for (size_t i = 0; i < n.kids.size(); ++i) {
          if (i > 0) out += n.kind == Node::Kind::kAlt ? " |\n    " : " ";
          out += ToGbnf(n.kids[i]);
        }
        return out + ")";
      }
      case Node::Kind::kRepeat: return "(" + ToGbnf(n.kids[0]) + ")" + Quantifier(n);
    }
    return "";
  }
  std::string ToRegex(const Node& n) const {
    switch (n.kind) {
      case Node::Kind::kPiece: return "(?:" + n.piece->regex + ")";
      case Node::Kind::kRule: return "(?:" + ToRegex(bodies_[n.rule]) + ")";
      case Node::Kind::kSeq:
      case Node::Kind::kAlt: {
        std::string out = "(?:";
        for (size_t i = 0; i < n.kids.size(); ++i) {
          if (i > 0 && n.kind == Node::Kind::kAlt) out += "|";
          out += ToRegex(n.kids[i]);
        }
        return out + ")";
      }
      case Node::Kind::kRepeat: return "(?:" + ToRegex(n.kids[0]) + ")" + Quantifier(n);
    }
    return "";
  }
  static std::string Quantifier(const Node& n) {
    if (n.min == 0 && n.max < 0) return "*";
    if (n.min == 1 && n.max < 0) return "+";
    if (n.min == 0 && n.max == 1) return "?";
    if (n.max < 0) return "{" + std::to_string(n.min) + ",}";
    if (n.min == n.max) return "{" + std::to_string(n.min) + "}";
    return "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
  }
  std::string Sample(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kPiece: return n.piece->members[Pick(static_cast<int>(n.piece->members.size()))];
      case Node::Kind::kRule: return Sample(bodies_[n.rule]);
      case Node::Kind::kSeq: {
        std::string out;
        for (const Node& k : n.kids) out += Sample(k);
        return out;
      }
      case Node::Kind::kAlt: return Sample(n.kids[Pick(static_cast<int>(n.kids.size()))]);
      case Node::Kind::kRepeat: {
        const int count = n.min + Pick((n.max < 0 ? n.min + 3 : n.max) - n.min + 1);
        std::string out;
        for (int i = 0; i < count; ++i) out += Sample(n.kids[0]);
        return out;
      }
    }
    return "";
  }

  std::mt19937_64& rng_;
  std::vector<Node> bodies_;  // the last is root
};

TEST(GbnfTest, RegularGrammarsAgreeWithPcre2) {
  BANYAN_SEEDED_RNG(rng);
  int checked = 0, matched = 0, unanswered = 0;
  for (int p = 0; p < 150; ++p) {
    RandomRegularGrammar grammar(rng);
    const std::string gbnf = grammar.Gbnf();
    const std::string regex = grammar.Regex();
    const Pcre2Oracle oracle(regex, PCRE2_UTF | PCRE2_DOTALL);
    ASSERT_TRUE(oracle.ok()) << regex;
    auto g = FromGbnf(gbnf);
    ASSERT_NE(g, nullptr);
    for (int t = 0; t < 60; ++t) {
      std::string text;
      if (t < 20) {
        text = grammar.Sample();
      } else if (t < 40) {  // a member, one character changed, dropped or added
        text = grammar.Sample();
        const size_t at = text.empty() ? 0 : rng() % text.size();
        const std::string c = kAlphabet[rng() % kAlphabet.size()];
        switch (rng() % 3) {
          case 0: text.insert(at, c); break;
          case 1: if (!text.empty()) text.erase(at, 1); break;
          default: if (!text.empty()) text.replace(at, 1, c); break;
        }
      } else {
        for (int n = static_cast<int>(rng() % 6); n > 0; --n) text += kAlphabet[rng() % kAlphabet.size()];
      }
      const int want = oracle.Match(text, /*whole=*/true);
      if (want < 0) {  // a dropped byte of é / € is no UTF-8, which PCRE2 does not answer
        ++unanswered;
        EXPECT_FALSE(Matches(g, text)) << gbnf << "on '" << text << "'";
        continue;
      }
      if (t < 20) {
        EXPECT_EQ(want, 1) << "the sampler is wrong: /" << regex << "/ on '" << text << "'";
      }
      EXPECT_EQ(Matches(g, text), want == 1)
          << gbnf << "as /" << regex << "/ on '" << text << "'";
      ++checked;
      matched += want;
    }
  }
  EXPECT_GT(matched, checked / 5) << "the texts rarely match: the test proves little";
  EXPECT_GT(checked - matched, checked / 5) << "the texts rarely fail: the test proves little";
  EXPECT_LT(unanswered, checked / 5);
}

// ---- Recursive grammars against recognizers ----

bool Balanced(const std::string& s) {
  int depth = 0;
  for (char c : s) {
    if (c == '(') ++depth;
    else if (c == ')' && --depth < 0) return false;
    else if (c != '(' && c != ')') return false;
  }
  return depth == 0;
}

// expr := term ('+' term)*, term := factor ('*' factor)*, factor := digit+ | '(' expr ')'.
class Arithmetic {
 public:
  static bool Recognize(const std::string& s) {
    Arithmetic a(s);
    return a.Expr() && a.pos_ == s.size();
  }

 private:
  explicit Arithmetic(const std::string& s) : s_(s) {}
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expr() {
    if (!Term()) return false;
    while (Eat('+')) {
      if (!Term()) return false;
    }
    return true;
  }
  bool Term() {
    if (!Factor()) return false;
    while (Eat('*')) {
      if (!Factor()) return false;
    }
    return true;
  }
  bool Factor() {
    if (Eat('(')) return Expr() && Eat(')');
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

// Every string over `alphabet` of length at most `max_length`.
std::vector<std::string> AllStrings(const std::string& alphabet, int max_length) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0, len = 0; len < static_cast<size_t>(max_length); ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  return out;
}

TEST(GbnfTest, BalancedParentheses) {
  auto g = FromGbnf("root ::= pair*\npair ::= \"(\" root \")\"");
  ASSERT_NE(g, nullptr);
  int balanced = 0;
  for (const std::string& s : AllStrings("()x", 10)) {
    EXPECT_EQ(Matches(g, s), Balanced(s)) << "'" << s << "'";
    balanced += Balanced(s);
  }
  EXPECT_GT(balanced, 50);
}

TEST(GbnfTest, ArithmeticExpressions) {
  auto g = FromGbnf(R"gbnf(
root   ::= expr
expr   ::= term ("+" term)*
term   ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")"
)gbnf");
  ASSERT_NE(g, nullptr);
  int accepted = 0;
  for (const std::string& s : AllStrings("1+*()", 7)) {
    EXPECT_EQ(Matches(g, s), Arithmetic::Recognize(s)) << "'" << s << "'";
    accepted += Arithmetic::Recognize(s);
  }
  EXPECT_GT(accepted, 100);
  BANYAN_SEEDED_RNG(rng);
  // Longer texts: deep nesting, built to be members, then broken at one place.
  for (int i = 0; i < 200; ++i) {
    std::string s = "1";
    for (int step = static_cast<int>(rng() % 30); step > 0; --step) {
      switch (rng() % 3) {
        case 0: s = absl::StrCat("(", s, ")"); break;
        case 1: absl::StrAppend(&s, "+", rng() % 100); break;
        default: s = absl::StrCat(rng() % 10, "*", s); break;
      }
    }
    EXPECT_TRUE(Matches(g, s)) << s;
    std::string broken = s;
    broken[rng() % broken.size()] = "()+*"[rng() % 4];
    EXPECT_EQ(Matches(g, broken), Arithmetic::Recognize(broken)) << broken;
  }
}

}  // namespace
}  // namespace banyan::text::grammar
