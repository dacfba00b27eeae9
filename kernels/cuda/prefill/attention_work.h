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

  int32_t num_seqs() const { return static_cast<int32_t>(seq_pos0.size()); }
  int32_t num_tiles() const { return static_cast<int32_t>(tile_seq.size()); }
};

// Sequences must occupy consecutive q rows in order. group = q heads per kv head.
void BuildPrefillWork(std::span<const PrefillSeq> seqs, int32_t group, int32_t block_m,
                      PrefillWork* work);

}  // namespace banyan::kernels::cuda
