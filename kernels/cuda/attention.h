// CUDA attention kernels over the paged KV store (KvViewDev), driven by the work lists of
// attention_work.h (uploaded to the device as they are).
//
//  - PagedDecodeAttention: one query per row, one warp per (item, q head), online softmax in
//    fp32; rows cut into several items are merged by log-sum-exp. Any head_dim that is a
//    multiple of 8, up to 256. The engine runs it only for head dims the TPP kernels are not
//    built for (the bundled model's 8): for 64 and 128, decode attention with or without
//    sharing is kernels/cuda/tpp's (PagedDecodeAttention there is TPP's phase 2 alone).
//  - PrefillAttention: new tokens of prefill sequences attend causally over their cached path
//    plus themselves. head_dim 64 and 128: flash-attention-2 style with mma.sync tensor cores
//    (bf16/fp16 operands, fp32 accumulation; GQA heads packed into the M dimension); other head
//    dims: the generic kernel.
//
// q and out are [rows, num_q_heads, head_dim] in the cache dtype. Softmax scale 1/sqrt(d).
// A query with no context (cannot happen in a valid step) gets a zero output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/graph_update.h"
#include "kernels/cuda/kv_view.h"

namespace banyan::kernels::cuda {

// Device copies of DecodeWork's arrays (same meaning, same lengths).
struct PagedDecodeParams {
  const void* q = nullptr;  // [num_rows, num_q_heads, head_dim]
  void* out = nullptr;      // [num_rows, num_q_heads, head_dim]
  KvViewDev kv;
  const int32_t* span_chunk = nullptr;
  const int32_t* span_begin = nullptr;
  const int32_t* span_end = nullptr;
  const int32_t* item_row = nullptr;
  const int32_t* item_span_begin = nullptr;
  const int32_t* item_span_end = nullptr;
  const int32_t* item_partial = nullptr;
  const int32_t* merge_row = nullptr;
  const int32_t* merge_partial_begin = nullptr;
  const int32_t* merge_count = nullptr;
  int32_t num_items = 0;
  int32_t num_merge_rows = 0;
  int32_t num_q_heads = 0;
  float scale = 0.0f;           // softmax scale (natural units), usually 1/sqrt(head_dim)
  float* partial_o = nullptr;   // [num_partials, num_q_heads, head_dim] normalised
  float* partial_lse = nullptr;  // [num_partials, num_q_heads], log2 units; -inf when empty
};
absl::Status PagedDecodeAttention(DType dtype, const PagedDecodeParams& p, cudaStream_t stream);
// What a captured PagedDecodeAttention launch changes to run `p` instead (every field but the
// KV view, and the grids): kernels/cuda/graph_update.h. The merge kernel is listed only when `p`
// has merge rows (it is launched only then), so the updates fit a captured launch that had merge
// rows exactly when `p` has: callers key their graphs on that.
absl::Status PagedDecodeNodeUpdates(DType dtype, const PagedDecodeParams& p,
                                    std::vector<KernelNodeUpdate>* updates);

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
  int32_t num_tiles = 0;
  int32_t num_tokens = 0;
  int32_t q_row_begin = 0;
  int32_t num_q_heads = 0;
  float scale = 0.0f;
};
// Packed rows per tensor-core tile; BuildPrefillWork's block_m.
inline constexpr int32_t kPrefillBlockM = 64;
absl::Status PrefillAttention(DType dtype, const PrefillParams& p, cudaStream_t stream);

// True when head_dim takes a fast (templated) path.
bool HasFastAttentionPath(int32_t head_dim);
// Largest q-head tile of the decode kernel, for callers sizing grids.
inline constexpr int32_t kMaxGenericHeadDim = 256;

}  // namespace banyan::kernels::cuda
