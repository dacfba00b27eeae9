// The GPU paged-KV view, as agreed with the CUDA backend: one layer, bf16 or fp16, laid out
// [chunk][k|v][kv_head][chunk_size][head_dim].
//
// K of (chunk, kv_head, slot) is at base + chunk * chunk_stride + (kv_head * chunk_size + slot) *
// head_dim, V is v_offset elements after its K. Strides are in ELEMENTS of the KV dtype (as in the
// CPU KvView, which counts floats). Each K/V row must be 16-byte aligned: base aligned to 16
// bytes, and chunk_stride, v_offset and head_dim multiples of 8 elements.
//
// The backend owns kernels/cuda/kv_view.h; when it exists we use it, otherwise this identical
// stand-in (TODO(#6): drop the stand-in once the backend header has landed).
#pragma once

#include <cstdint>

#if __has_include("kernels/cuda/kv_view.h")
#include "kernels/cuda/kv_view.h"
#else
namespace banyan::kernels::cuda {

struct KvViewDev {
  void* base = nullptr;
  int64_t chunk_stride = 0;  // elements
  int64_t v_offset = 0;      // elements
  int32_t chunk_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

}  // namespace banyan::kernels::cuda
#endif
