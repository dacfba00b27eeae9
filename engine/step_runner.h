// StepRunner: carries out one engine step whose tokens the caller has already placed in the
// prefix tree. Shared by the batch Generator and the daemon's Scheduler.
//
// Order of work (see kvcache/prefix_tree.h on uncomputed tokens):
//  1. the split copies of all placements are applied;
//  2. every new token's slot is read from the tree *now*, after all placements;
//  3. decode rows are put in tree DFS order and the AttentionPlan is rebuilt only when the tree's
//     shape version or the row set changed (otherwise its lengths are advanced);
//  4. one forward pass runs.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend.h"
#include "kvcache/attention_plan.h"
#include "kvcache/prefix_tree.h"

namespace banyan::engine {

// A sequence that got one new token (its last) this step.
struct DecodeItem {
  kvcache::SeqId seq;
  bool write_kv = true;  // false: the token's KV was reused from the tree
};

// A sequence whose positions [begin, end) are new this step (prompt prefill, a chunk of it, or
// recompute after preemption).
struct PrefillItem {
  kvcache::SeqId seq;
  int32_t begin = 0;
  int32_t end = 0;
  // Positions below this were found cached (their KV exists and is not written). Lets a fully
  // cached prompt recompute its last token's logits without rewriting its KV.
  int32_t cached_end = 0;
  bool want_logits = true;
};

struct StepOutput {
  std::vector<kvcache::SeqId> decode_rows;  // the decode sequences in the order of the logits
  // [rows, vocab]: decode_rows first, then each PrefillItem with want_logits, in order.
  std::vector<float> logits;
};

struct StepStats {
  int64_t plan_builds = 0;
  int64_t plan_reuses = 0;
};

class StepRunner {
 public:
  StepRunner(Backend* backend, kvcache::PrefixTree* tree, AttentionMode mode);

  absl::Status Run(std::span<const kvcache::ChunkCopy> copies, std::span<const DecodeItem> decode,
                   std::span<const PrefillItem> prefill, StepOutput* out);

  const StepStats& stats() const { return stats_; }

 private:
  Backend* backend_;
  kvcache::PrefixTree* tree_;
  kvcache::PlanOptions plan_options_;
  kvcache::AttentionPlan plan_;
  StepStats stats_;
};

}  // namespace banyan::engine
