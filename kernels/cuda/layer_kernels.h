// Layer kernels of the LLaMA forward pass on the GPU (everything but the GEMMs and attention).
//
// Conventions: activations that feed a GEMM are in the model dtype (bf16 or fp16); the residual
// stream x is fp32 (cuBLAS accumulates in fp32, and the residual adds are folded into the Wo /
// W_down GEMMs with beta = 1, fp32 out); the QKV and gate/up GEMM outputs that RopeWriteKv and
// SwiGlu read are fp32 or, narrowed by the GEMM, in the model dtype (their *_in_dtype flags). Norm weights stay fp32.
// Each function launches on `stream`, checks the launch, and returns InvalidArgument for an
// unsupported dtype or shape; it never synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/paged_views.h"

namespace banyan::kernels::cuda {

// x[r, :] = float(table[tokens[r], :]).
struct EmbeddingParams {
  const void* table = nullptr;     // [vocab, dim], dtype
  const int32_t* tokens = nullptr;  // [rows], each in [0, vocab)
  float* x = nullptr;               // [rows, dim]
  int32_t rows = 0;
  int32_t dim = 0;
  // Tokens fed on the device: where feed != nullptr and feed[r] >= 0, row r takes the token
  // feed_tokens[feed[r]] (an earlier step's sampled token) instead of tokens[r]; a negative fed
  // token (a row of logits with no number) reads row 0 of the table.
  const int32_t* feed = nullptr;         // [rows] or nullptr
  const int32_t* feed_tokens = nullptr;  // what feed indexes
};
absl::Status EmbeddingGather(DType dtype, const EmbeddingParams& p, cudaStream_t stream);

// out[r, :] = x[src, :] / rms(x[src, :]) * weight, src = row_index ? row_index[r] : r.
struct RmsNormParams {
  const float* x = nullptr;             // [*, dim]
  const int32_t* row_index = nullptr;   // [rows] rows of x to normalise, or nullptr for 0..rows-1
  const float* weight = nullptr;        // [dim]
  void* out = nullptr;                  // [rows, dim], dtype
  int32_t rows = 0;
  int32_t dim = 0;
  float eps = 1e-5f;
  // Optionally, the output also quantized to FP8 for a W8A8 GEMM in the same launch: exactly
  // what QuantizeRowsFp8 (kernels/cuda/fp8_quant.h) makes of `out`, with its scale rule, its
  // padding rows [rows, fp8_pad_rows) (zero codes, scale 1), per token (fp8_group == dim,
  // scales [rows]) or per 128 elements (fp8_group == kFp8Group, scales group-major
  // [dim / 128, max(rows, fp8_pad_rows)]). Only the vectorized path fuses it; otherwise the
  // quantization runs as QuantizeRowsFp8 on `out` after the norm (RmsNorm does that itself).
  uint8_t* fp8_codes = nullptr;  // [max(rows, fp8_pad_rows), dim], or nullptr: no FP8 output
  float* fp8_scales = nullptr;
  int32_t fp8_group = 0;
  int32_t fp8_pad_rows = 0;
};
absl::Status RmsNorm(DType dtype, const RmsNormParams& p, cudaStream_t stream);

// RoPE on q and k, then K and V written into their chunk slots (tokens with write_kv == 0 are
// cached already and skipped), q written out rotated. One launch per layer for every token of the
// step, so all new K/V of the layer exist before any attention of that layer runs. Into an FP8
// cache (kv.scale_offset != 0; head_dim <= 256) K and V are rounded by kernels/kv_fp8.h's rule
// from their fp32 values, by a second launch.
struct RopeKvParams {
  // [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]: q | k | v; fp32, or the dtype when
  // qkv_in_dtype (the QKV GEMM wrote it narrowed: half the bytes to read)
  const void* qkv = nullptr;
  bool qkv_in_dtype = false;
  void* q_out = nullptr;       // [tokens, num_q_heads, head_dim], dtype
  KvViewDev kv;                // this layer
  const int32_t* positions = nullptr;   // [tokens]
  const int32_t* slot_chunk = nullptr;  // [tokens]
  const int32_t* slot_index = nullptr;  // [tokens] slot within the chunk
  const int32_t* write_kv = nullptr;    // [tokens] 1: write K/V, 0: skip
  const float* inv_freq = nullptr;      // [head_dim / 2] RopeInvFreq (model/rope.h)
  int32_t tokens = 0;
  int32_t num_q_heads = 0;
  bool interleaved = false;  // RopeStyle::kInterleaved: pairs (2i, 2i+1); else (i, i + d/2)
};
absl::Status RopeWriteKv(DType dtype, const RopeKvParams& p, cudaStream_t stream);

// In place on the fp32 output of the fused QKV GEMM, before RopeWriteKv: adds the q/k/v
// projection biases (Qwen 2.5), then RMS-normalises every q head and every k head over its
// head_dim values with weights q_norm / k_norm (Qwen 3; eps as the model's RMSNorm). Either part
// may be absent (nullptr); with both absent nothing is launched. One warp per (token, head).
struct QkvBiasNormParams {
  float* qkv = nullptr;            // [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]
  const float* bias = nullptr;     // [(num_q_heads + 2 * num_kv_heads) * head_dim] or nullptr
  const float* q_norm = nullptr;   // [head_dim] or nullptr (then k_norm is nullptr too)
  const float* k_norm = nullptr;   // [head_dim] or nullptr
  int32_t tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float eps = 1e-6f;
};
absl::Status QkvBiasNorm(const QkvBiasNormParams& p, cudaStream_t stream);

// out[r, i] = silu(gate[r, i]) * up[r, i].
struct SwiGluParams {
  const void* gate_up = nullptr;  // [rows, 2 * hidden]: gate in [0, hidden), up in [hidden, 2h)
  void* out = nullptr;             // [rows, hidden], dtype
  int32_t rows = 0;
  int32_t hidden = 0;
  bool gate_up_in_dtype = false;  // gate_up is fp32, or the dtype (the GEMM wrote it narrowed)
  // Optionally, `out` also quantized to FP8 for the down projection in the same launch, as
  // RmsNormParams' fp8_* say (there over dim, here over hidden). Fused for hidden % 8 == 0;
  // otherwise SwiGlu runs QuantizeRowsFp8 on `out` after the plain kernel.
  uint8_t* fp8_codes = nullptr;
  float* fp8_scales = nullptr;
  int32_t fp8_group = 0;
  int32_t fp8_pad_rows = 0;
};
absl::Status SwiGlu(DType dtype, const SwiGluParams& p, cudaStream_t stream);

// Copies slots [slot_begin, slot_end) of chunk src into chunk dst from slot dst_begin on, K and
// V, every kv head, every layer (a kvcache::ChunkCopy). Source and destination must not overlap.
struct CopyKvSlotsParams {
  KvViewDev kv;              // layer 0
  int64_t layer_stride = 0;  // elements between layers
  int32_t num_layers = 0;
  int32_t src = 0;
  int32_t dst = 0;
  int32_t slot_begin = 0;
  int32_t slot_end = 0;
  int32_t dst_begin = 0;
};
absl::Status CopyKvSlots(const CopyKvSlotsParams& p, cudaStream_t stream);

// out[r] = argmax over logits[r, :], the lowest id on ties; NaN counts as -inf. A row with no
// finite or +inf value gets -1.
struct ArgmaxParams {
  const float* logits = nullptr;  // [rows, vocab]
  int32_t* out = nullptr;         // [rows]
  int32_t rows = 0;
  int32_t vocab = 0;
};
absl::Status ArgmaxRows(const ArgmaxParams& p, cudaStream_t stream);

// The layer kernels above (every instantiation of RMSNorm, RoPE + KV write, QKV bias / norm,
// SwiGLU and argmax) that wait for the grids before them on the device (griddepcontrol.wait)
// before they touch memory: a step's graph may launch them as soon as the kernel before them has
// started all its blocks (graph_update.h, LaunchEarly), so that their launch overlaps that
// kernel's last wave instead of following its end. Empty when they were not compiled for sm_90
// (their waits would be no-ops). A kernel added here must wait first, as these do.
std::vector<const void*> EarlyLaunchKernels();

}  // namespace banyan::kernels::cuda
