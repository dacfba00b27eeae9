// The TPP cost model: which kernels a work plan runs, how long its pieces are, how far it splits,
// as a pure function of a plan's shape summary and the options (TppOptions). No I/O, no device
// queries: the device facts it needs (the compiled head-dim families, wgmma) come in the summary.
// TppWorkPlan::Build (tpp_work_plan.cc) summarizes the plan, asks ChooseTppConfig, then only
// executes the choices: it cuts spans and packs the work items and the image.
//
// The rules, numbered as the table test names them (tpp_cost_model_test.cc); the
// measurements behind the constants and thresholds are in docs/tpp.md, "The cost model's numbers".
//  1. Phase-1 path: TppOptions::p1_wgmma, -1 following the device (wgmma where it runs).
//  2. Phase-1 M tile: the option when 64 or 128; else 128 when the segments' token-weighted
//     query count per kv head is at least 128, else 64.
//  3. Phase-1 splits: one token length L for all segments (k_s ~ T_s / L within the minimum
//     length, the span count and p1_max_splits); L minimises the split model's time (below),
//     a longer split kept unless a shorter one is 3 % faster; p1_splits forces the count of the
//     longest segment.
//  4. Deferred merge: when both phases take longer than the merge plus 5 us (or forced).
//  5. Phase-2 kernel: the generic one without a compiled family; tensor cores for GQA >= 4 with
//     private tails of 64 tokens or more on average; a warp per (kv head, <= 4 q heads) for
//     short tails with enough warps, or for long tails that re-read common chunks on a full
//     machine; CUDA cores otherwise.
//  6. Phase-2 pieces: about p2_ctas_per_sm CTAs per SM in all, pieces of at least
//     p2_min_split_tokens (at most p2_max_split_tokens when set), at most p2_max_splits a range;
//     the count rounds down (the items stay within the CTA target) unless the length was capped.
//  7. Phase-2 pipeline depth: the option when 2 or 3; else 2 when the longest phase-2 item is at
//     most eight tiles, else 3; always 2 on the kernels without a pipeline.
//
// The split model of rule 3: for a length L,
//   time(L) = max(bytes(L) / (BW * min(1, items / slots)), flops / (RATE * wave efficiency),
//                 the largest CTA at one slot's share)
//             + items / slots * CTA + partials(L) / BW + merge rounds(L) * ROUND + waves * FILL,
// bytes = the shared KV once + the partial states written (they grow with k), items = CTAs =
// sum of k_s * M tiles * kv heads, merge rounds = ceil(longest merge list / kTppMergeAhead).
// So a segment is split only as far as needed to fill the SMs, and no further when its partials
// and their merge would cost more than the parallelism gains.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda::tpp {

// One segment phase 1 reads.
struct TppSegmentShape {
  int64_t tokens = 0;     // KV tokens of its spans
  int32_t spans = 0;      // spans (phase-1 splits are cut at span boundaries)
  int32_t row_begin = 0;  // its rows [row_begin, row_end), nested as subtrees in DFS order
  int32_t row_end = 0;
};

// What the cost model reads of a plan and of the device.
struct TppShapeSummary {
  int32_t num_rows = 0;
  // Phase-1 segments in plan order; empty on head dims without a compiled family.
  std::vector<TppSegmentShape> segments;
  int64_t private_tokens = 0;  // tokens of all rows' private spans
  // Tokens phase 2 reads over all rows: the private spans, and without a compiled family each
  // row's segments' spans too.
  int64_t phase2_tokens = 0;
  // Tokens the rows' private spans read per token of distinct chunk they touch: about 1 when
  // every row's tail is its own KV, about the row count when the rows read one common prefix as
  // private spans (a plan built without sharing); 0 without private spans.
  // Read only where TppReadsPrivateReuse (the summary may leave it 0 elsewhere).
  double private_reuse = 0.0;
  bool compiled_family = true;   // TppHasCompiledFamily(head_dim)
  bool wgmma_available = false;  // TppPhase1WgmmaAvailable(); read only for p1_wgmma -1
};

// What TppWorkPlan::Build executes.
struct TppChoices {
  // Phase 1 (rules 1-3).
  Phase1Path p1_path = Phase1Path::kMmaSync;
  int32_t p1_block_m = 64;
  std::vector<int32_t> p1_splits;  // per segment: the most pieces its spans are cut into
  double p1_seconds = 0.0;         // the split model's time of the chosen splits (0: no phase 1)
  // Rule 4.
  bool deferred_merge = false;
  // Phase 2 (rules 5, 6).
  bool p2_tensor_tiles = false;  // the tensor-core rule held (its 64-slot tiles set rule 7)
  Phase2Path p2_path = Phase2Path::kCudaCores;
  int32_t p2_head_group = 1;   // q heads per CTA (per warp on the warp kernel)
  int32_t p2_head_groups = 1;  // ceil(g / p2_head_group): head groups per kv head
  int64_t p2_split_tokens = 0;      // the piece length
  bool p2_length_capped = false;    // p2_max_split_tokens set it: counts round up
  int32_t p2_max_splits = 1;
};

// Rules 1-6.
TppChoices ChooseTppConfig(const TppShapeSummary& shape, const TppProblem& problem,
                           const TppOptions& options);

// Rule 6 for one span range of `tokens` tokens in `spans` spans: the most pieces to cut it into
// (at least 1).
int32_t TppPhase2Pieces(const TppChoices& choices, int64_t tokens, int32_t spans);

// Rule 7, once the pieces are cut: the longest phase-2 item reads about `longest_item_tokens`.
int32_t ChooseTppPhase2Stages(const TppChoices& choices, const TppProblem& problem,
                              const TppOptions& options, int64_t longest_item_tokens);

// Whether rule 5 reads TppShapeSummary::private_reuse: the warp kernel for long re-read tails is
// considered only on a full machine of warps (rows x kv heads x warps per kv head >= 4,096).
// Computing the reuse walks every private span, so the summary does it only then.
bool TppReadsPrivateReuse(const TppProblem& problem, int32_t num_rows);

// Phase-2 CTAs per row split (the grid's y): the CTA kernels one per (kv head, head group); the
// warp kernel four warps per CTA; the generic kernel four q heads per CTA.
int32_t TppPhase2GridY(Phase2Path path, int32_t head_groups, const TppProblem& problem);

}  // namespace banyan::kernels::cuda::tpp
