// KvViewDev: one layer of the paged KV store in device memory, as every CUDA attention kernel
// (the paged decode kernel here and the TPP kernel in tpp/) reads it.
//
// Layout per layer, elements of the cache dtype (bf16 or fp16):
//   [chunk][k|v][kv_head][chunk_size][head_dim]
// K of (chunk, kv_head, slot) is at base + chunk * chunk_stride + (kv_head * chunk_size + slot) *
// head_dim; its V is v_offset elements after it. With this layout
//   v_offset     = num_kv_heads * chunk_size * head_dim
//   chunk_stride = 2 * v_offset
// and the layers of the backend's single allocation are num_chunks * chunk_stride apart.
// All strides and offsets are in elements, not bytes. head_dim is a multiple of 8, so every K/V
// row starts on a 16-byte boundary when base does.
#pragma once

#include <cstdint>

namespace banyan::kernels::cuda {

struct KvViewDev {
  void* base = nullptr;      // this layer's chunk 0
  int64_t chunk_stride = 0;  // elements from one chunk to the next
  int64_t v_offset = 0;      // elements from a K row to its V row
  int32_t chunk_size = 0;    // token slots per chunk
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

}  // namespace banyan::kernels::cuda
