// A context-free grammar over bytes, the input of the grammar engine.
//
// A grammar is a list of rules; each rule's body is an expression tree (Expr) of byte sets,
// references to rules, sequences, alternatives and bounded or unbounded repetitions. It is what
// JSON Schema, regular expressions and choice lists compile to (json_schema.h, regex.h), and
// what CompiledGrammar (automaton.h) turns into one byte DFA per rule with rule calls as
// extra edges: a pushdown automaton. Whatever a front end can express that a rule cannot
// (properties in any order, numeric ranges) is refused by that front end, never approximated
// here.
//
// Rules refer to each other by index, so recursion (JSON's nested values, a schema's `$ref`
// to itself) is a reference, not a copy. Left recursion is refused when the grammar compiles.
#ifndef BANYAN_TEXT_GRAMMAR_GRAMMAR_H_
#define BANYAN_TEXT_GRAMMAR_GRAMMAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/grammar/byte_set.h"

namespace banyan::text::grammar {

// A deterministic automaton over bytes without rule calls, start state 0: what an intersection
// of two regular expressions yields (automaton.h), embedded in an expression as Expr::kDfa.
struct ByteDfa {
  struct Edge {
    uint8_t lo;  // taken on bytes lo..hi (inclusive)
    uint8_t hi;
    int32_t next;
  };
  struct State {
    std::vector<Edge> edges;  // sorted by lo, disjoint
    bool accepting = false;
  };
  std::vector<State> states;
};

struct Expr {
  enum class Kind : uint8_t {
    kEmpty,   // matches the empty string
    kByte,    // one byte from `bytes`
    kRef,     // the rule `rule`
    kSeq,     // kids one after another
    kAlt,     // one of kids
    kRepeat,  // kids[0], at least `min` and at most `max` times (max < 0: unbounded)
    kDfa,     // a string `dfa` accepts
  };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;
  int32_t rule = -1;
  int32_t min = 0;
  int32_t max = -1;
  std::vector<Expr> kids;
  std::shared_ptr<const ByteDfa> dfa;  // kDfa; immutable, shared by copies
};

Expr Empty();
Expr Byte(ByteSet bytes);
// The exact bytes of `text` (Empty for "").
Expr Literal(std::string_view text);
Expr Ref(int32_t rule);
Expr Seq(std::vector<Expr> kids);
Expr Alt(std::vector<Expr> kids);
Expr Repeat(Expr kid, int32_t min, int32_t max);
inline Expr Star(Expr kid) { return Repeat(std::move(kid), 0, -1); }
inline Expr Plus(Expr kid) { return Repeat(std::move(kid), 1, -1); }
inline Expr Opt(Expr kid) { return Repeat(std::move(kid), 0, 1); }
Expr Dfa(std::shared_ptr<const ByteDfa> dfa);
// One UTF-8 encoded scalar value (U+0000..U+10FFFF, no surrogates, shortest form) whose first
// byte is not in `excluded_ascii` (ASCII bytes only).
Expr Utf8Char(const ByteSet& excluded_ascii);

class Grammar {
 public:
  // Declares a rule; its body is set later, so rules can refer to each other in any order.
  int32_t AddRule(std::string name);
  void SetBody(int32_t rule, Expr body);
  // Declares and defines in one call.
  int32_t AddRule(std::string name, Expr body);
  void set_root(int32_t rule) { root_ = rule; }

  int32_t root() const { return root_; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& name(int32_t rule) const { return rules_[rule].name; }
  const Expr& body(int32_t rule) const { return rules_[rule].body; }
  bool defined(int32_t rule) const { return rules_[rule].defined; }

 private:
  struct Rule {
    std::string name;
    Expr body;
    bool defined = false;
  };
  std::vector<Rule> rules_;
  int32_t root_ = 0;
};

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_GRAMMAR_H_
