#include "text/grammar/automaton.h"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan::text::grammar {
namespace {

// Expression trees come from the front ends, which bound their nesting; this bound keeps a
// grammar built by hand from overflowing the stack all the same.
constexpr int kMaxExprDepth = 4096;

struct NfaState {
  std::vector<int32_t> eps;
  std::vector<std::pair<ByteSet, int32_t>> bytes;
  std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, next)
};

class NfaBuilder {
 public:
  NfaBuilder(int64_t* budget, int64_t limit) : budget_(budget), limit_(limit) {}

  absl::StatusOr<int32_t> New() {
    if (++*budget_ > limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the grammar is too large: it needs more than ", limit_, " automaton (NFA) states"));
    }
    states_.emplace_back();
    return static_cast<int32_t>(states_.size()) - 1;
  }

  // Adds the fragment of `e` from state `in` to state `out`. `in` and `out` are either fresh
  // to this call's parent construct or shared only by alternatives, so a loop built here never
  // joins a sibling's path.
  absl::Status Build(const Expr& e, int32_t in, int32_t out, int depth) {
    if (depth > kMaxExprDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar nests more than ", kMaxExprDepth, " levels deep"));
    }
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        states_[in].eps.push_back(out);
        return absl::OkStatus();
      case Expr::Kind::kByte:
        states_[in].bytes.emplace_back(e.bytes, out);
        return absl::OkStatus();
      case Expr::Kind::kRef:
        states_[in].calls.emplace_back(e.rule, out);
        return absl::OkStatus();
      case Expr::Kind::kSeq: {
        int32_t cur = in;
        for (size_t i = 0; i < e.kids.size(); ++i) {
          int32_t next = out;
          if (i + 1 < e.kids.size()) {
            absl::StatusOr<int32_t> mid = New();
            if (!mid.ok()) return mid.status();
            next = *mid;
          }
          if (absl::Status s = Build(e.kids[i], cur, next, depth + 1); !s.ok()) return s;
          cur = next;
        }
        return absl::OkStatus();
      }
      case Expr::Kind::kAlt:
        for (const Expr& kid : e.kids) {
          // A fresh entry per branch, so a branch's loop cannot reach another branch.
          absl::StatusOr<int32_t> entry = New();
          if (!entry.ok()) return entry.status();
          states_[in].eps.push_back(*entry);
          if (absl::Status s = Build(kid, *entry, out, depth + 1); !s.ok()) return s;
        }
        return absl::OkStatus();
      case Expr::Kind::kRepeat:
        return BuildRepeat(e, in, out, depth);
      case Expr::Kind::kDfa:
        return BuildDfa(*e.dfa, in, out);
    }
    return absl::InternalError("unknown expression kind");
  }

  std::vector<NfaState>& states() { return states_; }

 private:
  // A DFA is an NFA already: one state per DFA state, entered from `in`, left to `out` from
  // each accepting state.
  absl::Status BuildDfa(const ByteDfa& dfa, int32_t in, int32_t out) {
    std::vector<int32_t> ids(dfa.states.size());
    for (int32_t& id : ids) {
      absl::StatusOr<int32_t> s = New();
      if (!s.ok()) return s.status();
      id = *s;
    }
    if (ids.empty()) return absl::OkStatus();  // matches nothing
    states_[in].eps.push_back(ids[0]);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (const ByteDfa::Edge& e : dfa.states[i].edges) {
        states_[ids[i]].bytes.emplace_back(ByteSet::Range(e.lo, e.hi), ids[e.next]);
      }
      if (dfa.states[i].accepting) states_[ids[i]].eps.push_back(out);
    }
    return absl::OkStatus();
  }

  absl::Status BuildRepeat(const Expr& e, int32_t in, int32_t out, int depth) {
    const Expr& kid = e.kids[0];
    if (e.max >= 0 && e.max < e.min) {
      return absl::InvalidArgumentError(
          absl::StrCat("a repetition's maximum ", e.max, " is below its minimum ", e.min));
    }
    int32_t cur = in;
    auto fresh = [&]() -> absl::StatusOr<int32_t> { return New(); };
    for (int32_t i = 0; i < e.min; ++i) {
      absl::StatusOr<int32_t> next = fresh();
      if (!next.ok()) return next.status();
      if (absl::Status s = Build(kid, cur, *next, depth + 1); !s.ok()) return s;
      cur = *next;
    }
    if (e.max < 0) {
      absl::StatusOr<int32_t> loop = fresh();
      if (!loop.ok()) return loop.status();
      states_[cur].eps.push_back(*loop);
      if (absl::Status s = Build(kid, *loop, *loop, depth + 1); !s.ok()) return s;
      states_[*loop].eps.push_back(out);
      return absl::OkStatus();
    }
    for (int32_t i = e.min; i < e.max; ++i) {
      absl::StatusOr<int32_t> next = fresh();
      if (!next.ok()) return next.status();
      states_[cur].eps.push_back(out);  // stop here
      if (absl::Status s = Build(kid, cur, *next, depth + 1); !s.ok()) return s;
      cur = *next;
    }
    states_[cur].eps.push_back(out);
    return absl::OkStatus();
  }

  std::vector<NfaState> states_;
  int64_t* budget_;
  int64_t limit_;
};

using StateSet = std::vector<int32_t>;  // sorted NFA states

void Closure(const std::vector<NfaState>& nfa, StateSet* set) {
  std::vector<int32_t> stack(set->begin(), set->end());
  std::vector<char> seen(nfa.size(), 0);
  for (int32_t s : *set) seen[s] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t t : nfa[s].eps) {
      if (!seen[t]) {
        seen[t] = 1;
        set->push_back(t);
        stack.push_back(t);
      }
    }
  }
  std::sort(set->begin(), set->end());
}

// Subset construction of one rule's NFA (start 0, final 1).
absl::Status Determinize(const std::vector<NfaState>& nfa, int64_t* dfa_budget, int64_t limit,
                         int64_t* work, int64_t work_limit,
                         std::vector<CompiledGrammar::State>* out) {
  absl::flat_hash_map<StateSet, int32_t> ids;
  std::vector<StateSet> sets;
  auto intern = [&](StateSet set) -> absl::StatusOr<int32_t> {
    Closure(nfa, &set);
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (++*dfa_budget > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the grammar is too large: it needs more than ", limit, " automaton (DFA) states"));
    }
    const int32_t id = static_cast<int32_t>(sets.size());
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    out->emplace_back();
    return id;
  };
  if (absl::StatusOr<int32_t> start = intern({0}); !start.ok()) return start.status();
  std::vector<StateSet> per_byte(256);
  for (size_t d = 0; d < sets.size(); ++d) {
    const StateSet set = sets[d];  // copy: `sets` grows below
    CompiledGrammar::State st;
    st.accepting = std::binary_search(set.begin(), set.end(), 1);
    for (StateSet& targets : per_byte) targets.clear();
    absl::flat_hash_map<int32_t, StateSet> per_call;
    std::vector<int32_t> call_order;
    for (int32_t s : set) {
      for (const auto& [bytes, next] : nfa[s].bytes) {
        const int32_t target = next;
        bytes.ForEach([&](uint8_t b) {
          per_byte[b].push_back(target);
          ++*work;
        });
      }
      if (*work > work_limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the grammar is too large: its automaton takes more than ", work_limit,
            " construction steps (a pattern such as .*a.{20} needs exponentially many states)"));
      }
      for (const auto& [rule, next] : nfa[s].calls) {
        auto [it, inserted] = per_call.try_emplace(rule);
        if (inserted) call_order.push_back(rule);
        it->second.push_back(next);
      }
    }
    int32_t prev_id = -1;
    for (int b = 0; b < 256; ++b) {
      StateSet& targets = per_byte[b];
      if (targets.empty()) {
        prev_id = -1;
        continue;
      }
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      int32_t id;
      if (b > 0 && prev_id >= 0 && per_byte[b - 1] == targets) {
        id = prev_id;
      } else {
        absl::StatusOr<int32_t> got = intern(targets);
        if (!got.ok()) return got.status();
        id = *got;
      }
      if (!st.bytes.empty() && st.bytes.back().next == id && st.bytes.back().hi + 1 == b) {
        st.bytes.back().hi = static_cast<uint8_t>(b);
      } else {
        st.bytes.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(b), id});
      }
      prev_id = id;
    }
    std::sort(call_order.begin(), call_order.end());
    for (int32_t rule : call_order) {
      StateSet targets = per_call[rule];
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      absl::StatusOr<int32_t> got = intern(std::move(targets));
      if (!got.ok()) return got.status();
      st.calls.push_back({rule, *got});
    }
    (*out)[d] = std::move(st);
  }
  return absl::OkStatus();
}

bool CallsRules(const Expr& e) {
  if (e.kind == Expr::Kind::kRef) return true;
  for (const Expr& kid : e.kids) {
    if (CallsRules(kid)) return true;
  }
  return false;
}

// Keeps the states from which an accepting state can be reached, renumbered in order (the
// start stays 0); edges into the others are dropped. No states when the start is dead.
ByteDfa Trim(const ByteDfa& dfa) {
  const size_t n = dfa.states.size();
  std::vector<std::vector<int32_t>> into(n);
  std::vector<int32_t> stack;
  std::vector<char> live(n, 0);
  for (size_t s = 0; s < n; ++s) {
    for (const ByteDfa::Edge& e : dfa.states[s].edges) {
      into[e.next].push_back(static_cast<int32_t>(s));
    }
    if (dfa.states[s].accepting) {
      live[s] = 1;
      stack.push_back(static_cast<int32_t>(s));
    }
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : into[s]) {
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
    }
  }
  ByteDfa out;
  if (n == 0 || !live[0]) return out;
  std::vector<int32_t> id(n, -1);
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    id[s] = static_cast<int32_t>(out.states.size());
    out.states.emplace_back();
  }
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    ByteDfa::State& st = out.states[id[s]];
    st.accepting = dfa.states[s].accepting;
    for (const ByteDfa::Edge& e : dfa.states[s].edges) {
      if (live[e.next]) st.edges.push_back({e.lo, e.hi, id[e.next]});
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ByteDfa> ExprToDfa(const Expr& e, const CompileLimits& limits) {
  if (CallsRules(e)) {
    return absl::InvalidArgumentError(
        "an expression that calls rules is not a regular language: it cannot be intersected");
  }
  int64_t nfa_budget = 0;
  int64_t dfa_budget = 0;
  int64_t work = 0;
  NfaBuilder nfa(&nfa_budget, limits.max_nfa_states);
  absl::StatusOr<int32_t> start = nfa.New();
  absl::StatusOr<int32_t> final = nfa.New();
  if (!start.ok()) return start.status();
  if (!final.ok()) return final.status();
  if (absl::Status s = nfa.Build(e, *start, *final, 0); !s.ok()) return s;
  std::vector<CompiledGrammar::State> states;
  if (absl::Status s = Determinize(nfa.states(), &dfa_budget, limits.max_dfa_states, &work,
                                   limits.max_work, &states);
      !s.ok()) {
    return s;
  }
  ByteDfa dfa;
  dfa.states.resize(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    dfa.states[i].accepting = states[i].accepting;
    for (const CompiledGrammar::ByteEdge& b : states[i].bytes) {
      dfa.states[i].edges.push_back({b.lo, b.hi, b.next});
    }
  }
  return Trim(dfa);
}

absl::StatusOr<ByteDfa> IntersectDfa(const ByteDfa& a, const ByteDfa& b,
                                     const CompileLimits& limits) {
  if (a.states.empty() || b.states.empty()) {
    return absl::InvalidArgumentError("no string matches both: one of them matches nothing");
  }
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  auto intern = [&](std::pair<int32_t, int32_t> p) -> absl::StatusOr<int32_t> {
    auto [it, inserted] = ids.try_emplace(p, static_cast<int32_t>(pairs.size()));
    if (!inserted) return it->second;
    if (static_cast<int64_t>(pairs.size()) >= limits.max_dfa_states) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the intersection is too large: it needs more than ",
                       limits.max_dfa_states, " automaton (DFA) states"));
    }
    pairs.push_back(p);
    return it->second;
  };
  if (absl::StatusOr<int32_t> s = intern({0, 0}); !s.ok()) return s.status();
  ByteDfa product;
  int64_t work = 0;
  for (size_t d = 0; d < pairs.size(); ++d) {
    const auto [i, j] = pairs[d];
    const std::vector<ByteDfa::Edge>& ea = a.states[i].edges;
    const std::vector<ByteDfa::Edge>& eb = b.states[j].edges;
    ByteDfa::State st;
    st.accepting = a.states[i].accepting && b.states[j].accepting;
    // Both edge lists are sorted and disjoint: one sweep finds every overlap.
    for (size_t x = 0, y = 0; x < ea.size() && y < eb.size();) {
      const uint8_t lo = std::max(ea[x].lo, eb[y].lo);
      const uint8_t hi = std::min(ea[x].hi, eb[y].hi);
      if (lo <= hi) {
        absl::StatusOr<int32_t> next = intern({ea[x].next, eb[y].next});
        if (!next.ok()) return next.status();
        if (!st.edges.empty() && st.edges.back().next == *next && st.edges.back().hi + 1 == lo) {
          st.edges.back().hi = hi;
        } else {
          st.edges.push_back({lo, hi, *next});
        }
      }
      if (++work > limits.max_work) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the intersection is too large: it takes more than ", limits.max_work,
            " construction steps"));
      }
      const uint8_t ha = ea[x].hi, hb = eb[y].hi;
      if (ha <= hb) ++x;
      if (hb <= ha) ++y;
    }
    product.states.push_back(std::move(st));
  }
  ByteDfa trimmed = Trim(product);
  if (trimmed.states.empty()) {
    return absl::InvalidArgumentError("no string matches both");
  }
  return trimmed;
}

absl::StatusOr<Expr> IntersectExprs(const Expr& a, const Expr& b, const CompileLimits& limits) {
  absl::StatusOr<ByteDfa> da = ExprToDfa(a, limits);
  if (!da.ok()) return da.status();
  absl::StatusOr<ByteDfa> db = ExprToDfa(b, limits);
  if (!db.ok()) return db.status();
  absl::StatusOr<ByteDfa> both = IntersectDfa(*da, *db, limits);
  if (!both.ok()) return both.status();
  return Dfa(std::make_shared<const ByteDfa>(*std::move(both)));
}

void CompiledGrammar::BuildTable(int32_t rule) {
  // Classes are the runs of bytes between the edges' bounds over all states of the rule (every
  // edge covers whole runs, so the bytes of a run go to the same state from every state).
  std::array<bool, 257> starts{};
  starts[0] = true;
  for (const State& st : rules_[rule]) {
    for (const ByteEdge& e : st.bytes) {
      starts[e.lo] = true;
      starts[e.hi + 1] = true;
    }
  }
  Table& t = tables_[rule];
  int32_t cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (starts[b]) ++cls;
    t.byte_class[b] = static_cast<uint8_t>(cls);
  }
  t.num_classes = cls + 1;  // at most 256: a class starts at a byte
  t.next.assign(rules_[rule].size() * t.num_classes, -1);
  t.plain.assign(rules_[rule].size(), 0);
  for (size_t s = 0; s < rules_[rule].size(); ++s) {
    t.plain[s] = rules_[rule][s].calls.empty() && !rules_[rule][s].accepting;
    for (const ByteEdge& e : rules_[rule][s].bytes) {
      for (int32_t c = t.byte_class[e.lo]; c <= t.byte_class[e.hi]; ++c) {
        t.next[s * t.num_classes + c] = e.next;
      }
    }
  }
}

absl::StatusOr<CompiledGrammar> CompiledGrammar::Compile(const Grammar& grammar,
                                                         const CompileLimits& limits) {
  const int32_t n = grammar.num_rules();
  if (n == 0 || grammar.root() < 0 || grammar.root() >= n) {
    return absl::InvalidArgumentError("the grammar has no root rule");
  }
  CompiledGrammar g;
  g.root_ = grammar.root();
  g.rules_.resize(n);
  int64_t nfa_budget = 0;
  int64_t dfa_budget = 0;
  int64_t work = 0;
  for (int32_t r = 0; r < n; ++r) {
    g.names_.push_back(grammar.name(r));
    if (!grammar.defined(r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar's rule '", grammar.name(r), "' is referenced but not defined"));
    }
    NfaBuilder nfa(&nfa_budget, limits.max_nfa_states);
    absl::StatusOr<int32_t> start = nfa.New();
    absl::StatusOr<int32_t> final = nfa.New();
    if (!start.ok()) return start.status();
    if (!final.ok()) return final.status();
    if (absl::Status s = nfa.Build(grammar.body(r), *start, *final, 0); !s.ok()) return s;
    for (const NfaState& st : nfa.states()) {
      for (const auto& [rule, next] : st.calls) {
        if (rule < 0 || rule >= n) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the grammar's rule '", grammar.name(r), "' calls an unknown rule ", rule));
        }
      }
    }
    if (absl::Status s = Determinize(nfa.states(), &dfa_budget, limits.max_dfa_states, &work,
                                     limits.max_work, &g.rules_[r]);
        !s.ok()) {
      return s;
    }
  }
  g.total_states_ = dfa_budget;
  g.tables_.resize(n);
  for (int32_t r = 0; r < n; ++r) g.BuildTable(r);

  // Nullable rules (fixed point), then the calls each rule makes before consuming a byte.
  std::vector<char> nullable(n, 0);
  auto reach_without_bytes = [&](int32_t r, std::vector<int32_t>* calls_out) {
    std::vector<char> seen(g.rules_[r].size(), 0);
    std::vector<int32_t> stack = {0};
    seen[0] = 1;
    bool accepts = false;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      const State& st = g.rules_[r][s];
      accepts = accepts || st.accepting;
      for (const CallEdge& c : st.calls) {
        if (calls_out != nullptr) calls_out->push_back(c.rule);
        if (nullable[c.rule] && !seen[c.next]) {
          seen[c.next] = 1;
          stack.push_back(c.next);
        }
      }
    }
    return accepts;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (!nullable[r] && reach_without_bytes(r, nullptr)) {
        nullable[r] = 1;
        changed = true;
      }
    }
  }
  g.nullable_ = nullable;
  std::vector<std::vector<int32_t>> left_calls(n);
  for (int32_t r = 0; r < n; ++r) reach_without_bytes(r, &left_calls[r]);
  // Iterative DFS for a cycle among left calls (0 new, 1 on the path, 2 done).
  std::vector<char> color(n, 0);
  for (int32_t root = 0; root < n; ++root) {
    if (color[root] != 0) continue;
    std::vector<std::pair<int32_t, size_t>> path = {{root, 0}};
    color[root] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i < left_calls[r].size()) {
        const int32_t q = left_calls[r][i++];
        if (color[q] == 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("the grammar's rule '", grammar.name(q),
                           "' is left-recursive (it can call itself before reading a byte)"));
        }
        if (color[q] == 0) {
          color[q] = 1;
          path.push_back({q, 0});
        }
      } else {
        color[r] = 2;
        path.pop_back();
      }
    }
  }
  return g;
}

}  // namespace banyan::text::grammar
