#include "text/grammar/token_mask.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace banyan::text::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (int32_t id = 0; id < size(); ++id) {
    if (!bytes_[id].empty()) sorted_.push_back(id);
    max_len_ = std::max<int32_t>(max_len_, static_cast<int32_t>(bytes_[id].size()));
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  sorted_offsets_.reserve(sorted_.size() + 1);
  for (int32_t id : sorted_) {
    sorted_offsets_.push_back(sorted_text_.size());
    sorted_text_ += bytes_[id];
  }
  sorted_offsets_.push_back(sorted_text_.size());
  lcp_.resize(sorted_.size(), 0);
  for (size_t k = 1; k < sorted_.size(); ++k) {
    const std::string& a = bytes_[sorted_[k - 1]];
    const std::string& b = bytes_[sorted_[k]];
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    lcp_[k] = static_cast<int32_t>(i);
  }
}

TokenMasker::TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
                         std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

size_t TokenMasker::classified() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

namespace {

int64_t PositionKey(int32_t rule, int32_t state) {
  return (static_cast<int64_t>(rule) << 32) | static_cast<uint32_t>(state);
}

}  // namespace

bool TokenMasker::Ready(const Matcher& matcher) const {
  absl::MutexLock lock(&mu_);
  for (const Top& top : matcher.tops()) {
    if (!cache_.contains(PositionKey(top.rule, top.state))) return false;
  }
  return true;
}

void TokenMasker::Prepare(int32_t rule, int32_t state) { Classify(rule, state); }

void TokenMasker::PrepareStart() {
  const Matcher start(grammar_);
  for (const Top& top : start.tops()) Classify(top.rule, top.state);
}

std::shared_ptr<const TokenMasker::Classified> TokenMasker::Classify(int32_t rule, int32_t state) {
  const int64_t key = PositionKey(rule, state);
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  // The trie walk: levels[d] is the stack set after the first d bytes of the current token;
  // levels[0..valid] are those of the current token's prefix. touched[d]: some byte before d
  // needed the unknown caller.
  walks_.fetch_add(1, std::memory_order_relaxed);
  auto out = std::make_shared<Classified>();
  out->accepted.assign((vocab_->size() + 63) / 64, 0);
  FramePool pool;
  const int32_t max_len = vocab_->max_len();
  std::vector<TopSet> levels(max_len + 1);
  std::vector<char> touched(max_len + 1, 0);
  levels[0] = {Top{rule, state, FramePool::kContext}};
  int32_t valid = 0;
  const std::vector<int32_t>& sorted = vocab_->sorted();
  const std::vector<int32_t>& lcp = vocab_->shared_prefix();
  for (size_t k = 0; k < sorted.size(); ++k) {
    const int32_t id = sorted[k];
    const std::string_view bytes = vocab_->sorted_bytes(k);
    const int32_t len = static_cast<int32_t>(bytes.size());
    valid = std::min(valid, lcp[k]);
    while (valid < len && !levels[valid].empty()) {
      bool t = false;
      StepByte(*grammar_, &pool, levels[valid], static_cast<uint8_t>(bytes[valid]),
               &levels[valid + 1], &t);
      touched[valid + 1] = touched[valid] || t;
      ++valid;
    }
    if (valid == len && !levels[len].empty()) {
      SetBit(&out->accepted, id);
    } else if (touched[valid]) {
      out->dependent.push_back(id);
    }
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = cache_.try_emplace(key, std::move(out));
  return it->second;
}

void TokenMasker::FillMask(const Matcher& matcher, TokenBits* mask) {
  mask->assign((vocab_->size() + 63) / 64, 0);
  for (const Top& top : matcher.tops()) {
    const std::shared_ptr<const Classified> c = Classify(top.rule, top.state);
    for (size_t w = 0; w < mask->size(); ++w) (*mask)[w] |= c->accepted[w];
    // A pop below the root frame ends the input, so no byte can follow it: on the root frame
    // every context-dependent token is rejected without a look.
    if (top.parent == FramePool::kContext || top.parent == FramePool::kBottom) continue;
    for (int32_t id : c->dependent) {
      if (!TestBit(*mask, id) && matcher.AcceptsFrom(top, vocab_->bytes(id))) SetBit(mask, id);
    }
  }
}

void TokenMasker::FillMaskSlow(const Matcher& matcher, TokenBits* mask) const {
  mask->assign((vocab_->size() + 63) / 64, 0);
  for (int32_t id = 0; id < vocab_->size(); ++id) {
    const std::string_view bytes = vocab_->bytes(id);
    if (bytes.empty()) continue;
    for (const Top& top : matcher.tops()) {
      if (matcher.AcceptsFrom(top, bytes)) {
        SetBit(mask, id);
        break;
      }
    }
  }
}

}  // namespace banyan::text::grammar
