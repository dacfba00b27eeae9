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
  // per sequence the key tile its own kernel starts at (0: from the start); per group its
  // members (grp_members[grp_first, + grp_count)) and its whole tiles of shared keys; the
  // group tiles, each (group, first packed row of the group's members).
  std::vector<int32_t> seq_t0;
  std::vector<int32_t> grp_first, grp_count, grp_tiles, grp_members;
  std::vector<int32_t> gtile_group, gtile_m0;

  int32_t num_seqs() const { return static_cast<int32_t>(seq_pos0.size()); }
  int32_t num_tiles() const { return static_cast<int32_t>(tile_seq.size()); }
  int32_t num_gtiles() const { return static_cast<int32_t>(gtile_group.size()); }
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
// tensor-core path only). A group takes the whole 64-key tiles that its shared positions hold
// and that every member sees whole (a member's keys end at its first new token); only members
// with one new token take part (decode rows); a group left with fewer than two members or no
// tile is dropped. Each member's own tile then starts after the group's tiles.
void AddSharedPrefixGroups(std::span<const SharedPrefix> groups, int32_t group_heads,
                           PrefillWork* work);

}  // namespace banyan::kernels::cuda
