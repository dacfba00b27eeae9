// The CPU attention kernels' parameters: a step's queries and outputs over the views that every
// kernel shares (kernels/paged_views.h).
#pragma once

#include <cstdint>
#include "kernels/paged_views.h"

namespace banyan::kernels {

struct DecodeAttentionParams {
  const float* q = nullptr;  // [num_rows, num_q_heads, head_dim]
  float* out = nullptr;      // [num_rows, num_q_heads, head_dim]
  KvView kv;
  PlanView plan;
  int32_t num_q_heads = 0;
  float scale = 0.0f;  // softmax scale, usually 1/sqrt(head_dim)
  // Phase-1 partial states: o [num_partials, num_q_heads, head_dim] (normalised) and
  // lse [num_partials, num_q_heads]. Needed when plan.num_partials > 0.
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  // Rows' private spans with one softmax max over the whole span list, found first (K read
  // twice): the result then does not depend on where the context is cut into spans (a chunk
  // boundary, a node boundary), only on its tokens. For runs compared bit for bit across
  // layouts (CpuBackendOptions::row_invariant); phase-1 segments are unchanged.
  bool fixed_max = false;
};

}  // namespace banyan::kernels
