// InFlightStep: a step the engine loop launched, from its launch to its collect. It names the
// requests (LiveRequest) its rows belong to; those stay alive until the step is collected (the
// loop keeps retired requests until then).
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/sampler/sampler.h"
#include "engine/step_runner.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/loop/step_timing.h"

namespace banyan::scheduler {

struct LiveRequest;

// A decode row's sequence -> its request and sample.
using RowOwners = absl::flat_hash_map<kvcache::SeqId, std::pair<LiveRequest*, size_t>>;

// A fed step's rows: (sequence, spec of the step before that samples its pending token), set in
// the tree when the step before is collected.
using FedPatches = std::vector<std::pair<kvcache::SeqId, int32_t>>;

// A step's speculation (LoopOptions::Speculation).
struct StepSpeculation {
  // Per decode item: its node among the sample's candidates (0 the root), -1 without.
  std::vector<int32_t> item_node;
  // The sampling states of candidate rows (the sample's state advanced along the path).
  std::deque<engine::SequenceSamplingState> row_states;
  int size_class = -1;      // the step's size class when speculation could run, else -1
  bool speculated = false;  // the step had candidates
};

struct InFlightStep {
  bool active = false;
  bool fed = false;                  // launched before the step before was collected
  // A fed step with constrained rows: launched without its sampling, which FinishLateSampling
  // launches once the step before's tokens have moved the rows' grammars.
  bool late_sampling = false;
  bool collected_this_step = false;  // by the current Step (without overlap)
  engine::StepOutput out;
  RowOwners owner;                          // decode row -> sample
  std::vector<LiveRequest*> logit_owners;   // prompts whose last token's row is sampled, in order
  FedPatches patches;                       // a fed step's pending tokens
  int64_t decode_rows = 0;
  int64_t prefill_tokens = 0;
  StepSpeculation speculation;
  StepTimes times;
};

}  // namespace banyan::scheduler
