// The kernels' two views of a step, shared by the CPU kernels (kernels/cpu/) and the CUDA ones
// (kernels/cuda/): one layer of the paged KV store, and the attention plan as raw arrays. Kernels
// depend on nothing above them: the plan arrives as raw int32 arrays, laid out as
// kvcache/attention_plan.h documents (engine/plan_view.h converts).
#pragma once

#include <cstdint>

namespace banyan::kernels {

// One layer of the paged KV store. Layout per layer, in elements of the cache's type:
//   [chunk][k|v][kv_head][chunk_size][head_dim]
// K of (chunk, kv_head, slot) is at base + chunk * chunk_stride + (kv_head * chunk_size + slot) *
// head_dim; its V is v_offset elements after it, so v_offset = num_kv_heads * chunk_size *
// head_dim and chunk_stride = 2 * v_offset; the layers of a backend's single allocation are
// num_chunks * chunk_stride apart. All strides and offsets are in elements, not bytes.
//
// Elem is the element type: float for the CPU backend's fp32 cache (KvView, with K()/V()
// accessors), void on the device, whose cache is bf16 or fp16 chosen at run time and whose kernels
// cast base to their type (cuda::KvViewDev). On the device head_dim is a multiple of 8, so every
// K/V row starts on a 16-byte boundary when base does.
//
// An FP8 cache (device only; kernels/kv_fp8.h has its number format and chunk layout) has one-byte
// elements, so the offsets above are in bytes, and each chunk ends with the rows' exponents at
// scale_offset; scale_offset == 0 means a cache of the model's dtype.
template <typename Elem>
struct PagedKvView {
  Elem* base = nullptr;      // this layer's chunk 0
  int64_t chunk_stride = 0;  // elements from one chunk to the next
  int64_t v_offset = 0;      // elements from a K row to its V row
  int32_t chunk_size = 0;    // token slots per chunk
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t scale_offset = 0;  // FP8 cache: bytes from a chunk's start to its K rows' exponents

  // Host accessors of a typed view (not instantiated for the device's void view).
  Elem* K(int32_t chunk, int32_t head, int32_t slot) const {
    return base + chunk * chunk_stride + (static_cast<int64_t>(head) * chunk_size + slot) * head_dim;
  }
  Elem* V(int32_t chunk, int32_t head, int32_t slot) const {
    return K(chunk, head, slot) + v_offset;
  }
};

using KvView = PagedKvView<float>;

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

namespace cuda {
using KvViewDev = PagedKvView<void>;
inline bool KvIsFp8Host(const KvViewDev& kv) { return kv.scale_offset != 0; }
}  // namespace cuda

}  // namespace banyan::kernels
