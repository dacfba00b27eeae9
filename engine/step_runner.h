// StepRunner: carries out one engine step whose tokens the caller has already placed in the
// prefix tree: the "run" stage of the one engine loop (scheduler/engine_loop.h).
//
// Order of work (see kvcache/prefix_tree.h on uncomputed tokens):
//  1. the split copies of all placements are applied;
//  2. every new token's slot is read from the tree *now*, after all placements;
//  3. decode rows are put in tree DFS order and the AttentionPlan is rebuilt only when the tree's
//     shape version or the row set changed (otherwise its lengths are advanced). This is the one
//     reuse decision: the plan's build_id carries it to the backend (kvcache/attention_plan.h);
//  4. one forward pass runs, with sampling on the backend (Backend::ForwardSample): only the
//     sampled tokens come back.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <deque>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/backend.h"
#include "kvcache/attention_plan.h"
#include "kvcache/prefix_tree.h"

namespace banyan::engine {

// A sequence that got one new token (its last) this step.
struct DecodeItem {
  kvcache::SeqId seq;
  bool write_kv = true;  // false: the token's KV was reused from the tree
  SampleSpec sample;     // how to sample the row (row is filled in by the runner)
  // 0: the row is the sequence's last token. > 0: a candidate row of speculative verification,
  // for the token at position length - 1, attending to the sequence's first `length` tokens; a
  // sequence may have several such rows (its candidate chain), each sampled.
  int32_t length = 0;
  // >= 0: a fed row (Backend::LaunchSample's feed): the sequence's last token is pending in the
  // tree (PrefixTree::AppendPending) and is the token the step launched just before sampled for
  // its spec `feed`. -1: the token is in the tree.
  int32_t feed = -1;
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
  // With want_logits: the samples drawn from the last token's row (the n samples of a prompt,
  // each with its own state); row is filled in by the runner.
  std::vector<SampleSpec> samples;
};

struct StepOutput {
  std::vector<kvcache::SeqId> decode_rows;  // the decode sequences in the order of the rows
  std::vector<int32_t> decode_items;        // for each row, its DecodeItem's index in `decode`
  // The sampled tokens: one per decode row in decode_rows order, then each PrefillItem's
  // samples in order.
  std::vector<SampleResult> samples;
  // RunLogits only: [rows, vocab], the decode rows first, then each PrefillItem with
  // want_logits, in order.
  std::vector<float> logits;
  // Wall time of the backend's calls: the forward pass, or LaunchSample plus the wait in
  // CollectSample.
  double forward_seconds = 0;
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
  // Run in two halves (Backend::LaunchSample / CollectSample): Launch fills out->decode_rows and
  // starts the step; Collect fills out->samples once the step is done. Between them the tree may
  // change (sequences released; placements only for a step launched before this one is
  // collected), and nothing else may run on the backend. Up to Backend::kMaxStepsInFlight steps
  // may be launched before the first is collected; Collect takes them in launch order.
  // With `late_sampling`, Launch starts the forward pass only (Backend::LaunchForward): the
  // step's samples are completed and launched by FinishLaunch, before anything else launches
  // and before the step is collected.
  absl::Status Launch(std::span<const kvcache::ChunkCopy> copies,
                      std::span<const DecodeItem> decode, std::span<const PrefillItem> prefill,
                      StepOutput* out, bool late_sampling = false);
  // The sampling of the step Launch started with late_sampling (Backend::LaunchSampling):
  // `complete(seq, spec)` is called for each decode row's spec (row filled in, the rest as
  // launched) to finish it, e.g. with its token mask and step_ahead 0 once the step before's
  // tokens are taken; the prompts' samples are launched as they were given. On failure the step
  // is dropped (Collect never returns it).
  absl::Status FinishLaunch(absl::FunctionRef<void(kvcache::SeqId seq, SampleSpec* spec)> complete);
  // Before FinishLaunch: where `count` token masks of `words` words each may be written for it
  // to upload without a copy (Backend::MaskStaging); empty when none awaits or the backend has
  // no such place.
  std::span<uint64_t> MaskStaging(int32_t count, int64_t words) {
    return late_pending_ ? backend_->MaskStaging(count, words) : std::span<uint64_t>{};
  }
  // The sequences whose specs FinishLaunch will complete, in its order (empty when none awaits).
  std::span<const kvcache::SeqId> late_seqs() const { return late_seqs_; }
  // Whether a step launched with late_sampling awaits FinishLaunch.
  bool awaits_sampling() const { return late_pending_; }
  absl::Status Collect(StepOutput* out);
  // The same step returning the logits instead of sampling (tests compare them across
  // backends); the items' sampling specs are ignored.
  absl::Status RunLogits(std::span<const kvcache::ChunkCopy> copies,
                         std::span<const DecodeItem> decode, std::span<const PrefillItem> prefill,
                         StepOutput* out);

  const StepStats& stats() const { return stats_; }

 private:
  // Steps 1-3: the copies applied, the batch and the specs (rows filled in) built.
  absl::Status Prepare(std::span<const kvcache::ChunkCopy> copies,
                       std::span<const DecodeItem> decode, std::span<const PrefillItem> prefill,
                       bool sample, StepBatch* batch, std::vector<SampleSpec>* specs,
                       StepOutput* out);

  Backend* backend_;
  kvcache::PrefixTree* tree_;
  kvcache::PlanOptions plan_options_;
  kvcache::AttentionPlan plan_;
  // Reused from step to step so that a step's rows cost no allocations once the batch size has
  // been seen (a decode row's vectors keep their capacity).
  StepBatch batch_;
  std::vector<SampleSpec> specs_;
  absl::flat_hash_map<kvcache::SeqId, int32_t> rank_;  // decode sequence -> rank in DFS order
  std::vector<const DecodeItem*> items_;              // the rows' items, in row order
  std::vector<int32_t> lengths_;                      // candidate rows: each row's context
  std::vector<int32_t> feed_;                         // fed rows: per row, -1 or the feed
  // A step launched with late_sampling: its decode rows' sequences, in row order (specs_ holds
  // its specs until FinishLaunch).
  std::vector<kvcache::SeqId> late_seqs_;
  bool late_pending_ = false;
  StepStats stats_;
  // Per step launched and not collected, oldest first: whether it reached the backend (a step
  // with no rows does not).
  std::deque<bool> launched_;
};

}  // namespace banyan::engine
