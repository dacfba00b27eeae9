// Speculative decoding in the engine loop (LoopOptions::Speculation): drafting candidates,
// placing them as candidate rows of the step, and taking the verified results. docs/hydra.md
// describes the scheme; ScheduleAndLaunch (engine_loop.cc) calls Speculate after placement and
// CollectInflight (collect.cc) calls TakeCandidates.
//
// Where the candidates live. A chain grows the sample's own sequence in place; the rejected
// tail is cut afterwards (PrefixTree::Truncate). A tree cannot: its branches need nodes of
// their own. Each leaf gets a temporary fork of the sample's sequence holding its path, so the
// candidates form a subtree under the sample's last token whose shared parts the tree shares
// by itself. Its nodes are packed (PrefixTree::ExtendPacked): one after another in chunks the
// step's trees share, a slot per candidate, not a chunk per node (a [4,2,2] tree took 27 chunks
// per sample and step, now under 2 with 16-slot chunks). After verification every fork is cut back and released (the whole subtree returns
// to the pool), and the accepted path is appended to the sample's sequence in place, its KV
// copied from the candidate slots (a few slots, not a 64-slot chunk per step and node).
// The pool holds the freed chunks until the copies are listed, so that no new slot of the
// sample can land on a candidate slot still to be read.
//
// Exactness. Each candidate row samples with the sample's state advanced along its path (the
// penalties' counts and the Philox step of that position), so a row draws what decoding without
// speculation would draw there. Walking from the root, a child is accepted when its parent's row
// drew its token; the first row whose draw is no child's token gives the next token. With
// drafts that are fixed given the context (argmax or top-b of the heads, a lookup), this is
// exact speculative sampling: the residual distribution of a rejected point-mass draft is the
// row's own distribution without that token, which is what the row's draw is conditioned on.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/check.h"
#include "engine/speculative/draft_heads.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/ngram_lookup.h"
#include "scheduler/loop/placement.h"
#include "scheduler/loop/speculation.h"

namespace banyan::scheduler {

namespace {

uint64_t PromptKey(const Request& r) {
  uint64_t h = std::hash<std::string>()(r.cache_namespace);
  for (int32_t t : r.prompt) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h ^ r.prompt.size();
}

// A sample's context for n-gram lookup: its prompt, then what it generated (its next token
// last: the drafts follow it).
TokenContext ContextOf(const LiveRequest& live, const LiveRequest::Sample& s) {
  return {.head = live.req.prompt, .tail = s.generated};
}

bool Greedy(const engine::SamplingParams& p) {
  return p.temperature < engine::kGreedyTemperature && !p.ChangesLogits();
}

constexpr size_t kMaxContinuations = 4096;
constexpr size_t kPauseTokens = 16;  // plain tokens after acceptance fell too low
constexpr float kAverageWeight = 0.25f;  // of the newest verification in accept_average

using Candidates = SpecCandidates;

Candidates ChainOf(int32_t root, std::span<const int32_t> drafts) {
  Candidates c;
  c.token.push_back(root);
  c.parent.push_back(-1);
  c.depth.push_back(0);
  for (size_t j = 0; j < drafts.size(); ++j) {
    c.token.push_back(drafts[j]);
    c.parent.push_back(static_cast<int32_t>(j));
    c.depth.push_back(static_cast<int32_t>(j) + 1);
  }
  return c;
}

bool IsChain(const Candidates& c) {
  for (size_t n = 1; n < c.token.size(); ++n) {
    if (c.parent[n] != static_cast<int32_t>(n) - 1) return false;
  }
  return true;
}

}  // namespace

int SpeculationClassFor(const LoopOptions& options, size_t decode_rows) {
  if (options.speculation == LoopOptions::Speculation::kOff || decode_rows == 0 ||
      static_cast<int64_t>(decode_rows) > options.speculation_max_rows) {
    return -1;
  }
  return SpeculationGovernor::ClassOf(static_cast<int64_t>(decode_rows));
}

bool EngineLoop::GovernorSpeculates(int size_class) {
  if (speculation_forced_) return *speculation_forced_;
  return !options_.speculation_adaptive || speculation_governor_.Speculate(size_class);
}

bool EngineLoop::GovernorMaySpeculate(int size_class) const {
  if (speculation_forced_) return *speculation_forced_;
  return !options_.speculation_adaptive || speculation_governor_.MaySpeculate(size_class);
}

bool EngineLoop::MayDraft(const Live& live, size_t sample) const {
  const Live::Sample& s = live.samples[sample];
  if (live.req.constraint != nullptr) return false;  // constrained samples do not speculate
  // A paused sample decodes plainly: its pause runs down in tokens, fed steps or not.
  if (s.SpeculationPaused()) return false;
  if (options_.speculation == LoopOptions::Speculation::kHeads || s.lookup != nullptr) return true;
  // DraftFor searches the continuations once, at the sample's first drafting.
  if (!s.lookup_tried && continuations_.contains(PromptKey(live.req))) return true;
  // Without the token in flight, a guess: the context so far has a match. Where the token in
  // flight breaks it, the step is not fed and places no candidates.
  return FindNgram(ContextOf(live, s), options_.ngram_lookup).n > 0;
}

void EngineLoop::Speculate(PlacedStep* step, bool fed, StepSpeculation* spec) {
  spec->row_states.clear();
  spec->item_node.clear();
  spec->speculated = false;
  spec->size_class = SpeculationClassFor(options_, step->decode.size());
  if (spec->size_class < 0 || !GovernorSpeculates(spec->size_class) || fed) return;
  // The candidates take what the prefill left of the step's token budget.
  const int prefill_tokens = static_cast<int>(step->PrefillTokens());
  PlaceCandidates(options_.prefill_token_budget - prefill_tokens, step, spec);
  const int64_t candidates = std::count_if(spec->item_node.begin(), spec->item_node.end(),
                                           [](int32_t n) { return n > 0; });
  spec->speculated = candidates > 0;
  stats_.max_step_candidates = std::max(stats_.max_step_candidates, candidates);
}

void EngineLoop::RememberContinuation(const Live& live) {
  if (!Greedy(live.req.params) || live.samples.empty()) return;
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
  Live::Sample& m = live.samples[i];
  std::vector<int32_t> drafts;
  if (budget <= 0 || m.finished || m.seq < 0) return drafts;
  // Once, whenever the sample first drafts (a fed first decode step places no candidates): the
  // continuation is checked against every token generated so far below.
  if (!m.lookup && !m.lookup_tried) {
    m.lookup_tried = true;
    auto it = continuations_.find(PromptKey(live.req));
    if (it != continuations_.end()) m.lookup = it->second;
    m.lookup_checked = 0;
  }
  // The continuation while every token generated so far agrees with it.
  for (; m.lookup && m.lookup_checked < m.generated.size(); ++m.lookup_checked) {
    const std::vector<int32_t>& cont = *m.lookup;
    if (m.lookup_checked >= cont.size() || cont[m.lookup_checked] != m.generated[m.lookup_checked]) {
      m.lookup.reset();  // diverged (another model state, or a different sample): stop
    }
  }
  for (size_t j = m.generated.size();
       m.lookup && j < m.lookup->size() && drafts.size() < static_cast<size_t>(budget); ++j) {
    drafts.push_back((*m.lookup)[j]);
  }
  // Without a continuation (or past its end): the sample's own context.
  if (drafts.empty()) drafts = NgramDrafts(ContextOf(live, m), options_.ngram_lookup, budget);
  return drafts;
}

void EngineLoop::DropCandidates(Live& live, size_t i) {
  Live::Sample& s = live.samples[i];
  for (kvcache::SeqId f : s.cand.forks) {
    if (!tree_.IsLive(f)) continue;
    tree_.Truncate(f, s.cand.base, &pending_copies_).IgnoreError();
    tree_.Release(f).IgnoreError();
  }
  if (!s.cand.empty() && s.cand.forks.empty() && s.seq >= 0 && tree_.IsLive(s.seq)) {
    tree_.Truncate(s.seq, s.cand.base, &pending_copies_).IgnoreError();  // a chain's tail
  }
  s.cand.clear();
}

int32_t EngineLoop::TakeCandidates(Live& live, size_t i,
                                   std::span<const engine::SampleResult> results,
                                   std::chrono::steady_clock::time_point at) {
  Live::Sample& s = live.samples[i];
  Candidates c = std::move(s.cand);
  s.cand.clear();
  const size_t nodes = c.token.size();
  std::vector<int32_t> path;  // accepted nodes, root's child first
  for (int32_t u = 0;;) {
    // A child of u whose token u's row drew (children come after their parent).
    const int32_t drawn = results[c.row[u]].token;
    int32_t next = -1;
    for (size_t n = static_cast<size_t>(u) + 1; n < nodes && next < 0; ++n) {
      if (c.parent[n] == u && c.token[n] == drawn) next = static_cast<int32_t>(n);
    }
    if (next < 0) break;
    path.push_back(next);
    u = next;
  }
  size_t a = path.size();
  const kvcache::SeqId seq = s.seq;
  bool preempt = false;
  if (c.forks.empty()) {
    // A chain in the sample's own sequence: cut the rejected tail. Where that splits a node
    // shared with another sample and no chunk is free for the split, the tokens are still
    // right: take them, then preempt the request (its KV goes to the cache; the recompute
    // re-places exactly the taken tokens).
    if (absl::Status t = tree_.Truncate(seq, c.base + static_cast<int32_t>(a), &pending_copies_);
        !t.ok()) {
      if (!absl::IsResourceExhausted(t)) {
        Finish(live, t, FinishReason::kError);
        return c.row[0];
      }
      preempt = true;
    }
  } else {
    // A tree: the accepted path moves onto the sample's own sequence.
    a = AcceptTreePath(c, path, seq);
    path.resize(a);
  }
  const size_t drafted = nodes - 1;
  MetricsSnapshot& m = metrics_;
  ++m.spec_drafts_total;
  m.spec_draft_tokens_total += static_cast<int64_t>(drafted);
  m.spec_accepted_tokens_total += static_cast<int64_t>(a);
  for (size_t j = 0; j < a && j < static_cast<size_t>(MetricsSnapshot::kSpecPositions); ++j) {
    ++m.spec_accepted_per_position[j];
  }
  live.usage.draft_tokens += static_cast<int32_t>(drafted);
  live.usage.accepted_draft_tokens += static_cast<int32_t>(a);
  s.accept_average =
      (1.0f - kAverageWeight) * s.accept_average + kAverageWeight * static_cast<float>(a);
  if (s.accept_average < options_.speculation_min_accept) {
    s.speculation_paused_until = s.generated.size() + a + 1 + kPauseTokens;  // after the draws
  }
  // The draws: the root's row, then each accepted node's row; the last is the next token.
  int32_t last_row = c.row[0];
  for (size_t j = 0; j <= a; ++j) {
    last_row = j == 0 ? c.row[0] : c.row[path[j - 1]];
    TakeSample(live, i, results[last_row], at);
    if (s.finished) break;  // EOS or length: the sequence is released
  }
  if (preempt && live.state == RequestState::kDecoding) Preempt(live);  // it logs why
  return last_row;
}

namespace {

// Places a tree's candidates: a fork of `seq` per leaf holding its path (c->forks), each node's
// row on the first fork that holds it (c->seq), whether its KV is to be written (`write`).
// False when there is no room: c->forks is empty when even the forks failed.
bool PlaceTree(kvcache::PrefixTree& tree, kvcache::SeqId seq, Candidates* c,
               std::vector<uint8_t>* write, std::vector<kvcache::ChunkCopy>* copies) {
  std::vector<int32_t> leaves;
  std::vector<uint8_t> inner(c->token.size(), 0);
  for (size_t n = 1; n < c->token.size(); ++n) inner[c->parent[n]] = 1;
  for (size_t n = 1; n < c->token.size(); ++n) {
    if (!inner[n]) leaves.push_back(static_cast<int32_t>(n));
  }
  auto forks = tree.Fork(seq, static_cast<int>(leaves.size()) + 1);
  if (!forks.ok()) return false;
  c->forks.assign(forks->begin() + 1, forks->end());
  std::vector<uint8_t> placed_node(c->token.size(), 0);
  for (size_t f = 0; f < leaves.size(); ++f) {
    std::vector<int32_t> path;  // leaf .. root's child
    for (int32_t n = leaves[f]; n > 0; n = c->parent[n]) path.push_back(n);
    std::reverse(path.begin(), path.end());
    std::vector<int32_t> tokens;
    for (int32_t n : path) tokens.push_back(c->token[n]);
    auto placed = tree.ExtendPacked(c->forks[f], tokens);
    if (!placed.ok()) return false;
    copies->insert(copies->end(), placed->copies.begin(), placed->copies.end());
    for (size_t j = 0; j < path.size(); ++j) {
      const int32_t n = path[j];
      if (placed_node[n]) continue;  // an earlier leaf's row computes it
      placed_node[n] = 1;
      c->seq[n] = c->forks[f];
      (*write)[n] = static_cast<int32_t>(j) >= placed->matched_tokens;
    }
  }
  return true;
}

// A draft heads' tree (drafted at the collect to its full depth), cut to `budget` levels:
// nodes are in breadth-first order.
Candidates CutTree(const engine::DraftHeads::Tree& t, int budget) {
  size_t keep = 0;
  while (keep < t.depth.size() && t.depth[keep] <= budget) ++keep;
  const auto end = static_cast<std::ptrdiff_t>(keep);
  Candidates c;
  c.token.assign(t.token.begin(), t.token.begin() + end);
  c.parent.assign(t.parent.begin(), t.parent.begin() + end);
  c.depth.assign(t.depth.begin(), t.depth.begin() + end);
  return c;
}

}  // namespace

size_t EngineLoop::AcceptTreePath(const Candidates& c, const std::vector<int32_t>& path,
                                  kvcache::SeqId seq) {
  // Note where the accepted candidates' KV is, free the subtree, append them to the sample's
  // sequence and copy their KV there.
  std::vector<kvcache::SlotRef> from;
  std::vector<int32_t> tokens;
  for (int32_t n : path) {
    from.push_back(tree_.SlotAt(c.seq[n], c.base - 1 + c.depth[n]));
    tokens.push_back(c.token[n]);
  }
  size_t a = path.size();
  pool_.HoldFreed();
  for (kvcache::SeqId f : c.forks) {
    tree_.Truncate(f, c.base, &pending_copies_).IgnoreError();
    tree_.Release(f).IgnoreError();
  }
  if (a > 0) {
    auto placed = tree_.Extend(seq, tokens, /*allow_evict=*/false);
    if (placed.ok()) {
      pending_copies_.insert(pending_copies_.end(), placed->copies.begin(), placed->copies.end());
      for (size_t j = static_cast<size_t>(placed->matched_tokens); j < a; ++j) {
        const kvcache::SlotRef to = placed->new_slots[j - placed->matched_tokens];
        pending_copies_.push_back(kvcache::ChunkCopy{.src = from[j].chunk, .dst = to.chunk,
                                                     .slot_begin = from[j].slot,
                                                     .slot_end = from[j].slot + 1,
                                                     .dst_begin = to.slot});
      }
    } else {
      a = 0;  // no room for them now: keep only the root's draw, which is always right
    }
  }
  pool_.ReleaseHeld();
  return a;
}

void EngineLoop::PlaceSampleCandidates(engine::DecodeItem& d, Live& l, size_t k, Candidates c,
                                       int* token_room, PlacedStep* step, StepSpeculation* spec,
                                       std::vector<engine::DecodeItem>* rows,
                                       std::vector<int32_t>* row_nodes) {
  Live::Sample& s = l.samples[k];
  const int32_t drafted = static_cast<int32_t>(c.token.size()) - 1;
  if (drafted <= 0 || drafted > *token_room) return;
  c.base = tree_.Length(d.seq);
  c.seq.assign(c.token.size(), d.seq);
  std::vector<uint8_t> write(c.token.size(), 1);
  if (IsChain(c)) {
    auto placed = tree_.Extend(d.seq, std::span(c.token).subspan(1), /*allow_evict=*/false);
    if (!placed.ok()) return;  // no room for candidates: decode plainly
    step->copies.insert(step->copies.end(), placed->copies.begin(), placed->copies.end());
    for (int32_t n = 1; n <= drafted; ++n) write[n] = n - 1 >= placed->matched_tokens;
  } else {
    if (!PlaceTree(tree_, d.seq, &c, &write, &step->copies)) {
      if (c.forks.empty()) return;
      s.cand = std::move(c);
      DropCandidates(l, k);  // no room for the tree: decode plainly
      return;
    }
    for (kvcache::SeqId f : c.forks) step->owner[f] = {&l, k};
  }
  *token_room -= drafted;
  d.length = c.base;  // next_token's row is the root's
  // Each candidate row samples with the state of its position: the parent's, having drawn
  // the candidate's own token.
  std::vector<const engine::SequenceSamplingState*> state(c.token.size(), &s.sampling);
  for (int32_t n = 1; n <= drafted; ++n) {
    engine::SequenceSamplingState& st = spec->row_states.emplace_back(*state[c.parent[n]]);
    st.Accept(c.token[n]);
    state[n] = &st;
    rows->push_back(engine::DecodeItem{
        .seq = c.seq[n], .write_kv = write[n] != 0,
        .sample = {.row = 0, .params = &l.req.params, .state = &st},
        .length = c.base + c.depth[n]});
    row_nodes->push_back(n);
  }
  s.cand = std::move(c);
  s.cand.row.assign(s.cand.token.size(), -1);
}

void EngineLoop::PlaceCandidates(int token_room, PlacedStep* step, StepSpeculation* spec) {
  std::vector<engine::DecodeItem> rows;
  std::vector<int32_t> row_nodes;
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  const int32_t chunks_before = pool_.chunks_used();
  for (size_t r = 0; r < step->decode.size(); ++r) {
    engine::DecodeItem& d = step->decode[r];
    auto [l, k] = step->owner.at(d.seq);
    Live::Sample& s = l->samples[k];
    // A grammar's mask for a candidate's row would need the matcher advanced along the draft:
    // constrained samples do not speculate (yet), nor those a trigger may constrain.
    if (l->req.constraint != nullptr) continue;
    if (s.SpeculationPaused()) continue;
    const int budget = std::min({heads ? static_cast<int>(draft_branching_.size())
                                       : options_.draft_tokens,
                                 l->req.params.max_tokens - static_cast<int>(s.generated.size()) - 1,
                                 config_.max_seq_len - tree_.Length(d.seq)});
    if (budget <= 0) continue;
    Candidates c;
    if (heads) {
      engine::DraftHeads::Tree& t = s.drafted;
      if (t.token.empty() || t.token[0] != s.next_token) continue;
      c = CutTree(t, budget);
      t = {};
    } else {
      c = ChainOf(s.next_token, DraftFor(*l, k, budget));
    }
    PlaceSampleCandidates(d, *l, k, std::move(c), &token_room, step, spec, &rows, &row_nodes);
  }
  tree_.EndPacking();
  // The roots: node 0 of their sample's candidates.
  std::vector<int32_t>& item_node = spec->item_node;
  item_node.assign(step->decode.size(), -1);
  for (size_t r = 0; r < step->decode.size(); ++r) {
    auto [l, k] = step->owner.at(step->decode[r].seq);
    if (!l->samples[k].cand.empty()) {
      item_node[r] = 0;
      ++stats_.speculating_samples;
    }
  }
  stats_.candidate_chunks += std::max(0, pool_.chunks_used() - chunks_before);
  step->decode.insert(step->decode.end(), rows.begin(), rows.end());
  item_node.insert(item_node.end(), row_nodes.begin(), row_nodes.end());
}

}  // namespace banyan::scheduler
