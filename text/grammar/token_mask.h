// Token masks: which tokens of a model's vocabulary a grammar allows next.
//
// A token is allowed when all of its bytes step the matcher's stacks without emptying them.
// Checking 128K-152K tokens byte by byte at every step would cost milliseconds, so:
//   - Vocabulary sorts the tokens' bytes once, so tokens sharing a prefix are walked once (a
//     trie walk over the sorted list; a prefix that dies rejects every token under it at no
//     further cost);
//   - TokenMasker classifies tokens once per automaton position (rule, state), with the caller
//     unknown: accepted inside the rule (cached bits), rejected before the rule could return
//     (never looked at again), or dependent on the callers (checked per step against the real
//     stack). For JSON Schema grammars, whose rules are inlined, almost every token is decided
//     by the cache; the dependent ones are those that close a nested value.
// The special and control tokens (empty bytes) are never allowed by a grammar; end of sequence
// is the caller's business (Matcher::CanEnd).
//
// TokenMasker is thread-safe: its cache is shared by every request with the same grammar and
// vocabulary, and filled by whoever asks first. A classification walks the whole vocabulary
// (milliseconds on a 128K vocabulary), so the engine thread never runs one: the start is
// classified when the constraint is compiled (PrepareStart, on the front end's thread), and a
// position met later is classified by a worker (Prepare) while the sample sits out a step
// (scheduler/mask_workers.h); Ready says whether FillMask would walk.
#ifndef BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_
#define BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"

namespace banyan::text::grammar {

// A bit per token id: bit i of word i / 64 is token i.
using TokenBits = std::vector<uint64_t>;
inline bool TestBit(const TokenBits& bits, int32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; }
inline void SetBit(TokenBits* bits, int32_t id) { (*bits)[id >> 6] |= uint64_t{1} << (id & 63); }

class Vocabulary {
 public:
  // token_bytes[id]: the bytes the token stands for; empty for special and control tokens.
  explicit Vocabulary(std::vector<std::string> token_bytes);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  // Non-empty tokens in byte order, and the prefix each shares with the one before it.
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<int32_t>& shared_prefix() const { return lcp_; }
  // The bytes of sorted()[k], from one buffer laid out in sorted order (the walk reads it
  // front to back instead of chasing a string per token).
  std::string_view sorted_bytes(size_t k) const {
    return std::string_view(sorted_text_).substr(sorted_offsets_[k],
                                                 sorted_offsets_[k + 1] - sorted_offsets_[k]);
  }
  int32_t max_len() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<int32_t> lcp_;
  std::string sorted_text_;
  std::vector<size_t> sorted_offsets_;  // sorted().size() + 1 entries
  int32_t max_len_ = 0;
};

class TokenMasker {
 public:
  // Each classified position keeps a bit per token (16 KB at 128K tokens), and a grammar may
  // have up to CompileLimits::max_dfa_states positions (a string of maxLength 400 alone is a few
  // thousand): the cache holds at most `max_cached_bytes` of them, evicting the oldest first
  // (never the start's, classified at compile). An evicted position is classified again when
  // met again. Without the bound a junk model's random walks through one large schema could
  // hold gigabytes.
  static constexpr size_t kDefaultMaxCachedBytes = size_t{64} << 20;
  TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
              std::shared_ptr<const Vocabulary> vocab,
              size_t max_cached_bytes = kDefaultMaxCachedBytes);

  // The tokens `matcher` allows next, as vocab->size() bits. Classifies the positions of
  // matcher.tops() that are not yet (see Ready).
  void FillMask(const Matcher& matcher, TokenBits* mask);
  // Whether every position of matcher.tops() is classified: FillMask then costs a copy of the
  // cached bits and the per-step checks of the tokens that need the callers, no vocabulary walk.
  bool Ready(const Matcher& matcher) const;
  // Classifies (rule, state) unless it is already (a walk over the vocabulary). Returns whether
  // it walked.
  bool Prepare(int32_t rule, int32_t state);
  // Classifies the positions of the grammar's start: every sample's first mask.
  void PrepareStart();
  // Every token checked byte by byte against the matcher (no cache): the reference.
  void FillMaskSlow(const Matcher& matcher, TokenBits* mask) const;

  const Vocabulary& vocab() const { return *vocab_; }
  const CompiledGrammar& grammar() const { return *grammar_; }
  // Counts a request that carries this constraint; returns the count so far (the caller's cue
  // to classify positions ahead of need for a schema in steady use).
  int64_t NoteUse() { return uses_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // How many (rule, state) positions are classified now (cache entries), and the most the
  // cache holds.
  size_t classified() const;
  size_t max_cached() const { return max_cached_; }
  int64_t evictions() const;
  // Classifications run so far (vocabulary walks), by any thread: more than classified() only
  // when two threads walked the same position at once.
  int64_t walks() const { return walks_.load(std::memory_order_relaxed); }

 private:
  struct Classified {
    TokenBits accepted;              // accepted without returning from the rule
    std::vector<int32_t> dependent;  // need the callers to decide
  };
  // `pin`: never evicted (the start's positions).
  std::shared_ptr<const Classified> Classify(int32_t rule, int32_t state, bool* walked = nullptr,
                                             bool pin = false);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  const size_t max_cached_;  // positions, at least the start's plus a few
  std::atomic<int64_t> walks_{0};
  std::atomic<int64_t> uses_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<const Classified>> cache_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> order_ ABSL_GUARDED_BY(mu_);  // evictable entries, oldest first
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

// The positions (rule, state) a matcher's top can stand on -- every state reachable from the
// start, since a top is where a byte left it, before calls and pops -- in the order a breadth-first search from the root rule's start meets them (through byte edges, calls
// and the states calls return to), at most `limit`: what to classify ahead of need, nearest
// the start first.
std::vector<std::pair<int32_t, int32_t>> PositionsNearestFirst(const CompiledGrammar& g,
                                                               size_t limit);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_
