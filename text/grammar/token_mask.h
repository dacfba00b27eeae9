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
//   - Positions that behave alike over the next Vocabulary::short_bytes() bytes (16 by
//     default; 99 % of a 128K vocabulary's tokens are no longer) share the classification of
//     those short tokens: a string of maxLength 400 is a few thousand automaton states, a
//     counter each, but only the last 16 characters' states differ for a short token. So a
//     position costs one walk over the short tokens per class of positions (bounded-depth
//     equivalence, computed when the masker is made) plus its own walk over the ~1 % long
//     tokens, about a hundredth of the work, and its cache entry is a few hundred bytes.
// The special and control tokens (empty bytes) are never allowed by a grammar; end of sequence
// is the caller's business (Matcher::CanEnd).
//
// TokenMasker is thread-safe: its cache is shared by every request with the same grammar and
// vocabulary, and filled by whoever asks first. A classification walks the vocabulary
// (milliseconds on a 128K vocabulary for a new class), so the engine thread never runs one: the
// start is classified when the constraint is compiled (PrepareStart, on the front end's
// thread), and a position met later is classified by a worker (Prepare) while the sample sits
// out a step (scheduler/mask_workers.h); Ready says whether FillMask would walk.
#ifndef BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_
#define BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"

namespace banyan::text::grammar {

// A bit per token id: bit i of word i / 64 is token i.
using TokenBits = std::vector<uint64_t>;
// The 64-bit words of a mask over `vocab` token ids (bit id % 64 of word id / 64).
inline size_t MaskWords(int64_t vocab) { return static_cast<size_t>(vocab + 63) / 64; }
inline bool TestBit(const TokenBits& bits, int32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; }
inline void SetBit(TokenBits* bits, int32_t id) { (*bits)[id >> 6] |= uint64_t{1} << (id & 63); }
inline bool TestBit(std::span<const uint64_t> bits, int32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; }
inline void SetBit(std::span<uint64_t> bits, int32_t id) { bits[id >> 6] |= uint64_t{1} << (id & 63); }

class Vocabulary {
 public:
  static constexpr int32_t kShortBytes = 16;
  // token_bytes[id]: the bytes the token stands for; empty for special and control tokens.
  // Tokens of at most `short_bytes` bytes are short (see the top).
  explicit Vocabulary(std::vector<std::string> token_bytes, int32_t short_bytes = kShortBytes);

  // Non-empty tokens in byte order, each with the prefix it shares with the one before, their
  // bytes from one buffer laid out in that order (the walk reads it front to back).
  struct Sorted {
    std::vector<int32_t> ids;
    std::vector<int32_t> lcp;
    std::string text;
    std::vector<size_t> offsets;  // ids.size() + 1 entries
    int32_t max_len = 0;
    std::string_view bytes(size_t k) const {
      return std::string_view(text).substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
  };

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  int32_t short_bytes() const { return short_bytes_; }
  const Sorted& short_tokens() const { return short_; }
  const Sorted& long_tokens() const { return long_; }

 private:
  std::vector<std::string> bytes_;
  int32_t short_bytes_;
  Sorted short_;
  Sorted long_;
};

class TokenMasker {
 public:
  // Each classified class keeps a bit per token (16 KB at 128K tokens), and a grammar may have
  // up to CompileLimits::max_dfa_states positions: the cache holds at most `max_cached_bytes`
  // of short masks, and `max_long_cached` long masks (a few hundred bytes each; 0: 16 times as
  // many as short ones), evicting the
  // oldest first (never the start's, classified at compile). An evicted entry is classified
  // again when met again. Without the bound a junk model's random walks through one large
  // schema could hold gigabytes. Making the masker computes the classes (bounded-depth
  // equivalence over the automaton: milliseconds for tens of thousands of states).
  static constexpr size_t kDefaultMaxCachedBytes = size_t{64} << 20;
  TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
              std::shared_ptr<const Vocabulary> vocab,
              size_t max_cached_bytes = kDefaultMaxCachedBytes, size_t max_long_cached = 0);

  // The tokens `matcher` allows next, as vocab->size() bits. Classifies the positions of
  // matcher.tops() that are not yet (see Ready).
  void FillMask(const Matcher& matcher, TokenBits* mask);
  // The same into `mask`, at least MaskWords(vocab->size()) words; words past those are zeroed
  // (a padded LM head's ids stay disallowed).
  void FillMask(const Matcher& matcher, std::span<uint64_t> mask);
  // Whether every position of matcher.tops() is classified: FillMask then costs a copy of the
  // cached bits and the per-step checks of the tokens that need the callers, no vocabulary walk.
  bool Ready(const Matcher& matcher) const;
  // Classifies (rule, state) unless it is already (a walk over the short tokens unless its class
  // is classified, and one over the long tokens). Returns whether it walked.
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
  // Short masks cached now (one per class of positions met), and the most the cache holds;
  // long masks cached now (one per position met).
  size_t classified() const;
  size_t max_cached() const { return max_cached_; }
  size_t long_classified() const;
  size_t max_long_cached() const { return max_long_cached_; }
  int64_t evictions() const;
  // What to classify ahead of need, at most `limit` positions: the nearest position of each
  // class first (its short walk serves the whole class), then the other positions (a long walk
  // each), all nearest the start first (PositionsNearestFirst).
  std::vector<std::pair<int32_t, int32_t>> PrefetchOrder(size_t limit) const;
  // Classes of positions (all rules), and the class of (rule, state).
  size_t num_classes() const { return num_classes_; }
  int32_t class_of(int32_t rule, int32_t state) const { return class_of_[rule][state]; }
  // Walks over the short tokens run so far (the costly part), by any thread (a class is walked
  // by one thread at a time: more than classified() only after an eviction); and
  // walks over the long tokens (one per position met).
  int64_t walks() const { return walks_.load(std::memory_order_relaxed); }
  int64_t long_walks() const { return long_walks_.load(std::memory_order_relaxed); }

 private:
  struct ShortMask {                 // per (rule, class of positions): the short tokens
    TokenBits accepted;              // accepted without returning from the rule, by id
    std::vector<int32_t> dependent;  // need the callers to decide
  };
  struct LongMask {                  // per (rule, state): the long tokens
    std::vector<uint64_t> accepted;  // a bit per index of Vocabulary::long_tokens()
    std::vector<int32_t> dependent;  // ids
  };
  struct Classified {
    std::shared_ptr<const ShortMask> short_mask;
    std::shared_ptr<const LongMask> long_mask;
  };
  // `pin`: never evicted (the start's positions). *walked: a short or long walk ran here.
  Classified Classify(int32_t rule, int32_t state, bool* walked = nullptr, bool pin = false);
  // One trie walk of `tokens` from (rule, state): on_accepted(k) / on_dependent(k) with k the
  // index into tokens.ids.
  template <typename OnAccepted, typename OnDependent>
  void Walk(const Vocabulary::Sorted& tokens, int32_t rule, int32_t state, OnAccepted on_accepted,
            OnDependent on_dependent) const;
  int64_t ShortKey(int32_t rule, int32_t state) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  // class_of_[rule][state]: positions with equal classes accept the same short tokens.
  std::vector<std::vector<int32_t>> class_of_;
  size_t num_classes_ = 0;
  const size_t max_cached_;       // short masks, at least the start's plus a few
  const size_t max_long_cached_;  // long masks
  std::atomic<int64_t> walks_{0};
  std::atomic<int64_t> long_walks_{0};
  std::atomic<int64_t> uses_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<const ShortMask>> short_cache_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::shared_ptr<const LongMask>> long_cache_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> short_walking_ ABSL_GUARDED_BY(mu_);  // classes being walked
  absl::CondVar walked_cv_;                                           // one of them finished
  std::deque<int64_t> short_order_ ABSL_GUARDED_BY(mu_);  // evictable entries, oldest first
  std::deque<int64_t> long_order_ ABSL_GUARDED_BY(mu_);
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

// Classes of the automaton's positions by their behaviour over the next `depth` bytes (Moore's
// refinement, stopped after `depth` rounds or once stable): positions of one rule in one class
// accept, reject and hand to the callers the same byte strings of up to `depth` bytes. A call
// edge counts with its exact return state. Returns [rule][state] -> class, classes numbered
// from 0 within each rule; *count: their number over all rules. The work is bounded: a rule
// beyond the budget (over a hundred thousand states with many byte classes) keeps a class per
// state. The default takes a tool schema of 44,583 states (search_flights.json with its keys
// sorted) in about 0.2 s; 2^25 did not, and every position of it then cost a vocabulary walk.
constexpr int64_t kBoundedClassesBudget = int64_t{1} << 27;  // ints read by the refinement
std::vector<std::vector<int32_t>> BoundedClasses(const CompiledGrammar& g, int32_t depth,
                                                 size_t* count,
                                                 int64_t budget = kBoundedClassesBudget);

// The positions (rule, state) a matcher's top can stand on -- every state reachable from the
// start, since a top is where a byte left it, before calls and pops -- in the order a breadth-first search from the root rule's start meets them (through byte edges, calls
// and the states calls return to), at most `limit`: what to classify ahead of need, nearest
// the start first.
std::vector<std::pair<int32_t, int32_t>> PositionsNearestFirst(const CompiledGrammar& g,
                                                               size_t limit);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_TOKEN_MASK_H_
