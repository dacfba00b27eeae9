// Exact two-phase-partition decode attention on the CPU (fp32), the reference for every other
// backend, and the plain per-sequence paged attention used as the `paged` baseline.
//
// TPP:
//  - Phase 1, per segment and kv head: the queries of rows [i, j) x the g query heads of that kv
//    head form one (j - i) * g by head_dim matrix; each K/V token of the segment is read once
//    for the whole matrix, with an online softmax. Output: a normalised partial (o, lse) per
//    (row, q head) of the segment.
//  - Phase 2, per row and q head: attend over the row's private spans, merge its phase-1
//    partials by log-sum-exp (Hydragen eq. 5), normalise.
//
// Empty states have lse = -inf and o = 0; merging two empty states stays empty (no NaN), and a
// row with no context at all gets o = 0.
#pragma once

#include "kernels/cpu/attention_params.h"

namespace banyan::kernels::cpu {

// Merges (o_b, lse_b) into (o_a, lse_a) in place, head_dim values each.
void MergeState(float* o_a, float* lse_a, const float* o_b, float lse_b, int head_dim);

// TPP decode attention. Uses every field of `p`.
void TppDecodeAttention(const DecodeAttentionParams& p);

// Per-sequence paged attention: every row reads its whole context from its own span list
// (a plan built without sharing: no segments). Independent of the TPP code path.
void PagedDecodeAttention(const DecodeAttentionParams& p);

// Prefill attention for one sequence: queries of positions [q_pos0, q_pos0 + num_q) attend
// causally over the sequence's spans (context + the new tokens, already written to the chunks),
// query j seeing the first q_pos0 + j + 1 tokens.
struct PrefillAttentionParams {
  const float* q = nullptr;  // [num_q, num_q_heads, head_dim]
  float* out = nullptr;      // [num_q, num_q_heads, head_dim]
  KvView kv;
  const int32_t* span_chunk = nullptr;  // the sequence's spans, in position order
  const int32_t* span_begin = nullptr;
  const int32_t* span_end = nullptr;
  int32_t num_spans = 0;
  int32_t q_pos0 = 0;
  int32_t num_q = 0;
  int32_t num_q_heads = 0;
  float scale = 0.0f;
  bool fixed_max = false;  // as DecodeAttentionParams::fixed_max
};
void PrefillAttention(const PrefillAttentionParams& p);

}  // namespace banyan::kernels::cpu
