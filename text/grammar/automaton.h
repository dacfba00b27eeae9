// A compiled grammar: one deterministic automaton over bytes per rule, with rule calls as
// extra edges (a recursive transition network, i.e. a pushdown automaton).
//
// Each rule's body becomes a Thompson NFA and then a DFA by subset construction, over the
// alphabet {bytes} ∪ {rule calls}. Matching (matcher.h) keeps a stack of (rule, state) frames:
// a byte edge moves the top frame, a call edge pushes the callee's start state and remembers
// where to continue, and an accepting state may pop. Rules that never recurse should be inlined
// by the front end (json_schema.h does), so most matching is plain DFA steps.
//
// Compile checks: every referenced rule is defined; no rule calls itself (directly or not)
// before consuming a byte (left recursion would push forever); the automaton stays within
// CompileLimits, so a hostile schema costs bounded memory and time.
#ifndef BANYAN_TEXT_GRAMMAR_AUTOMATON_H_
#define BANYAN_TEXT_GRAMMAR_AUTOMATON_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

struct CompileLimits {
  int64_t max_nfa_states = 1 << 20;  // summed over rules, before determinization
  int64_t max_dfa_states = 1 << 17;  // summed over rules
  // Steps of the subset construction (an NFA byte edge followed for one byte), which bound the
  // compile time: a pattern such as `.*a.{20}` needs few NFA states but 2^20 DFA states.
  int64_t max_work = int64_t{1} << 26;
};

class CompiledGrammar {
 public:
  struct ByteEdge {
    uint8_t lo;  // the edge is taken on bytes lo..hi (inclusive)
    uint8_t hi;
    int32_t next;
  };
  struct CallEdge {
    int32_t rule;  // the callee; its start state is 0
    int32_t next;  // where the caller continues once the callee accepts and pops
  };
  struct State {
    std::vector<ByteEdge> bytes;  // sorted by lo, disjoint
    std::vector<CallEdge> calls;
    bool accepting = false;
  };

  static absl::StatusOr<CompiledGrammar> Compile(const Grammar& grammar,
                                                 const CompileLimits& limits = {});

  int32_t root() const { return root_; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& rule_name(int32_t rule) const { return names_[rule]; }
  const State& state(int32_t rule, int32_t s) const { return rules_[rule][s]; }
  int32_t num_states(int32_t rule) const { return static_cast<int32_t>(rules_[rule].size()); }
  int64_t total_states() const { return total_states_; }
  // Whether the rule matches the empty string.
  bool nullable(int32_t rule) const { return nullable_[rule]; }
  // The state after `byte` from (rule, s), or -1: one lookup in the rule's table, indexed by
  // the byte's class (bytes no state of the rule tells apart share a class).
  int32_t NextByte(int32_t rule, int32_t s, uint8_t byte) const {
    const Table& t = tables_[rule];
    return t.next[static_cast<size_t>(s) * t.num_classes + t.byte_class[byte]];
  }
  // A state that neither calls nor accepts: a byte moves it to NextByte and nothing else
  // happens (no push, no pop), the step a vocabulary walk takes almost every time.
  bool plain(int32_t rule, int32_t s) const { return tables_[rule].plain[s] != 0; }
  // One rule's transition table, for loops that step many bytes within the rule.
  struct RuleView {
    const uint8_t* byte_class;
    int32_t num_classes;
    const int32_t* next;   // [state * num_classes + class]
    const uint8_t* plain;  // [state]
  };
  RuleView view(int32_t rule) const {
    const Table& t = tables_[rule];
    return RuleView{t.byte_class.data(), t.num_classes, t.next.data(), t.plain.data()};
  }

 private:
  struct Table {
    std::array<uint8_t, 256> byte_class{};
    int32_t num_classes = 1;
    std::vector<int32_t> next;  // [state * num_classes + class]: the next state or -1
    std::vector<uint8_t> plain;  // [state]: no calls, not accepting
  };
  void BuildTable(int32_t rule);

  std::vector<std::vector<State>> rules_;  // [rule][state]; state 0 is the start
  std::vector<Table> tables_;              // [rule]
  std::vector<std::string> names_;
  std::vector<char> nullable_;
  int32_t root_ = 0;
  int64_t total_states_ = 0;
};

// Regular languages as automata, for what one expression cannot say alone: a `pattern` beside a
// `format`, integers within bounds that are multiples of k. The expressions must not call
// rules (InvalidArgument otherwise); the work is bounded as a grammar's is: DFA states by
// limits.max_dfa_states, construction steps by limits.max_work (ResourceExhausted beyond).

// The DFA of `e` (subset construction, not minimized), trimmed: every state can reach an
// accepting one (no states: `e` matches nothing).
absl::StatusOr<ByteDfa> ExprToDfa(const Expr& e, const CompileLimits& limits = {});
// The strings both accept (the product of the reachable state pairs), trimmed: every state can
// reach an accepting one, so a matcher that follows it never walks into a dead end. A product
// that accepts nothing is InvalidArgument.
absl::StatusOr<ByteDfa> IntersectDfa(const ByteDfa& a, const ByteDfa& b,
                                     const CompileLimits& limits = {});
// ExprToDfa of both, intersected, as an expression (Expr::kDfa).
absl::StatusOr<Expr> IntersectExprs(const Expr& a, const Expr& b,
                                    const CompileLimits& limits = {});

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_AUTOMATON_H_
