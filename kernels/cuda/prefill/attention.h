// CUDA prefill attention over the paged KV store (KvViewDev), driven by the work lists of
// attention_work.h (uploaded to the device as they are). Decode attention, with or without
// sharing and for every head_dim, is kernels/cuda/tpp's.
//
//  - PrefillAttention: new tokens of prefill sequences attend causally over their cached path
//    plus themselves. head_dim 64 and 128: on Hopper (compute capability 9.0), warp-specialised
//    wgmma tiles of 128 packed rows (prefill_wgmma.cuh); elsewhere flash-attention-2 style with
//    mma.sync tensor cores in tiles of 64 (both, with a 16-bit or an FP8 cache;
//    bf16/fp16 operands, fp32 accumulation; GQA heads packed into the M dimension); other head
//    dims: the generic kernel. The work list's tile size (PrefillTileRows) picks the kernel.
//
// q and out are [rows, num_q_heads, head_dim] in the cache dtype. Softmax scale 1/sqrt(d).
// A query with no context (cannot happen in a valid step) gets a zero output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/paged_views.h"

namespace banyan::kernels::cuda {

// Device copies of PrefillWork's arrays.
struct PrefillParams {
  const void* q = nullptr;  // [step rows, num_q_heads, head_dim]; sequences at their seq_q_row
  void* out = nullptr;      // same shape
  KvViewDev kv;
  const int32_t* span_chunk = nullptr;
  const int32_t* span_begin = nullptr;
  const int32_t* span_end = nullptr;
  const int32_t* span_pos = nullptr;
  const int32_t* seq_span_begin = nullptr;
  const int32_t* seq_span_end = nullptr;
  const int32_t* seq_pos0 = nullptr;
  const int32_t* seq_num_q = nullptr;
  const int32_t* seq_q_row = nullptr;
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_m0 = nullptr;
  const int32_t* token_seq = nullptr;
  // The deterministic mode's pieces (PrefillWork's piece and group arrays, head dims 64 and
  // 128; null / 0 elsewhere): one CTA per item and kv head runs every piece of tile item_tile,
  // folded in order (the first num_fold_items items), or piece item_piece of its keys into
  // `state` (item_tile -1: nothing, padding);
  // a group tile's CTA runs its piece gtile_piece for every member's rows; then InvariantMerge's
  // CTA per merge_seq folds that sequence's pieces (gtile_group or merge_seq -1: padding). A piece state of (row j of sequence s, q
  // head h, piece k) is at ((seq_state[s] + j seq_pieces[s] + k) num_q_heads + h)
  // PrefillStateStride(head_dim) floats.
  const int32_t* item_tile = nullptr;
  const int32_t* item_piece = nullptr;
  const int32_t* seq_pieces = nullptr;
  const int32_t* seq_state = nullptr;
  const int32_t* merge_seq = nullptr;
  const int32_t* grp_first = nullptr;
  const int32_t* grp_count = nullptr;
  const int32_t* grp_members = nullptr;
  const int32_t* gtile_group = nullptr;
  const int32_t* gtile_m0 = nullptr;
  const int32_t* gtile_piece = nullptr;
  float* state = nullptr;
  int32_t num_items = 0;
  int32_t num_fold_items = 0;
  int32_t num_merge = 0;
  int32_t num_gtiles = 0;
  int32_t num_tiles = 0;
  int32_t block_m = 64;  // packed rows per tile of the work list (PrefillTileRows)
  int32_t num_tokens = 0;
  int32_t q_row_begin = 0;
  int32_t num_q_heads = 0;
  float scale = 0.0f;
};
// Packed rows per tile of the mma.sync kernel and of the wgmma kernel.
inline constexpr int32_t kPrefillBlockM = 64;
// Floats of a piece state in PrefillParams::state: the unnormalized output, the four partial sums
// of a row's quad of threads, the running max, padding.
constexpr int64_t PrefillStateStride(int32_t head_dim) { return head_dim + 8; }
// The deterministic mode's pieces (head dims 64 and 128): a row's keys are cut at fixed
// positions, every kInvariantPieceKeys, whatever the batch; each piece is summed alone (from an
// empty state) and the pieces' states are folded in position order. So a long context is summed
// by many CTAs at once and the order of every sum still depends only on the row's positions.
inline constexpr int32_t kInvariantPieceTiles = 8;  // key tiles of kPrefillBlockM keys
inline constexpr int32_t kInvariantPieceKeys = kInvariantPieceTiles * kPrefillBlockM;
inline constexpr int32_t kPrefillWgmmaBlockM = 128;
// The tile size PrefillAttention's work list should be built with (BuildPrefillWork's block_m,
// PrefillParams::block_m) for this cache on the current device: kPrefillWgmmaBlockM where the
// wgmma kernel runs, kPrefillBlockM elsewhere (the generic kernel reads no tiles).
int32_t PrefillTileRows(const KvViewDev& kv);
absl::Status PrefillAttention(DType dtype, const PrefillParams& p, cudaStream_t stream);

// The deterministic mode's attention: every token of the work list, decode rows included,
// attends to positions [0, its own] of its sequence's spans with sums whose order depends only on
// those positions, so its output is the same bit for bit in any batch, any cut of the context
// into spans or prefill chunks, and whether the token is decoded or prefilled. head_dim 64 and
// 128: the mma.sync tiles of PrefillAttention's kernel (tiles of kPrefillBlockM: build the work
// list with it), key pieces of kInvariantPieceKeys folded in order (see attention.cu for why the
// sums do not depend on the batch); other head dims:
// InvariantAttentionKernel (invariant_attention.cuh, CUDA cores; span_pos, the seq_* arrays and
// token_seq of the work list, not its tiles). Any head_dim the generic kernels take. Head dims
// 64 and 128 need the pieces of AddInvariantPieces (attention_work.h) and a state buffer of
// PrefillWork::state_slots x num_q_heads piece states.
absl::Status InvariantAttention(DType dtype, const PrefillParams& p, cudaStream_t stream);

// True when head_dim takes a fast (templated) path.
bool HasFastAttentionPath(int32_t head_dim);
// Largest head_dim of the generic kernels (GenericAttendWarp, generic_attention.cuh).
inline constexpr int32_t kMaxGenericHeadDim = 256;

}  // namespace banyan::kernels::cuda
