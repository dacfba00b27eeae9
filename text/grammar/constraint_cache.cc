#include "text/grammar/constraint_cache.h"

namespace banyan::text::grammar {

ConstraintCache::ConstraintCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity,
                                 CompileLimits limits)
    : vocab_(std::move(vocab)), capacity_(capacity < 1 ? 1 : capacity), limits_(limits) {}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::GetOrCompile(
    const std::string& key, const std::function<absl::StatusOr<Grammar>()>& build) {
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  absl::StatusOr<Grammar> grammar = build();
  if (!grammar.ok()) return grammar.status();
  absl::StatusOr<CompiledGrammar> compiled = CompiledGrammar::Compile(*grammar, limits_);
  if (!compiled.ok()) return compiled.status();
  auto made = std::make_shared<TokenConstraint>();
  made->grammar = std::make_shared<const CompiledGrammar>(*std::move(compiled));
  made->masker = std::make_shared<TokenMasker>(made->grammar, vocab_);
  // Every sample's first mask is the start's: classified here, on the compiling thread, so the
  // engine thread's first step of the request finds it cached.
  made->masker->PrepareStart();

  absl::MutexLock lock(&mu_);
  ++compiles_;
  auto it = index_.find(key);
  if (it != index_.end()) {  // another thread stored it meanwhile
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(key, made);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return std::shared_ptr<const TokenConstraint>(made);
}

size_t ConstraintCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

int64_t ConstraintCache::compiles() const {
  absl::MutexLock lock(&mu_);
  return compiles_;
}

}  // namespace banyan::text::grammar
