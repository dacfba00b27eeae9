#include "text/grammar/token_mask.h"

#include "absl/container/flat_hash_set.h"
#include "common/check.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

namespace banyan::text::grammar {
namespace {

void SortTokens(const std::vector<std::string>& bytes, std::vector<int32_t> ids,
                Vocabulary::Sorted* out) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  out->ids = std::move(ids);
  out->offsets.reserve(out->ids.size() + 1);
  for (int32_t id : out->ids) {
    out->offsets.push_back(out->text.size());
    out->text += bytes[id];
    out->max_len = std::max<int32_t>(out->max_len, static_cast<int32_t>(bytes[id].size()));
  }
  out->offsets.push_back(out->text.size());
  out->lcp.assign(out->ids.size(), 0);
  for (size_t k = 1; k < out->ids.size(); ++k) {
    const std::string& a = bytes[out->ids[k - 1]];
    const std::string& b = bytes[out->ids[k]];
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    out->lcp[k] = static_cast<int32_t>(i);
  }
}

int64_t PositionKey(int32_t rule, int32_t state) {
  return (static_cast<int64_t>(rule) << 32) | static_cast<uint32_t>(state);
}

// Appends v's bytes to a signature.
void Put(std::string* sig, int32_t v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  sig->append(b, sizeof v);
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, int32_t short_bytes)
    : bytes_(std::move(token_bytes)), short_bytes_(std::max<int32_t>(short_bytes, 1)) {
  std::vector<int32_t> short_ids, long_ids;
  for (int32_t id = 0; id < size(); ++id) {
    if (bytes_[id].empty()) continue;
    (static_cast<int32_t>(bytes_[id].size()) <= short_bytes_ ? short_ids : long_ids).push_back(id);
  }
  SortTokens(bytes_, std::move(short_ids), &short_);
  SortTokens(bytes_, std::move(long_ids), &long_);
}

std::vector<std::vector<int32_t>> BoundedClasses(const CompiledGrammar& g, int32_t depth,
                                                 size_t* count, int64_t budget) {
  std::vector<std::vector<int32_t>> out(g.num_rules());
  size_t total = 0;
  absl::flat_hash_map<std::string, int32_t> ids;
  std::string sig;
  // The refinement reads (byte classes + 1) ints per state and round; beyond `budget` over the
  // grammar (the default: a few hundred milliseconds) a rule keeps a class per state: the masks
  // stay exact, only unshared.
  for (int32_t r = 0; r < g.num_rules(); ++r) {
    const int32_t n = g.num_states(r);
    const CompiledGrammar::RuleView v = g.view(r);
    std::vector<int32_t>& cls = out[r];
    const int64_t work = int64_t{n} * (v.num_classes + 1) * std::max(depth, 1);
    if (work > budget) {
      cls.resize(n);
      for (int32_t s = 0; s < n; ++s) cls[s] = s;
      total += n;
      continue;
    }
    budget -= work;
    cls.assign(n, 0);
    // Round 0: what a position does without reading a byte (pop, calls and where they return).
    ids.clear();
    for (int32_t s = 0; s < n; ++s) {
      const CompiledGrammar::State& st = g.state(r, s);
      sig.clear();
      Put(&sig, st.accepting ? 1 : 0);
      for (const CompiledGrammar::CallEdge& c : st.calls) {
        Put(&sig, c.rule);
        Put(&sig, c.next);
      }
      cls[s] = ids.try_emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    }
    size_t classes = ids.size();
    // Round k: the class after k - 1 rounds, and those of the states each byte class leads to.
    std::vector<int32_t> next_cls(n);
    for (int32_t round = 0; round < depth && classes < static_cast<size_t>(n); ++round) {
      ids.clear();
      for (int32_t s = 0; s < n; ++s) {
        sig.clear();
        Put(&sig, cls[s]);
        for (int32_t c = 0; c < v.num_classes; ++c) {
          const int32_t t = v.next[static_cast<size_t>(s) * v.num_classes + c];
          Put(&sig, t < 0 ? -1 : cls[t]);
        }
        next_cls[s] = ids.try_emplace(sig, static_cast<int32_t>(ids.size())).first->second;
      }
      cls.swap(next_cls);
      if (ids.size() == classes) break;  // stable: no further round splits a class
      classes = ids.size();
    }
    total += classes;
  }
  if (count != nullptr) *count = total;
  return out;
}

TokenMasker::TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
                         std::shared_ptr<const Vocabulary> vocab, size_t max_cached_bytes,
                         size_t max_long_cached)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      max_cached_(std::max<size_t>(
          16, max_cached_bytes / (MaskWords(vocab_->size()) * 8))),
      max_long_cached_(max_long_cached > 0 ? max_long_cached : 16 * max_cached_) {
  class_of_ = BoundedClasses(*grammar_, vocab_->short_bytes(), &num_classes_);
}

size_t TokenMasker::classified() const {
  absl::MutexLock lock(&mu_);
  return short_cache_.size();
}

size_t TokenMasker::long_classified() const {
  absl::MutexLock lock(&mu_);
  return long_cache_.size();
}

int64_t TokenMasker::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

int64_t TokenMasker::ShortKey(int32_t rule, int32_t state) const {
  return PositionKey(rule, class_of_[rule][state]);
}

std::vector<std::pair<int32_t, int32_t>> TokenMasker::PrefetchOrder(size_t limit) const {
  const std::vector<std::pair<int32_t, int32_t>> all = PositionsNearestFirst(*grammar_, limit);
  std::vector<std::pair<int32_t, int32_t>> out, rest;
  out.reserve(all.size());
  absl::flat_hash_set<int64_t> seen;
  for (const auto& [rule, state] : all) {
    (seen.insert(ShortKey(rule, state)).second ? out : rest).emplace_back(rule, state);
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

bool TokenMasker::Ready(const Matcher& matcher) const {
  absl::MutexLock lock(&mu_);
  for (const Top& top : matcher.tops()) {
    if (!short_cache_.contains(ShortKey(top.rule, top.state)) ||
        !long_cache_.contains(PositionKey(top.rule, top.state))) {
      return false;
    }
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

template <typename OnAccepted, typename OnDependent>
void TokenMasker::Walk(const Vocabulary::Sorted& tokens, int32_t rule, int32_t state,
                       OnAccepted on_accepted, OnDependent on_dependent) const {
  // The trie walk: level d is the stack set after the first d bytes of the current token;
  // levels 0..valid are those of the current token's prefix. touched[d]: some byte before d
  // needed the unknown caller. Almost every step is one top in a plain state (no call, no pop:
  // CompiledGrammar::plain), which a level keeps as `single[d]` and steps with one table
  // lookup; any other set is a TopSet in `sets[d]`, stepped by StepByte.
  FramePool pool;
  const int32_t max_len = tokens.max_len;
  std::vector<TopSet> sets(max_len + 1);
  std::vector<Top> single(max_len + 1);
  std::vector<char> is_single(max_len + 1, 0);
  std::vector<char> touched(max_len + 1, 0);
  std::vector<CompiledGrammar::RuleView> views(grammar_->num_rules());
  for (int32_t r = 0; r < grammar_->num_rules(); ++r) views[r] = grammar_->view(r);
  // Stores sets[d] as level d: as a single plain top when it is one.
  auto set_level = [&](int32_t d) {
    is_single[d] = sets[d].size() == 1 && views[sets[d][0].rule].plain[sets[d][0].state];
    if (is_single[d]) single[d] = sets[d][0];
  };
  auto live = [&](int32_t d) { return is_single[d] || !sets[d].empty(); };
  sets[0] = {Top{rule, state, FramePool::kContext}};
  set_level(0);
  int32_t valid = 0;
  for (size_t k = 0; k < tokens.ids.size(); ++k) {
    const std::string_view bytes = tokens.bytes(k);
    const int32_t len = static_cast<int32_t>(bytes.size());
    valid = std::min(valid, tokens.lcp[k]);
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
      on_accepted(k);
    } else if (touched[valid]) {
      on_dependent(k);
    }
  }
}

TokenMasker::Classified TokenMasker::Classify(int32_t rule, int32_t state, bool* walked,
                                              bool pin) {
  const int64_t short_key = ShortKey(rule, state);
  const int64_t long_key = PositionKey(rule, state);
  Classified out;
  bool walk_short = false;  // this thread walks the class (no other thread is walking it)
  {
    absl::MutexLock lock(&mu_);
    if (auto it = long_cache_.find(long_key); it != long_cache_.end()) out.long_mask = it->second;
    for (;;) {
      if (auto it = short_cache_.find(short_key); it != short_cache_.end()) {
        out.short_mask = it->second;
        break;
      }
      // Two positions of one class met at once: one walk, the other thread waits for it.
      if (short_walking_.insert(short_key).second) {
        walk_short = true;
        break;
      }
      walked_cv_.Wait(&mu_);
    }
  }
  if (out.short_mask != nullptr && out.long_mask != nullptr) return out;
  if (walked != nullptr) *walked = true;
  std::shared_ptr<const ShortMask> made_short;
  if (walk_short) {
    walks_.fetch_add(1, std::memory_order_relaxed);
    auto m = std::make_shared<ShortMask>();
    m->accepted.assign(MaskWords(vocab_->size()), 0);
    const Vocabulary::Sorted& tokens = vocab_->short_tokens();
    Walk(
        tokens, rule, state, [&](size_t k) { SetBit(&m->accepted, tokens.ids[k]); },
        [&](size_t k) { m->dependent.push_back(tokens.ids[k]); });
    made_short = std::move(m);
  }
  std::shared_ptr<const LongMask> made_long;
  if (out.long_mask == nullptr) {
    long_walks_.fetch_add(1, std::memory_order_relaxed);
    auto m = std::make_shared<LongMask>();
    const Vocabulary::Sorted& tokens = vocab_->long_tokens();
    m->accepted.assign(MaskWords(std::ssize(tokens.ids)), 0);
    Walk(
        tokens, rule, state, [&](size_t k) { m->accepted[k >> 6] |= uint64_t{1} << (k & 63); },
        [&](size_t k) { m->dependent.push_back(tokens.ids[k]); });
    made_long = std::move(m);
  }
  // Stores what was made (another thread may have stored the same first: keep that), then
  // evicts the oldest beyond the bounds, never what was just stored.
  // (Called with mu_ held.)
  auto store = [&](auto& cache, auto& order, size_t bound, int64_t key, auto made, auto* into) {
    auto [it, inserted] = cache.try_emplace(key, std::move(made));
    *into = it->second;
    if (!inserted || pin) return;
    order.push_back(key);
    while (cache.size() > bound && order.size() > 1) {
      cache.erase(order.front());
      order.pop_front();
      ++evictions_;
    }
  };
  absl::MutexLock lock(&mu_);
  if (made_short != nullptr) {
    store(short_cache_, short_order_, max_cached_, short_key, std::move(made_short),
          &out.short_mask);
    short_walking_.erase(short_key);
    walked_cv_.SignalAll();
  }
  if (made_long != nullptr) {
    store(long_cache_, long_order_, max_long_cached_, long_key, std::move(made_long),
          &out.long_mask);
  }
  return out;
}

void TokenMasker::FillMask(const Matcher& matcher, TokenBits* mask) {
  mask->resize(MaskWords(vocab_->size()));
  FillMask(matcher, std::span<uint64_t>(*mask));
}

void TokenMasker::FillMask(const Matcher& matcher, std::span<uint64_t> mask) {
  const size_t words = MaskWords(vocab_->size());
  BANYAN_CHECK(mask.size() >= words);
  std::fill(mask.begin() + static_cast<ptrdiff_t>(words), mask.end(), 0);
  mask = mask.first(words);
  const std::vector<int32_t>& long_ids = vocab_->long_tokens().ids;
  bool first = true;
  for (const Top& top : matcher.tops()) {
    const Classified c = Classify(top.rule, top.state);
    const TokenBits& bits = c.short_mask->accepted;
    // The first top's short tokens are copied (no zeroing pass first), the others ORed in.
    if (first) {
      std::copy(bits.begin(), bits.begin() + static_cast<ptrdiff_t>(words), mask.begin());
    } else {
      for (size_t w = 0; w < words; ++w) mask[w] |= bits[w];
    }
    first = false;
    const std::vector<uint64_t>& long_bits = c.long_mask->accepted;
    for (size_t w = 0; w < long_bits.size(); ++w) {
      for (uint64_t b = long_bits[w]; b != 0; b &= b - 1) {
        SetBit(mask, long_ids[w * 64 + static_cast<size_t>(__builtin_ctzll(b))]);
      }
    }
    // A pop below the root frame ends the input, so no byte can follow it: on the root frame
    // every context-dependent token is rejected without a look.
    if (top.parent == FramePool::kContext || top.parent == FramePool::kBottom) continue;
    for (const std::vector<int32_t>* dependent :
         {&c.short_mask->dependent, &c.long_mask->dependent}) {
      for (int32_t id : *dependent) {
        if (!TestBit(mask, id) && matcher.AcceptsFrom(top, vocab_->bytes(id))) SetBit(mask, id);
      }
    }
  }
  if (first) std::fill(mask.begin(), mask.end(), 0);  // no tops: nothing is allowed
}

void TokenMasker::FillMaskSlow(const Matcher& matcher, TokenBits* mask) const {
  mask->assign(MaskWords(vocab_->size()), 0);
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
