// N-gram prompt lookup: drafts for a sample taken from its own context. Where the last few tokens
// of the context (the prompt, then the tokens generated so far) occurred before, the tokens that
// followed them there are proposed next: text that quotes its prompt (summaries, code edits,
// answers about a document, extraction into JSON) repeats long runs of it. The drafts are fixed
// given the context, so speculative sampling stays exact with them (scheduler/loop/speculation.cc).
//
// The search is a scan of the context from its end, linear in its length and with no state
// between calls (the last token compared 16 positions at a time). An index (a hash of every
// n-gram to its last position) would make each call constant time but cost memory per sample at
// every load, drafting or not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace banyan::scheduler {

// Which earlier occurrence drafts, and how many tokens.
struct NgramLookup {
  int min_n = 2;  // the shortest suffix that counts as a match (>= 1)
  // The longest suffix compared; 0: n-gram lookup is off, the default until it is measured not
  // to cost (docs/hydra.md: on the CPU at 8 clients its plain steps ran slower, not understood).
  int max_n = 0;
  bool enabled() const { return max_n > 0; }
};

// The context of a sample: `head` then `tail` (its prompt and its generated tokens), without
// copying either.
struct TokenContext {
  std::span<const int32_t> head;
  std::span<const int32_t> tail;
  size_t size() const { return head.size() + tail.size(); }
  int32_t operator[](size_t i) const {
    return i < head.size() ? head[i] : tail[i - head.size()];
  }
};

// Where the context's longest suffix of n tokens (lookup.min_n <= n <= lookup.max_n) occurred
// before, the latest such occurrence; ties in n go to the latest. `end` is the position after
// the occurrence: the first token to propose. n == 0 when none did.
struct NgramMatch {
  size_t end = 0;
  int n = 0;
};
NgramMatch FindNgram(const TokenContext& context, const NgramLookup& lookup);

// `budget` tokens that followed the match, continued periodically past the context's end (the
// match's end is p tokens before it: token i of the drafts is draft i - p there); empty without
// a match, with the lookup off or a budget of 0.
std::vector<int32_t> NgramDrafts(const TokenContext& context, const NgramLookup& lookup,
                                 int budget);

}  // namespace banyan::scheduler
