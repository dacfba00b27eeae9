#include "text/grammar/matcher.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace banyan::text::grammar {

int32_t FramePool::Intern(int32_t rule, int32_t state, int32_t parent) {
  auto [it, inserted] = ids_.try_emplace(Key{rule, state, parent}, 0);
  if (inserted) {
    it->second = static_cast<int32_t>(frames_.size());
    frames_.push_back(Frame{rule, state, parent});
  }
  return it->second;
}

namespace {

// Closes `in` under calls and pops into `out` (the tops that have byte edges, plus, with
// `ends`, whether some accepting top sits on kBottom). `pool` is null for a read-only closure,
// which steps over calls to nullable rules instead of pushing them (enough for CanEnd).
template <typename OnTop>
void Expand(const CompiledGrammar& g, FramePool* pool, const FramePool& read, const TopSet& in,
            bool* touched_context, bool* ends, OnTop on_top) {
  // Fast path: a top with no calls that cannot pop is its own closure. The scratch vectors
  // keep their capacity across calls (mask computation steps millions of bytes).
  thread_local std::vector<Top> work;
  thread_local std::vector<Top> seen;
  work.clear();
  seen.clear();
  for (const Top& t : in) {
    const CompiledGrammar::State& st = g.state(t.rule, t.state);
    if (st.calls.empty() && !st.accepting) {
      on_top(t);
    } else {
      work.push_back(t);
    }
  }
  while (!work.empty()) {
    const Top t = work.back();
    work.pop_back();
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    const CompiledGrammar::State& st = g.state(t.rule, t.state);
    if (!st.bytes.empty()) on_top(t);
    if (pool != nullptr) {
      for (const CompiledGrammar::CallEdge& c : st.calls) {
        const int32_t parent = pool->Intern(t.rule, c.next, t.parent);
        work.push_back(Top{c.rule, 0, parent});
      }
    } else {
      for (const CompiledGrammar::CallEdge& c : st.calls) {
        // Read-only (CanEnd): only a callee that matches the empty string can lead to the end
        // without a byte, and then the caller simply continues after the call.
        if (g.nullable(c.rule)) work.push_back(Top{t.rule, c.next, t.parent});
      }
    }
    if (st.accepting) {
      if (t.parent == FramePool::kBottom) {
        if (ends != nullptr) *ends = true;
      } else if (t.parent == FramePool::kContext) {
        if (touched_context != nullptr) *touched_context = true;
      } else {
        const FramePool::Frame& f = read.Get(t.parent);
        work.push_back(Top{f.rule, f.state, f.parent});
      }
    }
  }
}

}  // namespace

void StepByte(const CompiledGrammar& g, FramePool* pool, const TopSet& in, uint8_t byte,
              TopSet* out, bool* touched_context) {
  out->clear();
  // Fast path, the common case inside an inlined rule: one top that neither calls nor pops.
  if (in.size() == 1) {
    const Top& t = in[0];
    const CompiledGrammar::State& st = g.state(t.rule, t.state);
    if (st.calls.empty() && !st.accepting) {
      const int32_t next = g.NextByte(t.rule, t.state, byte);
      if (next >= 0) out->push_back(Top{t.rule, next, t.parent});
      return;
    }
  }
  bool touched = false;
  Expand(g, pool, *pool, in, &touched, nullptr, [&](const Top& t) {
    const int32_t next = g.NextByte(t.rule, t.state, byte);
    if (next >= 0) out->push_back(Top{t.rule, next, t.parent});
  });
  // A pop into the unknown caller matters only if the caller might have read this byte: we
  // cannot tell, so any such pop marks the byte as context-dependent.
  if (touched && touched_context != nullptr) *touched_context = true;
  if (out->size() > 1) {
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
  }
}

bool CanEnd(const CompiledGrammar& g, const FramePool& pool, const TopSet& in) {
  bool ends = false;
  Expand(g, nullptr, pool, in, nullptr, &ends, [](const Top&) {});
  return ends;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  history_.push_back(TopSet{Top{grammar_->root(), 0, FramePool::kBottom}});
}

bool Matcher::Accept(std::string_view bytes) {
  TopSet cur = history_.back();
  TopSet next;
  for (char c : bytes) {
    StepByte(*grammar_, &pool_, cur, static_cast<uint8_t>(c), &next, nullptr);
    if (next.empty()) return false;
    cur.swap(next);
  }
  history_.push_back(std::move(cur));
  return true;
}

void Matcher::Rollback(int steps) {
  BANYAN_CHECK(steps >= 0 && steps <= this->steps())
      << "rollback of " << steps << " steps past the start (" << this->steps() << ")";
  history_.resize(history_.size() - steps);
}

bool Matcher::CanEnd() const { return grammar::CanEnd(*grammar_, pool_, history_.back()); }

bool Matcher::AcceptsFrom(const Top& top, std::string_view bytes) const {
  TopSet cur = {top};
  TopSet next;
  for (char c : bytes) {
    StepByte(*grammar_, &pool_, cur, static_cast<uint8_t>(c), &next, nullptr);
    if (next.empty()) return false;
    cur.swap(next);
  }
  return true;
}

}  // namespace banyan::text::grammar
