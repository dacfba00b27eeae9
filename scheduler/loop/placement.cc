#include "scheduler/loop/placement.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace banyan::scheduler {
namespace {

// Re-places every running sample's tokens; the cache's part is matched, the rest recomputed.
// No logits needed: each sample's next token was sampled before the preemption.
absl::Status PlaceResume(kvcache::PrefixTree& tree, LiveRequest& live, PlacedStep* step) {
  const Request& r = live.req;
  for (LiveRequest::Sample& s : live.samples) {
    if (s.finished) continue;
    std::vector<int32_t> all = InTree(r.prompt, s.generated);
    auto placed = tree.Insert(r.cache_namespace, all, /*allow_evict=*/true);
    if (!placed.ok()) return placed.status();
    s.seq = placed->seq;
    step->copies.insert(step->copies.end(), placed->copies.begin(), placed->copies.end());
    const int32_t len = static_cast<int32_t>(all.size());
    if (placed->matched_tokens < len) {
      step->prefill.push_back(engine::PrefillItem{
          .seq = s.seq, .begin = placed->matched_tokens, .end = len,
          .cached_end = placed->matched_tokens, .want_logits = false, .samples = {}});
    }
  }
  live.resume = false;
  live.state = RequestState::kDecoding;
  return absl::OkStatus();
}

// The prompt's last row samples its n samples' first tokens: their states exist before the
// forward pass.
void SampleFirstTokens(LiveRequest& live, PlacementHooks& hooks, PlacedStep* step) {
  hooks.StartSamples(live);
  for (size_t k = 0; k < live.samples.size(); ++k) {
    step->prefill.back().samples.push_back({.params = &live.req.params,
                                            .state = &live.samples[k].sampling,
                                            .allowed = hooks.MaskFor(live, k)});
  }
  step->logit_owners.push_back(&live);
}

}  // namespace

int64_t PlacedStep::PrefillTokens() const {
  int64_t tokens = 0;
  for (const engine::PrefillItem& p : prefill) tokens += p.end - p.begin;
  return tokens;
}

absl::Status PlacePrefill(kvcache::PrefixTree& tree, LiveRequest& live, int32_t tokens,
                          PlacementHooks& hooks, PlacedStep* step) {
  if (live.resume) return PlaceResume(tree, live, step);
  const Request& r = live.req;
  const int32_t len = static_cast<int32_t>(r.prompt.size());
  const int32_t begin = live.placed;
  const int32_t match_hint = live.prompt_seq < 0 ? tree.Match(r.cache_namespace, r.prompt) : begin;
  const int32_t end = std::min(len, std::max(match_hint, begin) + std::max(tokens, 1));
  std::span<const int32_t> chunk(r.prompt.data() + begin, end - begin);
  absl::StatusOr<kvcache::PlaceResult> placed =
      live.prompt_seq < 0 ? tree.Insert(r.cache_namespace, chunk, /*allow_evict=*/true)
                          : tree.Extend(live.prompt_seq, chunk, /*allow_evict=*/true);
  if (!placed.ok()) return placed.status();
  if (live.prompt_seq < 0) live.usage.cached_prompt_tokens = placed->matched_tokens;
  live.prompt_seq = placed->seq;
  live.placed = end;
  live.state = RequestState::kPrefilling;
  step->copies.insert(step->copies.end(), placed->copies.begin(), placed->copies.end());
  const int32_t cached_end = begin + placed->matched_tokens;
  const bool last = end == len;
  if (cached_end < end || last) {
    // A fully cached prompt still recomputes its last token for the logits (KV not rewritten).
    step->prefill.push_back(engine::PrefillItem{
        .seq = live.prompt_seq, .begin = std::min(cached_end, end - 1), .end = end,
        .cached_end = cached_end, .want_logits = last, .samples = {}});
    if (last) SampleFirstTokens(live, hooks, step);
  }
  step->prompt_tokens += end - begin;
  step->cache_hit_tokens += placed->matched_tokens;
  return absl::OkStatus();
}

void PlacePrompts(kvcache::PrefixTree& tree, const IterationPlan& plan, const ByHandle& by_handle,
                  std::span<const LivePtr> running, PlacementHooks& hooks, PlacedStep* step) {
  for (const auto& [h, tokens] : plan.prefill) {
    LiveRequest& l = *by_handle.at(h);
    const size_t items_before = step->prefill.size(), owners_before = step->logit_owners.size();
    const absl::Status s = PlacePrefill(tree, l, tokens, hooks, step);
    if (s.ok()) continue;
    // The policy budgets memory; failing here means the estimate was short: retry later.
    // Copies already listed stay valid: copies run before any KV write of the step.
    step->prefill.resize(items_before);
    step->logit_owners.resize(owners_before);
    const bool alone = std::none_of(running.begin(), running.end(), [&](const LivePtr& r) {
      return r.get() != &l && r->state != RequestState::kWaiting;
    });
    if (alone) {
      // Nothing else holds memory: waiting cannot help. Fail instead of retrying forever.
      hooks.Fail(l, absl::ResourceExhaustedError(
                        absl::StrCat("the KV cache cannot hold this request: ", s.message())));
      continue;
    }
    Log()->warn("[kv] request {}: prefill deferred: {}", l.req.id, std::string(s.message()));
    hooks.Preempt(l);
  }
}

absl::Status MakeSamples(kvcache::PrefixTree& tree, LiveRequest& live) {
  if (live.prompt_seq < 0) return absl::OkStatus();  // made already
  auto ids = tree.Fork(live.prompt_seq, live.req.n);
  if (!ids.ok()) return ids.status();
  for (size_t k = 0; k < live.samples.size(); ++k) live.samples[k].seq = (*ids)[k];
  live.prompt_seq = -1;  // now owned by samples[0]
  return absl::OkStatus();
}

namespace {

// A prompt with n > 1 whose first token `before` samples, about to decode in a fed step: its
// samples are made now, so that each takes its own row. Fork needs no memory; a live prompt
// sequence cannot be refused.
void ForkAhead(kvcache::PrefixTree& tree, LiveRequest& live, const InFlightStep& before) {
  if (live.req.n == 1 || live.prompt_seq < 0 || !FirstTokenIn(live, before.logit_owners)) return;
  const absl::Status s = MakeSamples(tree, live);
  BANYAN_CHECK(s.ok()) << s;
}

// The spec of `before` that samples each sequence's next token. Its specs: its decode rows in
// row order, then each prompt's samples (a fed step follows no candidates).
absl::flat_hash_map<kvcache::SeqId, int32_t> SpecsOf(const InFlightStep& before) {
  absl::flat_hash_map<kvcache::SeqId, int32_t> spec_of;
  const std::vector<kvcache::SeqId>& rows = before.out.decode_rows;
  spec_of.reserve(rows.size() + before.logit_owners.size());
  for (size_t r = 0; r < rows.size(); ++r) spec_of.emplace(rows[r], static_cast<int32_t>(r));
  int32_t spec = static_cast<int32_t>(rows.size());
  for (const LiveRequest* l : before.logit_owners) {
    if (l->prompt_seq >= 0) {
      spec_of.emplace(l->prompt_seq, spec);  // n = 1, or not decoding in this step
    } else {
      for (size_t k = 0; k < l->samples.size(); ++k) {
        spec_of.emplace(l->samples[k].seq, spec + static_cast<int32_t>(k));
      }
    }
    spec += static_cast<int32_t>(l->samples.size());
  }
  return spec_of;
}

// The sequences of the plan's decode rows in a fed step, their owners into `owner`.
std::vector<kvcache::SeqId> FedSequences(const IterationPlan& plan, const ByHandle& by_handle,
                                         RowOwners* owner) {
  std::vector<kvcache::SeqId> seqs;
  for (uint64_t h : plan.decode) {
    LiveRequest& l = *by_handle.at(h);
    for (size_t i = 0; i < l.samples.size(); ++i) {
      const LiveRequest::Sample& smp = l.samples[i];
      if (smp.finished) continue;
      // N's token is its last (max_tokens): as in the unfed loop, the step after has no row
      // for it, and so the same rows. (An EOS or a stop string cannot be known ahead: such a
      // sample has one more row, whose token is dropped.)
      if (static_cast<int64_t>(smp.generated.size()) + 1 >= l.req.params.max_tokens) continue;
      // A prompt whose first token N samples decodes on its prompt's sequence: the one
      // sample's once N is collected (Fork of one keeps the id), or its samples' (n > 1).
      const kvcache::SeqId seq = l.prompt_seq >= 0 ? l.prompt_seq : smp.seq;
      seqs.push_back(seq);
      (*owner)[seq] = {&l, i};
    }
  }
  return seqs;
}

}  // namespace

FedPlacement PlaceFedRows(kvcache::PrefixTree& tree, const IterationPlan& plan,
                          const ByHandle& by_handle, const InFlightStep& before,
                          PlacedStep* step) {
  for (uint64_t h : plan.decode) ForkAhead(tree, *by_handle.at(h), before);
  const absl::flat_hash_map<kvcache::SeqId, int32_t> spec_of = SpecsOf(before);
  RowOwners owner;
  const std::vector<kvcache::SeqId> seqs = FedSequences(plan, by_handle, &owner);
  // A leaf that prefill placed above made a parent, one that samples share, or one with a
  // cached continuation below takes its pending token in a fork of its own.
  if (seqs.empty() && plan.prefill.empty()) return FedPlacement::kNotFed;  // nothing to launch
  // (No decode row: a step of prompts alone, launched ahead all the same.)
  if (!seqs.empty() && !tree.AppendPending(seqs, /*allow_evict=*/true).ok()) {
    // Nothing changed for decode yet; placed prompts stay (the caller takes N's tokens first).
    return plan.prefill.empty() ? FedPlacement::kNotFed : FedPlacement::kShort;
  }
  step->patches.clear();
  for (kvcache::SeqId seq : seqs) {
    const int32_t feed = spec_of.at(seq);
    step->decode.push_back(
        engine::DecodeItem{.seq = seq, .write_kv = true, .sample = {}, .length = 0, .feed = feed});
    step->patches.emplace_back(seq, feed);
  }
  step->owner.merge(owner);
  return FedPlacement::kPlaced;
}

void PlaceDecodeAppends(kvcache::PrefixTree& tree, const IterationPlan& plan,
                        const ByHandle& by_handle, PlacementHooks& hooks, PlacedStep* step) {
  std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
  std::vector<std::pair<LiveRequest*, size_t>> sitting;  // masks not classified yet
  for (uint64_t h : plan.decode) {
    LiveRequest& l = *by_handle.at(h);
    for (size_t i = 0; i < l.samples.size(); ++i) {
      if (l.samples[i].finished) continue;
      if (!hooks.MaskReady(l, i)) {
        sitting.emplace_back(&l, i);
        continue;
      }
      appends.emplace_back(l.samples[i].seq, l.samples[i].next_token);
      step->owner[l.samples[i].seq] = {&l, i};
    }
  }
  if (appends.empty() && step->prefill.empty()) {
    // Nothing else runs: the samples wait for their masks (MaskFor) instead of an empty step.
    for (auto [l, i] : sitting) {
      appends.emplace_back(l->samples[i].seq, l->samples[i].next_token);
      step->owner[l->samples[i].seq] = {l, i};
    }
  }
  while (!appends.empty()) {
    auto placed = tree.AppendBatch(appends, /*allow_evict=*/true);
    if (placed.ok()) {
      for (const kvcache::PlaceResult& p : *placed) {
        step->copies.insert(step->copies.end(), p.copies.begin(), p.copies.end());
        step->decode.push_back(
            engine::DecodeItem{.seq = p.seq, .write_kv = !p.new_slots.empty(), .sample = {}});
      }
      break;
    }
    // The policy's estimate fell short (e.g. this iteration's admissions used the cache):
    // preempt the least important decoding request and retry without it.
    std::vector<PolicyRequest> candidates;
    for (uint64_t h : plan.decode) {
      const LiveRequest* l = by_handle.at(h);
      if (l->state != RequestState::kDecoding) continue;
      candidates.push_back({.handle = h, .priority = l->req.priority, .arrival = l->arrival});
    }
    const uint64_t victim_handle = ChooseAppendVictim(candidates);
    LiveRequest* victim = victim_handle == 0 ? nullptr : by_handle.at(victim_handle);
    if (victim == nullptr) break;
    Log()->warn("[kv] decode appends failed ({}); preempting {}",
                std::string(placed.status().message()), victim->req.id);
    hooks.Preempt(*victim);
    std::erase_if(appends, [&](const auto& a) { return step->owner.at(a.first).first == victim; });
  }
}

}  // namespace banyan::scheduler
