// What a constrained request carries, and the cache that compiles each schema once.
//
// A TokenConstraint is a compiled grammar with the TokenMasker for one model's vocabulary. It is
// immutable but for the masker's own cache (thread-safe), so every request with the same schema
// shares one: the masks classified for one request serve the next.
//
// ConstraintCache compiles on the caller's thread (a front end's request handling, never the
// engine thread), classifying the token masks of the grammar's start there too, and keeps the last `capacity` constraints by key, least recently used evicted.
// The key is the caller's: it must name everything the grammar depends on (the kind of
// constraint, the schema text, the options). Thread-safe; a compile runs outside the lock, so two
// threads asking for one new key at once may both compile it (the first stored wins).
#ifndef BANYAN_TEXT_GRAMMAR_CONSTRAINT_CACHE_H_
#define BANYAN_TEXT_GRAMMAR_CONSTRAINT_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "text/grammar/automaton.h"
#include "text/grammar/grammar.h"
#include "text/grammar/token_mask.h"

namespace banyan::text::grammar {

struct TokenConstraint {
  std::shared_ptr<const CompiledGrammar> grammar;
  std::shared_ptr<TokenMasker> masker;  // over the model's Vocabulary
  // Empty: the grammar holds from the first generated token. Otherwise the output is free until
  // its text (the masker's vocabulary bytes) contains one of `triggers` (the one that begins
  // first); the grammar then holds from the byte after it (the rest of the token that completed
  // it is its first input), or with `grammar_reads_trigger` from the trigger's first byte, and
  // once the grammar may end the output is free again, watching for the next trigger.
  // tool_choice "auto": a call's marker, then the call (text/tool_calls/tool_syntax.h,
  // AutoCallTrigger). A structural tag (response_format "structural_tag"): its triggers, each a
  // prefix of some structure's begin, with a grammar that reads the trigger (the alternation of
  // the structures, so the trigger fed first selects those that begin with it).
  std::vector<std::string> triggers;
  bool grammar_reads_trigger = false;
  // With triggers: true holds the grammar from the first trigger to the end of the output, as
  // an untriggered grammar holds from the first token (where it may end, the end of sequence is
  // allowed; once it must end, nothing else is): no second trigger is watched for.
  // tool_choice "auto" with parallel_tool_calls false (at most one call, then the end); a
  // reasoning model's response_format (free thinking, "</think>", then only the JSON:
  // AfterThinking in server/common/structured_outputs.h).
  bool trigger_once = false;
  // A scheduler that cannot apply the constraint (no token masks, min_tokens) drops it and the
  // output is free, instead of refusing the request: tool_choice "auto", whose output was free
  // before such grammars. Anything a client asked for explicitly is refused instead.
  bool best_effort = false;
};

class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity,
                  CompileLimits limits = {});

  // The constraint stored under `key`, or `build()` compiled and stored. A build or compile
  // error is returned as is (and not cached: a refused schema costs its sender each time).
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> GetOrCompile(
      const std::string& key, const std::function<absl::StatusOr<Grammar>()>& build);

  const Vocabulary& vocab() const { return *vocab_; }
  size_t size() const;
  int64_t compiles() const;  // grammars compiled so far (misses)

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const TokenConstraint>>;
  std::shared_ptr<const Vocabulary> vocab_;
  const size_t capacity_;
  const CompileLimits limits_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t compiles_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_CONSTRAINT_CACHE_H_
