// Speculative decoding in the engine loop (LoopOptions::Speculation): drafting candidate chains,
// placing them as candidate rows of the step, and taking the verified results. docs/hydra.md
// describes the scheme; engine_loop.cc calls PlaceChains from ScheduleAndLaunch and TakeChain
// from CollectInflight.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/check.h"
#include "engine/speculative/draft_heads.h"
#include "scheduler/engine_loop.h"
#include "scheduler/engine_loop_live.h"

namespace banyan::scheduler {

namespace {

// Speculation keeps the output exactly the same only where a row's token is a function of its
// logits alone: greedy, without the penalties that read the generated counts.
bool SpeculationApplies(const engine::SamplingParams& p) {
  return p.temperature <= 0.0f && p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f &&
         p.presence_penalty == 0.0f;
}

uint64_t PromptKey(const Request& r) {
  uint64_t h = std::hash<std::string>()(r.cache_namespace);
  for (int32_t t : r.prompt) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h ^ r.prompt.size();
}

constexpr size_t kMaxContinuations = 4096;

}  // namespace

void EngineLoop::RememberContinuation(const Live& live) {
  if (!SpeculationApplies(live.req.params) || live.samples.empty()) return;
  const uint64_t key = PromptKey(live.req);
  auto [it, added] = continuations_.insert_or_assign(
      key, std::make_shared<const std::vector<int32_t>>(live.samples[0].generated));
  if (added) continuation_order_.push_back(key);
  if (continuation_order_.size() > kMaxContinuations) {
    continuations_.erase(continuation_order_.front());
    continuation_order_.erase(continuation_order_.begin());
  }
}

std::vector<int32_t> EngineLoop::DraftFor(Live& live, size_t i, int budget) {
  Live::Sample& s = live.samples[i];
  std::vector<int32_t> drafts;
  if (budget <= 0 || s.finished || s.seq < 0 || !SpeculationApplies(live.req.params)) {
    return drafts;
  }
  if (options_.speculation == LoopOptions::Speculation::kHeads) {
    if (options_.draft_heads == nullptr || s.hidden.empty()) return drafts;
    auto chain = options_.draft_heads->Chain(s.hidden, s.next_token);
    if (!chain.ok()) return drafts;
    drafts.assign(chain->begin(), chain->begin() + std::min<size_t>(chain->size(), budget));
  } else if (options_.speculation == LoopOptions::Speculation::kLookup) {
    Live::Sample& m = live.samples[i];
    if (!m.lookup && m.generated.size() == 1) {
      auto it = continuations_.find(PromptKey(live.req));
      if (it != continuations_.end()) m.lookup = it->second;
      m.lookup_checked = 0;
    }
    if (!m.lookup) return drafts;
    const std::vector<int32_t>& cont = *m.lookup;
    for (; m.lookup_checked < m.generated.size(); ++m.lookup_checked) {
      if (m.lookup_checked >= cont.size() || cont[m.lookup_checked] != m.generated[m.lookup_checked]) {
        m.lookup.reset();  // diverged (another model state, or a different sample): stop
        return drafts;
      }
    }
    const size_t g = m.generated.size();
    for (size_t j = g; j < cont.size() && drafts.size() < static_cast<size_t>(budget); ++j) {
      drafts.push_back(cont[j]);
    }
  }
  return drafts;
}

size_t EngineLoop::TakeChain(Live& live, size_t i, std::span<const engine::SampleResult> results,
                             std::chrono::steady_clock::time_point at) {
  Live::Sample& s = live.samples[i];
  std::vector<int32_t> drafts = std::move(s.drafts);
  s.drafts.clear();
  if (s.finished) return 0;
  const size_t k = drafts.size();
  BANYAN_CHECK(results.size() == k + 1) << results.size() << " rows for " << k << " candidates";
  size_t a = 0;
  while (a < k && results[a].token == drafts[a]) ++a;
  MetricsSnapshot& m = metrics_;
  ++m.spec_drafts_total;
  m.spec_draft_tokens_total += static_cast<int64_t>(k);
  m.spec_accepted_tokens_total += static_cast<int64_t>(a);
  for (size_t j = 0; j < a && j < static_cast<size_t>(MetricsSnapshot::kSpecPositions); ++j) {
    ++m.spec_accepted_per_position[j];
  }
  live.usage.draft_tokens += static_cast<int32_t>(k);
  live.usage.accepted_draft_tokens += static_cast<int32_t>(a);
  const kvcache::SeqId seq = s.seq;
  const int32_t keep = tree_.Length(seq) - static_cast<int32_t>(k - a);
  for (size_t j = 0; j <= a; ++j) {
    TakeSample(live, i, results[j], at);
    if (s.finished) return j;  // EOS or length: the sequence is released
  }
  if (absl::Status t = tree_.Truncate(seq, keep, &pending_copies_); !t.ok()) {
    Finish(live, t, FinishReason::kError);
  }
  return a;
}

void EngineLoop::PlaceChains(
    const absl::flat_hash_map<kvcache::SeqId, std::pair<Live*, size_t>>& owner,
    std::vector<engine::DecodeItem>* decode, std::vector<kvcache::ChunkCopy>* copies) {
  std::vector<engine::DecodeItem> chain_rows;
  auto place_chain = [&](engine::DecodeItem& d, Live::Sample& s, std::vector<int32_t> drafts) {
    if (drafts.empty()) return;
    const int32_t len = tree_.Length(d.seq);
    auto placed = tree_.Extend(d.seq, drafts, /*allow_evict=*/false);
    if (!placed.ok()) return;  // no room for candidates: decode plainly
    copies->insert(copies->end(), placed->copies.begin(), placed->copies.end());
    d.length = len;  // next_token's row opens the chain
    for (size_t j = 0; j < drafts.size(); ++j) {
      chain_rows.push_back(engine::DecodeItem{
          .seq = d.seq, .write_kv = static_cast<int32_t>(j) >= placed->matched_tokens,
          .sample = {}, .length = len + 1 + static_cast<int32_t>(j)});
    }
    s.drafts = std::move(drafts);
  };
  // Draft heads run once for the whole step (ChainBatch); prompt lookup per sample.
  struct HeadsWant {
    engine::DecodeItem* item;
    Live::Sample* sample;
    int budget;
  };
  std::vector<HeadsWant> heads_want;
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  for (engine::DecodeItem& d : *decode) {
    auto [l, k] = owner.at(d.seq);
    Live::Sample& s = l->samples[k];
    const int budget = std::min({options_.draft_tokens,
                                 l->req.params.max_tokens - static_cast<int>(s.generated.size()) - 1,
                                 config_.max_seq_len - tree_.Length(d.seq)});
    if (budget <= 0 || !SpeculationApplies(l->req.params)) continue;
    if (heads) {
      if (!s.hidden.empty() && options_.draft_heads != nullptr) {
        heads_want.push_back({&d, &s, budget});
      }
    } else {
      place_chain(d, s, DraftFor(*l, k, budget));
    }
  }
  if (!heads_want.empty()) {
    const size_t dim = static_cast<size_t>(config_.dim);
    int longest = 0;
    std::vector<float> h(heads_want.size() * dim);
    std::vector<int32_t> roots;
    for (size_t i = 0; i < heads_want.size(); ++i) {
      std::copy(heads_want[i].sample->hidden.begin(), heads_want[i].sample->hidden.end(),
                h.begin() + static_cast<std::ptrdiff_t>(i * dim));
      roots.push_back(heads_want[i].sample->next_token);
      longest = std::max(longest, heads_want[i].budget);
    }
    longest = std::min(longest, options_.draft_heads->num_heads());
    std::vector<int32_t> chains;
    if (options_.draft_heads->ChainBatch(h, roots, longest, &chains).ok()) {
      for (size_t i = 0; i < heads_want.size(); ++i) {
        const auto first = chains.begin() + static_cast<std::ptrdiff_t>(i * longest);
        place_chain(*heads_want[i].item, *heads_want[i].sample,
                    std::vector<int32_t>(first, first + std::min(longest, heads_want[i].budget)));
      }
    }
  }
  decode->insert(decode->end(), chain_rows.begin(), chain_rows.end());
}

}  // namespace banyan::scheduler
