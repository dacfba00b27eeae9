// The placement stage of the engine loop: an IterationPlan (policy.h) becomes a placed step, the
// tree changed to hold it and the backend's work listed (copies, prefill items, decode rows, a
// fed step's patches), each row with its owner.
//
// Placement is where the policy's memory estimate meets the tree. When it falls short:
//  - a prompt that cannot be placed is preempted to retry later, or failed when nothing else
//    holds memory (waiting cannot help);
//  - decode appends that do not fit preempt the least important decoding request
//    (ChooseAppendVictim) and retry without it;
//  - a fed step's pending tokens that do not fit leave the step unfed (PlaceFedRows says so).
// What placement cannot do itself (preempting, failing, starting a prompt's samples, a
// constrained sample's mask) it asks of PlacementHooks, which the loop implements.
//
// Engine thread only, as the tree.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/step_runner.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/loop/in_flight.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/step_summary.h"
#include "scheduler/policy.h"

namespace banyan::scheduler {

class PlacementHooks {
 public:
  virtual ~PlacementHooks() = default;
  // The request's KV goes (to the cache); it waits to be resumed by recompute.
  virtual void Preempt(LiveRequest& live) = 0;
  // The request ends with `status` (an error).
  virtual void Fail(LiveRequest& live, absl::Status status) = 0;
  // The prompt's last token is placed: its n samples get their sampling states (the backend
  // samples their first tokens from the prompt's last row).
  virtual void StartSamples(LiveRequest& live) = 0;
  // The allowed tokens of a sample's next draw (vocab bits); empty without a constraint.
  virtual std::span<const uint64_t> MaskFor(LiveRequest& live, size_t sample) = 0;
  // Whether MaskFor can answer from cached classifications; if not, a worker is asked and the
  // sample sits out the step (PlaceDecodeAppends).
  virtual bool MaskReady(LiveRequest& live, size_t sample) = 0;
};

// A step as placed in the tree: what the backend runs, and whose rows they are.
struct PlacedStep {
  std::vector<kvcache::ChunkCopy> copies;  // run before any KV write of the step
  std::vector<engine::PrefillItem> prefill;
  std::vector<engine::DecodeItem> decode;
  RowOwners owner;                         // every decode row's sample
  std::vector<LiveRequest*> logit_owners;  // prompts whose last token's row is sampled, in order
  FedPatches patches;                      // a fed step's rows (PlaceFedRows)
  bool late_sampling = false;  // a fed row is constrained: its mask waits for its fed token
  int64_t prompt_tokens = 0;      // prompt tokens placed (cached ones included)
  int64_t cache_hit_tokens = 0;   // of which the prefix cache held
  int64_t PrefillTokens() const;  // prompt tokens the backend computes
};

// Places up to `tokens` prompt tokens of `live` (at least one; or, resuming, every running
// sample's tokens). An error leaves what was placed for the request in the tree (the caller
// preempts or fails it) and may leave copies in `step`; items and logit owners it added are
// for the caller to drop.
absl::Status PlacePrefill(kvcache::PrefixTree& tree, LiveRequest& live, int32_t tokens,
                          PlacementHooks& hooks, PlacedStep* step);

// The plan's prefill, in its order. `running`: to tell whether a request that cannot be placed
// is alone (failed) or can wait (preempted).
void PlacePrompts(kvcache::PrefixTree& tree, const IterationPlan& plan, const ByHandle& by_handle,
                  std::span<const LivePtr> running, PlacementHooks& hooks, PlacedStep* step);

// A prompt's samples from its sequence (Fork; samples[0] keeps its id), once.
absl::Status MakeSamples(kvcache::PrefixTree& tree, LiveRequest& live);

enum class FedPlacement {
  kPlaced,  // the fed rows are in `step` (or there are none and prompts are placed)
  kNotFed,  // nothing was changed for decode: the caller takes the step before's tokens first
  kShort,   // prompts are placed but the pool cannot hold the pending tokens: unfed after all
};

// The plan's decode rows as fed rows of a step launched while `before` runs: each sample's next
// token is pending in the tree, the token `before` samples for it. A prompt whose first token
// `before` samples decodes on its prompt's sequence (n > 1: its samples are forked first). A
// sample whose last token `before` samples (max_tokens) gets no row.
FedPlacement PlaceFedRows(kvcache::PrefixTree& tree, const IterationPlan& plan,
                          const ByHandle& by_handle, const InFlightStep& before,
                          PlacedStep* step);

// The plan's decode rows, their tokens in hand: one AppendBatch, so that agreeing samples keep
// sharing their node; preempt-and-retry while it does not fit. A constrained sample whose next
// mask is not classified yet sits out (no row: its token stays next_token, its sampling state
// does not move, so it draws later what it would have drawn now) unless the step would then run
// nothing at all, where waiting for the mask costs no other row anything.
void PlaceDecodeAppends(kvcache::PrefixTree& tree, const IterationPlan& plan,
                        const ByHandle& by_handle, PlacementHooks& hooks, PlacedStep* step);

}  // namespace banyan::scheduler
