#include "text/grammar/token_mask.h"

#include <algorithm>
#include <deque>
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
                         std::shared_ptr<const Vocabulary> vocab, size_t max_cached_bytes)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      max_cached_(std::max<size_t>(
          16, max_cached_bytes / (((static_cast<size_t>(vocab_->size()) + 63) / 64) * 8))) {}

int64_t TokenMasker::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

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

bool TokenMasker::Prepare(int32_t rule, int32_t state) {
  bool walked = false;
  Classify(rule, state, &walked);
  return walked;
}

void TokenMasker::PrepareStart() {
  const Matcher start(grammar_);
  for (const Top& top : start.tops()) Classify(top.rule, top.state, nullptr, /*pin=*/true);
}

std::shared_ptr<const TokenMasker::Classified> TokenMasker::Classify(int32_t rule, int32_t state,
                                                                     bool* walked, bool pin) {
  const int64_t key = PositionKey(rule, state);
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  // The trie walk: level d is the stack set after the first d bytes of the current token;
  // levels 0..valid are those of the current token's prefix. touched[d]: some byte before d
  // needed the unknown caller. Almost every step is one top in a plain state (no call, no pop:
  // CompiledGrammar::plain), which a level keeps as `single[d]` and steps with one table
  // lookup; any other set is a TopSet in `sets[d]`, stepped by StepByte.
  walks_.fetch_add(1, std::memory_order_relaxed);
  if (walked != nullptr) *walked = true;
  auto out = std::make_shared<Classified>();
  out->accepted.assign((vocab_->size() + 63) / 64, 0);
  FramePool pool;
  const int32_t max_len = vocab_->max_len();
  std::vector<TopSet> sets(max_len + 1);
  std::vector<Top> single(max_len + 1);
  std::vector<char> is_single(max_len + 1, 0);
  std::vector<char> touched(max_len + 1, 0);
  std::vector<CompiledGrammar::RuleView> views(grammar_->num_rules());
  for (int32_t r = 0; r < grammar_->num_rules(); ++r) views[r] = grammar_->view(r);
  // Stores `set` as level d: as a single plain top when it is one.
  auto set_level = [&](int32_t d) {
    is_single[d] = sets[d].size() == 1 && views[sets[d][0].rule].plain[sets[d][0].state];
    if (is_single[d]) single[d] = sets[d][0];
  };
  auto live = [&](int32_t d) { return is_single[d] || !sets[d].empty(); };
  sets[0] = {Top{rule, state, FramePool::kContext}};
  set_level(0);
  int32_t valid = 0;
  const std::vector<int32_t>& sorted = vocab_->sorted();
  const std::vector<int32_t>& lcp = vocab_->shared_prefix();
  for (size_t k = 0; k < sorted.size(); ++k) {
    const int32_t id = sorted[k];
    const std::string_view bytes = vocab_->sorted_bytes(k);
    const int32_t len = static_cast<int32_t>(bytes.size());
    valid = std::min(valid, lcp[k]);
    while (valid < len && live(valid)) {
      const uint8_t byte = static_cast<uint8_t>(bytes[valid]);
      touched[valid + 1] = touched[valid];
      if (is_single[valid]) {
        const Top& t = single[valid];
        const CompiledGrammar::RuleView& v = views[t.rule];
        const int32_t next = v.next[static_cast<size_t>(t.state) * v.num_classes +
                                    v.byte_class[byte]];
        if (next >= 0 && v.plain[next]) {
          is_single[valid + 1] = 1;
          single[valid + 1] = Top{t.rule, next, t.parent};
        } else {
          is_single[valid + 1] = 0;
          sets[valid + 1].clear();
          if (next >= 0) sets[valid + 1].push_back(Top{t.rule, next, t.parent});
        }
      } else {
        bool t = false;
        StepByte(*grammar_, &pool, sets[valid], byte, &sets[valid + 1], &t);
        if (t) touched[valid + 1] = 1;
        set_level(valid + 1);
      }
      ++valid;
    }
    if (valid == len && live(len)) {
      SetBit(&out->accepted, id);
    } else if (touched[valid]) {
      out->dependent.push_back(id);
    }
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = cache_.try_emplace(key, std::move(out));
  std::shared_ptr<const Classified> result = it->second;
  if (inserted && !pin) {
    order_.push_back(key);
    // Oldest first; the entry just made (last in order_) stays.
    while (cache_.size() > max_cached_ && order_.size() > 1) {
      cache_.erase(order_.front());
      order_.pop_front();
      ++evictions_;
    }
  }
  return result;
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

std::vector<std::pair<int32_t, int32_t>> PositionsNearestFirst(const CompiledGrammar& g,
                                                               size_t limit) {
  std::vector<std::pair<int32_t, int32_t>> out;
  std::vector<std::vector<char>> seen(g.num_rules());
  for (int32_t r = 0; r < g.num_rules(); ++r) seen[r].assign(g.num_states(r), 0);
  std::deque<std::pair<int32_t, int32_t>> queue;
  auto visit = [&](int32_t rule, int32_t s) {
    if (seen[rule][s]) return;
    seen[rule][s] = 1;
    queue.emplace_back(rule, s);
  };
  visit(g.root(), 0);
  while (!queue.empty() && out.size() < limit) {
    const auto [rule, s] = queue.front();
    queue.pop_front();
    const CompiledGrammar::State& st = g.state(rule, s);
    out.emplace_back(rule, s);
    for (const CompiledGrammar::ByteEdge& e : st.bytes) visit(rule, e.next);
    for (const CompiledGrammar::CallEdge& c : st.calls) {
      visit(c.rule, 0);
      visit(rule, c.next);
    }
  }
  return out;
}

}  // namespace banyan::text::grammar
