// The GPU paged-KV view the TPP kernels read: the CUDA backend's KvViewDev
// (kernels/cuda/kv_view.h), one layer, bf16 or fp16, laid out [chunk][k|v][kv_head][chunk_size]
// [head_dim]. K of (chunk, kv_head, slot) is at base + chunk * chunk_stride + (kv_head *
// chunk_size + slot) * head_dim, V is v_offset elements after its K; strides in elements. The
// TPP kernels need each K/V row 16-byte aligned: base aligned to 16 bytes, and chunk_stride,
// v_offset and head_dim multiples of 8 elements.
#pragma once

#include "kernels/cuda/kv_view.h"
