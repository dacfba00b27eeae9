// Host-side work lists for the CUDA prefill attention kernels: the step's sequences are turned
// into flat int32 arrays once per step on the CPU, uploaded as they are, and the kernels only
// launch over them. (Decode attention's work plan is kernels/cuda/tpp's TppWorkPlan.)
//
// Prefill. Each sequence's spans cover positions [0, pos0 + num_q) in position order; span_pos
// gives the position of each span's first token. The tensor-core kernel works on tiles of
// block_m packed rows, a packed row being (new token j, q head k of the kv head) = j * group + k.
#pragma once

#include <cstdint>
#include <span>
#include <vector>


namespace banyan::kernels::cuda {

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
  int32_t block_m = 0;  // packed rows per tile
  // The deterministic mode's shared-prefix groups (AddSharedPrefixGroups; empty without):
  // per sequence the key piece its own CTAs start at (0: from the start); per group its
  // members (grp_members[grp_first, + grp_count)) and its whole pieces of shared keys; the
  // group tiles, each (group, first packed row of the group's members, piece).
  std::vector<int32_t> seq_piece0;
  std::vector<int32_t> grp_first, grp_count, grp_pieces, grp_members;
  std::vector<int32_t> gtile_group, gtile_m0, gtile_piece;
  // The deterministic mode's pieces (AddInvariantPieces; PrefillParams says how the kernels read
  // them): the items; per sequence the pieces that go through the state buffer (0: its tiles
  // fold their pieces themselves) and its first (row, piece) slot there; the sequences whose
  // pieces are folded by the merge kernel; (row, piece) slots in all.
  std::vector<int32_t> item_tile, item_piece;
  std::vector<int32_t> seq_pieces, seq_state;
  std::vector<int32_t> merge_seq;
  int32_t num_fold_items = 0;  // the first items, which fold their tiles' pieces themselves
  int64_t state_slots = 0;

  int32_t num_seqs() const { return static_cast<int32_t>(seq_pos0.size()); }
  int32_t num_tiles() const { return static_cast<int32_t>(tile_seq.size()); }
  int32_t num_gtiles() const { return static_cast<int32_t>(gtile_group.size()); }
  int32_t num_items() const { return static_cast<int32_t>(item_tile.size()); }
  int32_t num_merge() const { return static_cast<int32_t>(merge_seq.size()); }
};

// Sequences must occupy consecutive q rows in order. group = q heads per kv head.
void BuildPrefillWork(std::span<const PrefillSeq> seqs, int32_t group, int32_t block_m,
                      PrefillWork* work);

// Sequences of a built work list (indices into it) whose first `positions` keys are the same
// chunks' slots: the deterministic mode reads those keys once for all of them.
struct SharedPrefix {
  std::vector<int32_t> seqs;
  int32_t positions = 0;
};

// Adds the groups to a work list built with tiles of kPrefillBlockM (the head dims with a
// tensor-core path only). A group takes the whole pieces (kInvariantPieceKeys) that its shared
// positions hold and that every member sees before its own new token;
// only members with one new token take part (decode rows); a group left with fewer than two
// members or no piece is dropped, and so is a group whose members' piece states would take the
// groups kept before it past max_slots (AddInvariantPieces). Each member's own CTAs then start
// after the group's pieces.
void AddSharedPrefixGroups(std::span<const SharedPrefix> groups, int32_t group_heads,
                           int64_t max_slots, PrefillWork* work);

// The deterministic mode's items (after AddSharedPrefixGroups, if any, with the same max_slots):
// a group member, and while the state buffer's (row, piece) slots stay within max_slots a
// sequence whose new tokens
// fit one tile and whose keys span more than one piece, runs one CTA per piece (from its
// seq_piece0 on), its pieces' states folded by the merge kernel; every other tile runs as one
// CTA that folds its pieces itself (the same bits, fewer CTAs at once). The folding tiles come
// first.
void AddInvariantPieces(int32_t group_heads, int64_t max_slots, PrefillWork* work);

}  // namespace banyan::kernels::cuda
