// Two-phase-partition (TPP) decode attention on the GPU, and the plain per-sequence paged decode
// kernel (the `paged` baseline and fallback), host API.
//
// Plan and run are apart:
//  - TppWorkPlan::Build (host, once per plan shape) turns an attention plan (kvcache/
//    attention_plan.h, passed as the raw int32 arrays of kernels::PlanView) into a work
//    partition: phase-1 items (segment, KV split, M tile), phase-2 items (row, private-span
//    split), the partial states each writes and the list each row merges. Everything the kernels
//    read is one int32 image, uploaded as is (one copy). Which kernels, how far to split and how
//    long the pieces are is the cost model's choice (tpp_cost_model.h, a pure function); Build
//    cuts and packs what it chose.
//  - TppDecodeAttention (run) only launches: no host sync, no allocation, so a CUDA graph can
//    capture it. Grid sizes come from the host-side plan; the device reads the uploaded image.
//
// Between shape changes, kvcache::AdvanceLengths only moves span ends of rows' private tails;
// UpdateSpanEnds() patches them into the image (re-upload span_end_range() only). Splits are cut
// at span boundaries, so the partition stays valid as lengths advance within a chunk.
//
// Kernels (see docs/tpp.md):
//  - phase 1, per (item, kv head): queries of the segment's rows x the g query heads of the kv
//    head are the M dimension of tensor-core MMAs (fp32 accumulation), in tiles of 64 or 128:
//    wgmma m64n64k16 on sm_90 devices (one warpgroup per 64 queries), mma.sync m16n8k16
//    elsewhere; K/V tiles staged in shared memory by cp.async (2-4 stages); online softmax; writes a
//    partial (o, lse) per (row, q head, split).
//  - phase 2, per (row split, kv head): attends its private spans (16-byte cp.async into a
//    4-stage shared-memory pipeline, g heads share each K/V load), then merges the row's phase-1
//    partials by log-sum-exp and normalises; rows whose private tail was split write a partial
//    and a small merge kernel finishes them. With programmatic dependent launch, phase 2 starts
//    while phase 1 runs and waits only before it reads phase-1 partials. When both phases are
//    long (deferred merge), phase 2 never waits: it runs beside phase 1 on a side stream and
//    the merge kernel finishes every row with segments.
//  - with no segments only phase 2 (and the merge, for split rows) runs: that is the paged kernel.
//  - head dims without a templated family (TppHasCompiledFamily) never run phase 1: each row
//    reads its segments' spans in phase 2 as pieces of its own (phase2_generic.cuh).
//
// Shapes: q and out [num_rows][num_q_heads][head_dim] in the KV dtype. Any batch, any GQA ratio
// (num_q_heads % num_kv_heads == 0), head_dim a multiple of 8 up to 256, bf16 or fp16. Empty states (lse = -inf)
// merge without NaN; a row with no context gets zeros. The dtype (DType, kernels/cuda/dtype.h)
// and the KV view (KvViewDev, kernels/paged_views.h) are the ones of the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/paged_views.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/graph_update.h"
#include "kernels/paged_views.h"

namespace banyan::kernels::cuda::tpp {

// The phase-1 kernel family a work plan is built for and launched with.
enum class Phase1Path {
  kMmaSync,          // mma.sync m16n8k16, any sm_90 device
  kWgmma,            // wgmma (sm_90a): warp-specialised for 128-query tiles
  kWgmmaCooperative  // wgmma without warp specialisation (measurement baseline)
};

// The phase-2 kernel (the private tails; also the paged kernel) a work plan is launched with.
enum class Phase2Path {
  kCudaCores,    // phase2.cuh: a CTA per (item, kv head, group of 1-8 q heads), FFMA dot products
  kTensorCores,  // phase2_mma.cuh: a CTA per (item, kv head, 16 q heads), mma.sync (GQA >= 4)
  kWarpPerHead,  // phase2_warp.cuh: a warp per (item, kv head, <= 4 q heads), no shared memory
  kGeneric       // phase2_generic.cuh: a warp per (item, q head), any head_dim (no compiled family)
};

// Partial states a merge loads at once (phase2.cuh's MergeList); the split model counts the
// merge's rounds of dependent loads with it.
inline constexpr int kTppMergeAhead = 4;

struct TppProblem {
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t chunk_size = 0;
};

// Knobs of the work partition. The defaults are what the H200 measurements chose (docs/tpp.md).
struct TppOptions {
  int32_t num_sms = 132;             // multiprocessors of the device (cudaDevAttrMultiProcessorCount)
  int32_t p1_block_m = 0;  // phase-1 queries per CTA (4 warps x 16 or 32 rows): 0 auto, 64, 128
  int32_t p1_min_split_tokens = 128;  // phase-1 KV splits are never shorter than this
  int32_t p1_max_splits = 64;
  // > 0: the longest segment takes this many phase-1 splits (the others in proportion, within
  // the limits above) instead of the split model's choice; for benchmarks that sweep it.
  int32_t p1_splits = 0;
  // Phase-2 splits: a private tail is cut into pieces of at least p2_min_split_tokens (short
  // enough that one row alone fills the SMs), into at most p2_max_splits (a row's merge reads its
  // states a few at a time, one memory latency per kTppMergeAhead states, so many pieces cost
  // more than they gain); the measurements: docs/tpp.md, "The cost model's numbers".
  int32_t p2_min_split_tokens = 256;
  int32_t p2_ctas_per_sm = 4;  // phase-2 split target: at most this many CTAs per SM
  int32_t p2_max_splits = 16;
  int32_t p2_max_split_tokens = 0;     // > 0: private-tail pieces are at most this long
  // Phase-2 cp.async pipeline depth: 3 stages hide a tile's load behind two others' compute; 2
  // stages take a third less shared memory, so more CTAs fit on an SM, which is what short
  // tails need (a CTA then waits on latency, not bandwidth). 0: 2 when no phase-2 item is
  // longer than eight tiles (256 tokens at head_dim 128) when the plan is built, else 3
  // (docs/tpp.md, "The cost model's numbers").
  int32_t p2_stages = 0;
  // Phase 2 on tensor cores (phase2_mma.cuh: the CTA's query heads are the M dimension of
  // mma.sync, 16 at a time) instead of CUDA cores. -1: when the group is 4 or more query heads
  // per kv head (where the CUDA-core kernel is instruction-bound) and the rows' private tails
  // average 64 tokens or more (shorter ones are latency-bound, where the CUDA-core kernel's
  // smaller CTAs win); 0 never; 1 whenever g >= 2.
  int32_t p2_mma = -1;
  // Phase 2 one warp per (item, kv head, up to 4 of its q heads) (phase2_warp.cuh) where tensor
  // cores are not used. -1: when the rows' private tails average at most p2_warp_max_mean_tail
  // tokens (the CTA kernels are latency-bound there) and there are enough warps (see
  // tpp_cost_model.h, rule 5); 0 never; 1 always.
  int32_t p2_warp = -1;
  int32_t p2_warp_max_mean_tail = 128;
  bool pdl = true;  // programmatic dependent launch of phase 2 (overlaps phase 1)
  // Deferred merge: phase 2 never waits for phase 1 (every row with segments writes a partial
  // and the merge kernel finishes it), so the two phases can run concurrently on two streams
  // (TppRunArgs::side_stream). -1: when the cost model says the overlap pays; 0: never; 1: always.
  int32_t defer_merge = -1;
  // Phase-1 tensor-core path: 1 wgmma (sm_90a kernels, compute capability 9.0 only; elsewhere
  // the launch fails; M tile 128 on the warp-specialised kernel), 2 wgmma without warp
  // specialisation, 0 mma.sync (any sm_90+ device), -1 wgmma where the device runs it.
  int32_t p1_wgmma = -1;
};

// Offsets (in int32 elements) of the arrays inside the uploaded image.
struct TppImageLayout {
  int64_t span_chunk = 0, span_begin = 0, span_end = 0;
  int64_t seg_row_begin = 0, seg_row_end = 0;
  int64_t p1_seg = 0, p1_span_lo = 0, p1_span_hi = 0, p1_m_begin = 0, p1_state = 0;
  int64_t p2_row = 0, p2_span_lo = 0, p2_span_hi = 0, p2_state = 0;
  int64_t row_merge_begin = 0, row_merge_end = 0, merge_states = 0;
  int64_t merge_rows = 0;
};

class TppWorkPlan {
 public:
  // `plan` needs span_*, seg_row_*, seg_span_*, row_span_*, row_seg_* (seg_partial_offset and
  // num_partials are not used: phase-1 states are numbered per split here).
  static absl::StatusOr<TppWorkPlan> Build(const PlanView& plan, const TppProblem& problem,
                                           const TppOptions& options = {});

  // The int32 tables the kernels read; upload as is, 16-byte aligned.
  const std::vector<int32_t>& image() const { return image_; }
  size_t image_bytes() const { return image_.size() * sizeof(int32_t); }
  // Device workspace for partial states: o fp32 [num_states][num_q_heads][head_dim], then
  // lse fp32 [num_states][num_q_heads]. 256-byte aligned pieces.
  size_t workspace_bytes() const;

  // After kvcache::AdvanceLengths: copies the plan's span ends into the image. Only the
  // [span_end_offset_bytes, + span_end_bytes) range of the image changes.
  void UpdateSpanEnds(const int32_t* span_end);
  size_t span_end_offset_bytes() const { return layout_.span_end * sizeof(int32_t); }
  size_t span_end_bytes() const { return static_cast<size_t>(num_spans_) * sizeof(int32_t); }

  const TppProblem& problem() const { return problem_; }
  const TppOptions& options() const { return options_; }
  const TppImageLayout& layout() const { return layout_; }
  int32_t num_rows() const { return num_rows_; }
  int32_t num_segments() const { return num_segments_; }
  int32_t num_p1_items() const { return num_p1_; }
  int32_t num_p2_items() const { return num_p2_; }
  int32_t num_merge_rows() const { return num_merge_rows_; }
  int32_t num_states() const { return num_states_; }
  int32_t p1_block_m() const { return p1_block_m_; }
  // TppOptions::p1_wgmma resolved at Build (for -1: on the current device); the split model and
  // the launch both follow it.
  Phase1Path p1_path() const { return p1_path_; }
  Phase2Path p2_path() const { return p2_path_; }
  int32_t p2_head_group() const { return p2_group_; }   // q heads per phase-2 CTA (CUDA cores
                                                        // 1,2,4,8; tensor cores 16) or per
                                                        // warp (warp per head: 1,2,4)
  int32_t p2_head_groups() const { return p2_groups_; } // phase-2 CTAs per (row split, kv head)
  // Phase-2 grid: num_p2_items() x p2_grid_y().
  int32_t p2_grid_y() const;
  int32_t p2_stages() const { return p2_stages_; }      // phase-2 pipeline depth (2 or 3)
  int32_t max_p1_splits() const { return max_p1_splits_; }
  int32_t max_p2_splits() const { return max_p2_splits_; }
  bool deferred_merge() const { return deferred_; }

 private:
  TppProblem problem_;
  TppOptions options_;
  TppImageLayout layout_;
  std::vector<int32_t> image_;
  int32_t num_rows_ = 0, num_segments_ = 0, num_spans_ = 0;
  int32_t num_p1_ = 0, num_p2_ = 0, num_merge_rows_ = 0, num_states_ = 0;
  int32_t p1_block_m_ = 64, p2_group_ = 1, p2_groups_ = 1, p2_stages_ = 3;
  Phase1Path p1_path_ = Phase1Path::kMmaSync;
  Phase2Path p2_path_ = Phase2Path::kCudaCores;
  int32_t max_p1_splits_ = 0, max_p2_splits_ = 0;
  bool deferred_ = false;
};

struct TppRunArgs {
  const void* q = nullptr;  // [num_rows][num_q_heads][head_dim]
  void* out = nullptr;      // [num_rows][num_q_heads][head_dim]
  KvViewDev kv;
  DType dtype = DType::kBf16;
  float scale = 0.0f;              // softmax scale, usually 1/sqrt(head_dim)
  const int32_t* image = nullptr;  // device copy of TppWorkPlan::image()
  void* workspace = nullptr;       // TppWorkPlan::workspace_bytes(), 256-byte aligned
  // Optional, for plans with deferred_merge(): phase 2 runs on side_stream concurrently with
  // phase 1 (fork and join through the two events, created with cudaEventDisableTiming; graph
  // capture turns them into parallel branches). Without them the kernels run in order.
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr;
  cudaEvent_t join_event = nullptr;
};

// Runs TPP decode attention. Returns InvalidArgument for an unsupported head_dim / dtype or a
// view that does not match the plan's problem; Internal for a CUDA launch error.
absl::Status TppDecodeAttention(const TppWorkPlan& plan, const TppRunArgs& args,
                                cudaStream_t stream);

// The plain per-sequence paged kernel: the same launches over a plan built without sharing.
// Returns InvalidArgument when the plan has segments.
absl::Status PagedDecodeAttention(const TppWorkPlan& plan, const TppRunArgs& args,
                                  cudaStream_t stream);

// CUDA graphs (kernels/cuda/graph_update.h): a captured TppDecodeAttention or
// PagedDecodeAttention launch runs another plan without capturing again when both plans have
// the same launch signature (the same kernels, launched the same way: which phases run, the
// phase-1 path and M tile, the phase-2 head group, the merge schedule and the side-stream fork).
// Grids, the image's table offsets and the partial-state layout may differ: TppNodeUpdates
// lists them for `plan` with `args`'s image and workspace (the captured KV views are kept).
std::vector<int64_t> TppLaunchSignature(const TppWorkPlan& plan, const TppRunArgs& args);
absl::Status TppNodeUpdates(const TppWorkPlan& plan, const TppRunArgs& args,
                            std::vector<KernelNodeUpdate>* updates);

// True when TPP runs this head_dim: a multiple of 8 up to 256. Head dims with a compiled family
// (TppHasCompiledFamily) run every kernel above; the others run their plans in phase 2 alone, on
// the generic kernel (TppWorkPlan::Build reads every row's segments there).
bool TppSupportsHeadDim(int32_t head_dim);
// True when this library was built with the templated kernels for the head_dim (64 and 128 by
// default, BANYAN_TPP_HEAD_DIMS).
bool TppHasCompiledFamily(int32_t head_dim);

// True when phase 1 can run on wgmma here: the sm_90a kernels are built in and the current
// device has compute capability 9.0. Cached per device (tpp_phase1_sm90a.cu).
bool TppPhase1WgmmaAvailable();

}  // namespace banyan::kernels::cuda::tpp
