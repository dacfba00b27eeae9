// Plain parameter structs shared by the CPU attention kernels (and mirrored by the CUDA ones).
// Kernels depend on nothing above them: the plan arrives as raw int32 arrays, laid out as
// kvcache/attention_plan.h documents.
#pragma once

#include <cstdint>

namespace banyan::kernels {

// One layer of the paged KV store, fp32.
// K of (chunk, kv_head, slot) is at base + chunk * chunk_stride + (kv_head * chunk_size + slot) *
// head_dim; V is v_offset floats after its K. The CPU backend's layout is
// [layer][chunk][k|v][kv_head][chunk_size][head_dim], so chunk_stride = 2 * num_kv_heads *
// chunk_size * head_dim and v_offset = num_kv_heads * chunk_size * head_dim.
struct KvView {
  float* base = nullptr;
  int64_t chunk_stride = 0;
  int64_t v_offset = 0;
  int32_t chunk_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  float* K(int32_t chunk, int32_t head, int32_t slot) const {
    return base + chunk * chunk_stride + (static_cast<int64_t>(head) * chunk_size + slot) * head_dim;
  }
  float* V(int32_t chunk, int32_t head, int32_t slot) const {
    return K(chunk, head, slot) + v_offset;
  }
};

// The attention plan as raw arrays (see kvcache::AttentionPlan for their meaning).
struct PlanView {
  int32_t num_rows = 0;
  int32_t num_segments = 0;
  int32_t num_partials = 0;
  const int32_t* span_chunk = nullptr;
  const int32_t* span_begin = nullptr;
  const int32_t* span_end = nullptr;
  const int32_t* seg_row_begin = nullptr;
  const int32_t* seg_row_end = nullptr;
  const int32_t* seg_span_begin = nullptr;
  const int32_t* seg_span_end = nullptr;
  const int32_t* seg_partial_offset = nullptr;
  const int32_t* row_span_begin = nullptr;
  const int32_t* row_span_end = nullptr;
  const int32_t* row_seg_begin = nullptr;
  const int32_t* row_seg_end = nullptr;
  const int32_t* row_seg_ids = nullptr;
};

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
