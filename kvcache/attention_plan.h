// AttentionPlan: the two-phase-partition (TPP) work list for one decode batch (the "context").
//
// Given batch rows (live sequences, ideally in PrefixTree::DfsOrder), the plan lists:
//  - chunk spans: runs of token slots [span_begin, span_end) inside chunk span_chunk;
//  - phase-1 segments: maximal runs of tree nodes whose rows in this batch are exactly the same
//    contiguous row range [seg_row_begin, seg_row_end) with at least 2 rows. A segment spans all
//    the chunks of such a node chain (a whole shared prefix path, not one chunk). Its spans are
//    [seg_span_begin, seg_span_end);
//  - per row: its private spans [row_span_begin, row_span_end) (nodes no other batch row reads,
//    or shared nodes whose rows are not contiguous in this row order, which are then read per
//    row: correct for any order, optimal for DFS order), the segments it belongs to
//    (row_seg_ids[row_seg_begin[r] .. row_seg_end[r])), and its total length in tokens.
//
// Invariants (checked by the tests): for every row, the tokens of its segments plus its private
// spans are exactly its sequence, each once; segments never overlap in rows unless nested
// (hierarchical sharing); seg_partial_offset[s] + (r - seg_row_begin[s]) indexes the phase-1
// partial state of row r in segment s, in [0, num_partials).
//
// All arrays are int32 structure-of-arrays so that kernels (which depend on nothing above them)
// take raw pointers, and the CUDA backend uploads them as they are.
//
// `version` is the tree's shape_version at build time. While the tree's version and the row list
// are unchanged, AdvanceLengths() refreshes the only things that can change (the last span of
// rows that grew in place, and row lengths) instead of a rebuild: ChunkAttention's lazy context.
//
// `build_id` answers "did the plan change?" for everything downstream: it is unique to each
// BuildAttentionPlan call in the process, and AdvanceLengths keeps it. So two plans with the same
// build_id differ at most in span ends and row lengths, and whoever caches work derived from a
// plan's shape (the CUDA backend's TPP work plan) keys it on build_id alone; the decision to
// rebuild or advance is the plan owner's (the StepRunner's PlanReusable), made once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/prefix_tree.h"

namespace banyan::kvcache {

struct PlanOptions {
  bool share = true;  // false: every row reads its whole context privately (the `paged` mode)
};

struct AttentionPlan {
  uint64_t version = 0;
  uint64_t build_id = 0;  // unique per BuildAttentionPlan call, never 0 once built (above)
  int32_t chunk_size = 0;
  std::vector<SeqId> rows;

  std::vector<int32_t> span_chunk;
  std::vector<int32_t> span_begin;
  std::vector<int32_t> span_end;

  std::vector<int32_t> seg_row_begin;
  std::vector<int32_t> seg_row_end;
  std::vector<int32_t> seg_span_begin;
  std::vector<int32_t> seg_span_end;
  std::vector<int32_t> seg_tokens;          // tokens in the segment
  std::vector<int32_t> seg_partial_offset;  // first partial state of the segment
  int32_t num_partials = 0;

  std::vector<int32_t> row_span_begin;
  std::vector<int32_t> row_span_end;
  std::vector<int32_t> row_seg_begin;
  std::vector<int32_t> row_seg_end;
  std::vector<int32_t> row_seg_ids;
  std::vector<int32_t> row_length;  // tokens of context, shared + private
  // Span index of the row's growing tail (its leaf's last chunk) when the leaf is private to the
  // row; -1 otherwise. AdvanceLengths updates exactly these.
  std::vector<int32_t> row_tail_span;
  // Rows limited to a prefix of their sequence (speculative verification: one row per candidate
  // position). Such a plan is never advanced in place.
  bool limited = false;

  int32_t num_rows() const { return static_cast<int32_t>(rows.size()); }
  int32_t num_segments() const { return static_cast<int32_t>(seg_row_begin.size()); }
  int32_t num_spans() const { return static_cast<int32_t>(span_chunk.size()); }
  int64_t shared_tokens() const;   // tokens read in phase 1, counted once per segment
  int64_t private_tokens() const;  // tokens read per row in phase 2
};

// Builds the plan for `rows` (live sequences of `tree`, each at most once).
AttentionPlan BuildAttentionPlan(const PrefixTree& tree, std::span<const SeqId> rows,
                                 PlanOptions options = {});

// The same with a context length per row: row r attends to the first row_lengths[r] tokens of
// its sequence (1 <= length <= the sequence's length). A sequence may then appear in several
// rows, adjacent, with increasing lengths: the rows of one candidate chain, each query attending
// to the context and the candidates before it. Nodes above every row's cut are shared as usual;
// a node some row cuts is read per row, up to that row's length.
AttentionPlan BuildAttentionPlan(const PrefixTree& tree, std::span<const SeqId> rows,
                                 std::span<const int32_t> row_lengths, PlanOptions options = {});

// True when `plan` can be brought up to date by AdvanceLengths (same tree shape, same rows).
bool PlanReusable(const AttentionPlan& plan, const PrefixTree& tree, std::span<const SeqId> rows);

// Refreshes row lengths and growing tail spans after in-place appends. Requires PlanReusable.
void AdvanceLengths(AttentionPlan& plan, const PrefixTree& tree);

}  // namespace banyan::kvcache
