// Running a compiled grammar over bytes: the stacks of the pushdown automaton.
//
// A stack is a top (rule, state) plus a parent: the frame to continue in once the top's rule
// accepts and pops. Parents are hash-consed in a FramePool, so two stacks are equal exactly when
// their tops are equal; a set of stacks (TopSet) is a sorted vector of tops. Several stacks are
// alive at once when the grammar is ambiguous so far (a byte could end a rule or continue it).
//
// Expanding a set closes it under calls (push the callee's start) and pops (an accepting top
// continues in its parent); stepping a byte expands, then moves every top that has an edge for
// the byte. Tops are values, and only a call allocates (a parent frame), so a step through a
// rule that calls nothing is a few DFA lookups.
//
// Matcher keeps one request's stacks with a history for rollback. Not thread-safe; one matcher
// per sample, used by one thread at a time.
#ifndef BANYAN_TEXT_GRAMMAR_MATCHER_H_
#define BANYAN_TEXT_GRAMMAR_MATCHER_H_

#include <compare>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "text/grammar/automaton.h"

namespace banyan::text::grammar {

class FramePool {
 public:
  static constexpr int32_t kBottom = -1;   // below the root rule's frame: the end of input
  static constexpr int32_t kContext = -2;  // an unknown caller (context-free token masks)

  struct Frame {
    int32_t rule;
    int32_t state;   // where the rule continues
    int32_t parent;  // a frame id, kBottom or kContext
  };

  int32_t Intern(int32_t rule, int32_t state, int32_t parent);
  const Frame& Get(int32_t id) const { return frames_[id]; }
  size_t size() const { return frames_.size(); }

 private:
  struct Key {
    int32_t rule, state, parent;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.rule, k.state, k.parent);
    }
  };
  std::vector<Frame> frames_;
  absl::flat_hash_map<Key, int32_t> ids_;
};

struct Top {
  int32_t rule;
  int32_t state;
  int32_t parent;
  auto operator<=>(const Top&) const = default;
};
using TopSet = std::vector<Top>;  // sorted, unique

// The set after `byte`; `*touched_context` becomes true when consuming the byte needed a pop
// into FramePool::kContext (so the result depends on the unknown caller).
void StepByte(const CompiledGrammar& g, FramePool* pool, const TopSet& in, uint8_t byte,
              TopSet* out, bool* touched_context);
// Whether the input may end here: some stack pops down to kBottom without reading a byte.
bool CanEnd(const CompiledGrammar& g, const FramePool& pool, const TopSet& in);

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Consumes `bytes` if the grammar allows all of them, as one step of the history; returns
  // false and changes nothing otherwise.
  bool Accept(std::string_view bytes);
  // Undoes the last `steps` Accept calls (speculation's rejected drafts).
  void Rollback(int steps);
  bool CanEnd() const;
  // Whether `bytes` would be accepted from the stack `top` (used for masks that depend on the
  // callers below a top).
  bool AcceptsFrom(const Top& top, std::string_view bytes) const;

  const TopSet& tops() const { return history_.back(); }
  const CompiledGrammar& grammar() const { return *grammar_; }
  int steps() const { return static_cast<int>(history_.size()) - 1; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  mutable FramePool pool_;  // grows with calls only; equal stacks share frames
  std::vector<TopSet> history_;  // [0]: the start; back(): now
};

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_MATCHER_H_
