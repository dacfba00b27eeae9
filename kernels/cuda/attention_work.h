// Host-side work lists for the CUDA attention kernels: the plan is turned into flat int32 arrays
// once per step on the CPU, uploaded as they are, and the kernels only launch over them.
//
// Decode. Every row's context is the tokens of its phase-1 segments (in the order of
// row_seg_ids) followed by its private spans: a plan built with or without sharing gives the same
// attention, only read order differs. The paged kernel reads each row's whole context itself
// (shared chunks once per row). The context is cut into *items* of at most `item_tokens` tokens
// (a span crossing a cut is cut too). Each item is one CTA per (kv head, head tile); a row of
// several items writes partial states that a merge kernel combines by log-sum-exp. The cut
// depends only on the row's own length, never on the batch, so a row's result does not depend
// on what else is in the batch.
//
// Prefill. Each sequence's spans cover positions [0, pos0 + num_q) in position order; span_pos
// gives the position of each span's first token. The tensor-core kernel works on tiles of
// block_m packed rows, a packed row being (new token j, q head k of the kv head) = j * group + k.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/attention_params.h"

namespace banyan::kernels::cuda {

inline constexpr int32_t kDefaultItemTokens = 256;

struct DecodeWork {
  // Spans of all items, concatenated.
  std::vector<int32_t> span_chunk, span_begin, span_end;
  // Items: row, spans [item_span_begin, item_span_end), and the partial state it writes, or -1
  // when the row has a single item (which then writes the row's output directly).
  std::vector<int32_t> item_row, item_span_begin, item_span_end, item_partial;
  // Rows with several items: their partials are [merge_partial_begin, + merge_count).
  std::vector<int32_t> merge_row, merge_partial_begin, merge_count;
  int32_t num_partials = 0;
  int32_t num_rows = 0;

  int32_t num_items() const { return static_cast<int32_t>(item_row.size()); }
  int32_t num_merge_rows() const { return static_cast<int32_t>(merge_row.size()); }
};

// Builds the decode work of `plan` (with or without segments). item_tokens >= 1.
void BuildDecodeWork(const PlanView& plan, int32_t item_tokens, DecodeWork* work);

// One prefill sequence of a step.
struct PrefillSeq {
  std::span<const int32_t> span_chunk, span_begin, span_end;  // positions [0, pos0 + num_q)
  int32_t pos0 = 0;   // position of the first new token
  int32_t num_q = 0;  // new tokens
  int32_t q_row = 0;  // row of the first new token in the step's q / out arrays
};

struct PrefillWork {
  std::vector<int32_t> span_chunk, span_begin, span_end, span_pos;  // all sequences' spans
  std::vector<int32_t> seq_span_begin, seq_span_end, seq_pos0, seq_num_q, seq_q_row;
  // Tensor-core kernel tiles, the longest (latest) first: (sequence, first packed row).
  std::vector<int32_t> tile_seq, tile_m0;
  // Generic kernel: the sequence of each new token, in q-row order starting at q_row_begin.
  std::vector<int32_t> token_seq;
  int32_t q_row_begin = 0;
  int32_t num_tokens = 0;

  int32_t num_seqs() const { return static_cast<int32_t>(seq_pos0.size()); }
  int32_t num_tiles() const { return static_cast<int32_t>(tile_seq.size()); }
};

// Sequences must occupy consecutive q rows in order. group = q heads per kv head.
void BuildPrefillWork(std::span<const PrefillSeq> seqs, int32_t group, int32_t block_m,
                      PrefillWork* work);

}  // namespace banyan::kernels::cuda
