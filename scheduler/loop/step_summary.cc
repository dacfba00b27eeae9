#include "scheduler/loop/step_summary.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_events.h"

namespace banyan::scheduler {
namespace {

// Tenants with a KV budget: an index each, and the sequences their running requests hold.
class TenantIndex {
 public:
  explicit TenantIndex(PolicyInput* in) : in_(in) {}

  int32_t Of(const LiveRequest& l) {
    if (l.req.tenant_kv_chunks <= 0) return -1;
    auto [it, added] = index_.emplace(l.req.tenant, static_cast<int32_t>(in_->tenants.size()));
    if (added) {
      in_->tenants.push_back({.chunks_budget = l.req.tenant_kv_chunks});
      seqs_.emplace_back();
    }
    return it->second;
  }

  void Hold(int32_t tenant, std::span<const kvcache::SeqId> seqs) {
    if (tenant >= 0) seqs_[tenant].insert(seqs_[tenant].end(), seqs.begin(), seqs.end());
  }

  // Tenants own disjoint namespaces, so the chunks only their sequences use are theirs.
  void Count(const kvcache::PrefixTree& tree) {
    for (size_t t = 0; t < in_->tenants.size(); ++t) {
      if (!seqs_[t].empty()) in_->tenants[t].chunks_used = tree.ChunksOnlyUsedBy(seqs_[t]);
    }
  }

 private:
  PolicyInput* in_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<std::vector<kvcache::SeqId>> seqs_;
};

// Chunks needed: the uncached tokens, the cached chunks the match turns live, and room for a
// split copy and the first appends.
PolicyRequest SummarizeWaiting(const kvcache::PrefixTree& tree, const LiveRequest& l,
                               int32_t tenant) {
  const int32_t c = tree.chunk_size();
  PolicyRequest p{.handle = l.handle, .priority = l.req.priority, .arrival = l.arrival,
                  .sequences = l.req.n, .resume = l.resume, .tenant = tenant};
  int32_t cached_chunks = 0;
  if (l.resume) {
    int32_t samples = 0, cached_total = 0;
    for (const LiveRequest::Sample& s : l.samples) {
      if (s.finished) continue;
      std::vector<int32_t> all = InTree(l.req.prompt, s.generated);
      p.remaining_prefill += static_cast<int32_t>(all.size()) -
                             tree.Match(l.req.cache_namespace, all, &cached_chunks);
      cached_total += cached_chunks;
      ++samples;
    }
    p.chunks_needed = ResumeChunks(p.remaining_prefill, cached_total, samples, c);
  } else {
    const int32_t len = static_cast<int32_t>(l.req.prompt.size());
    p.remaining_prefill = len - tree.Match(l.req.cache_namespace, l.req.prompt, &cached_chunks);
    p.chunks_needed = AdmissionChunks(p.remaining_prefill, cached_chunks, l.req.n, c);
  }
  return p;
}

// `seqs` receives the request's sequences (reused by the caller: no allocation per row).
PolicyRequest SummarizeRunning(const kvcache::PrefixTree& tree, const LiveRequest& l,
                               int32_t tenant, bool first_token_in_flight,
                               std::vector<kvcache::SeqId>* seqs) {
  PolicyRequest p{.handle = l.handle, .priority = l.req.priority, .arrival = l.arrival,
                  .sequences = l.req.n, .tenant = tenant};
  seqs->clear();
  if (l.state == RequestState::kDecoding) {
    p.decoding = true;
    for (const LiveRequest::Sample& s : l.samples) {
      if (s.finished) continue;
      seqs->push_back(s.seq);
      p.chunks_needed += tree.AppendChunksNeeded(s.seq, s.next_token);
    }
  } else if (first_token_in_flight) {
    // Decodes from its prompt's sequence (its one sample's, once N is collected); n > 1
    // samples each take a pending fork of a chunk.
    p.decoding = true;
    seqs->push_back(l.prompt_seq);
    p.chunks_needed +=
        l.req.n > 1 ? l.req.n
                    : tree.AppendChunksNeeded(l.prompt_seq, kvcache::PrefixTree::kPendingToken);
  } else {
    seqs->push_back(l.prompt_seq);
    p.remaining_prefill = static_cast<int32_t>(l.req.prompt.size()) - l.placed;
  }
  p.chunks_private = tree.ChunksOnlyUsedBy(*seqs);
  return p;
}

// Prefix groups (see the header): `order` is every waiting PolicyRequest of `in` in the policy's
// order; `lives` the LiveRequest of each, by the same index into in.waiting.
class PrefixGroups {
 public:
  explicit PrefixGroups(int32_t chunk_size) : c_(chunk_size) {}

  // The blocks of `l` past `frontier` (its tokens already in the tree) will be placed by it.
  void Lead(const LiveRequest& l, int32_t frontier) {
    for (size_t k = frontier / c_; k < l.prompt_blocks.size(); ++k) {
      holder_.try_emplace(l.prompt_blocks[k], Holder{l.handle, frontier});
    }
  }

  // Sets p's leader: the first holder of its longest block-aligned prefix past `match` (its
  // tokens in the tree).
  void Follow(const LiveRequest& l, int32_t match, PolicyRequest* p) const {
    for (size_t k = l.prompt_blocks.size(); k > 0 && static_cast<int32_t>(k) * c_ > match; --k) {
      const auto it = holder_.find(l.prompt_blocks[k - 1]);
      if (it == holder_.end()) continue;
      const int32_t shared_end = static_cast<int32_t>(k) * c_;
      const int32_t shared = shared_end - match;  // of its uncached tokens
      p->leader = it->second.handle;
      p->leader_tokens = shared_end - it->second.frontier;
      p->led_prefill = p->remaining_prefill - shared;
      p->led_chunks = p->chunks_needed -
                      (CeilDiv(p->remaining_prefill, c_) - CeilDiv(p->led_prefill, c_));
      return;
    }
  }

 private:
  static int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
  struct Holder {
    uint64_t handle;
    int32_t frontier;  // its tokens in the tree now
  };
  int32_t c_;
  absl::flat_hash_map<uint64_t, Holder> holder_;
};

// Leaders first from the requests still prefilling (the policy continues them before it
// admits), then through the waiting ones in the policy's order, each following before it leads.
// Requests resuming after a preemption neither lead nor follow.
void MarkPrefixGroups(std::span<const LivePtr> waiting, std::span<const LivePtr> running,
                      int32_t chunk_size, PolicyInput* in) {
  PrefixGroups groups(chunk_size);
  bool any = false;
  for (const LivePtr& l : running) {
    if (l->state == RequestState::kPrefilling && !l->resume &&
        l->placed < static_cast<int32_t>(l->req.prompt.size())) {
      groups.Lead(*l, l->placed);
      any = true;
    }
  }
  if (waiting.size() + (any ? 1 : 0) < 2) return;
  std::vector<size_t> order(waiting.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const PolicyRequest& x = in->waiting[a];
    const PolicyRequest& y = in->waiting[b];
    return x.priority != y.priority ? x.priority > y.priority : x.arrival < y.arrival;
  });
  for (size_t i : order) {
    const LiveRequest& l = *waiting[i];
    PolicyRequest& p = in->waiting[i];
    if (l.resume || p.remaining_prefill <= 0) continue;
    const int32_t match = static_cast<int32_t>(l.req.prompt.size()) - p.remaining_prefill;
    groups.Follow(l, match, &p);
    groups.Lead(l, match);
  }
}

bool AllFinished(const LiveRequest& l) {
  return std::all_of(l.samples.begin(), l.samples.end(), [](auto& s) { return s.finished; });
}

}  // namespace

std::vector<uint64_t> PromptBlocks(std::string_view ns, std::span<const int32_t> prompt,
                                   int32_t chunk_size) {
  std::vector<uint64_t> blocks;
  if (chunk_size <= 0) return blocks;
  blocks.reserve(prompt.size() / chunk_size);
  uint64_t parent = kvcache::NamespaceSeed(ns);
  for (size_t b = 0; b + chunk_size <= prompt.size(); b += chunk_size) {
    parent = kvcache::BlockHash(parent, prompt.subspan(b, chunk_size));
    blocks.push_back(parent);
  }
  return blocks;
}

std::vector<int32_t> InTree(const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end() - (generated.empty() ? 0 : 1));
  return all;
}

StepSummary SummarizeStep(const kvcache::PrefixTree& tree, std::span<const LivePtr> waiting,
                          std::span<const LivePtr> running, const SummaryLimits& limits,
                          bool fed, std::span<LiveRequest* const> in_flight_prompts) {
  StepSummary sum;
  PolicyInput& in = sum.input;
  const kvcache::MemoryStats kv = tree.Stats();
  in.chunks_free = kv.chunks_free;
  in.chunks_cached = kv.chunks_cached;
  in.chunk_size = tree.chunk_size();
  in.max_sequences = limits.max_sequences;
  in.prefill_token_budget = limits.prefill_token_budget;
  sum.by_handle.reserve(waiting.size() + running.size());
  TenantIndex tenants(&in);
  for (const LivePtr& l : waiting) {
    sum.by_handle[l->handle] = l.get();
    in.waiting.push_back(SummarizeWaiting(tree, *l, tenants.Of(*l)));
  }
  std::vector<kvcache::SeqId> seqs;
  for (const LivePtr& l : running) {
    if (l->state == RequestState::kDecoding && AllFinished(*l)) continue;
    sum.by_handle[l->handle] = l.get();
    const bool first_in_flight = fed && FirstTokenIn(*l, in_flight_prompts);
    in.running.push_back(SummarizeRunning(tree, *l, tenants.Of(*l), first_in_flight, &seqs));
    tenants.Hold(in.running.back().tenant, seqs);
  }
  tenants.Count(tree);
  MarkPrefixGroups(waiting, running, tree.chunk_size(), &in);
  return sum;
}

}  // namespace banyan::scheduler
