// The rooflines the benchmarks compare against, in one place (../shared/PERFORMANCE.md):
//   - kCopyBytesPerSecond, kTensorFlopsPerSecond: the H200's measured copy and tensor-core
//     rates, the constants of the attention floor (bench/tpp/tpp_bench.cc) since 2026-11-30;
//   - AttentionFloorSeconds: that floor, max(bytes at the copy rate, FLOPs at the tensor rate);
//   - DecodeStepLimit: the physical limit of one decode step (PERFORMANCE.md section 2, revised
//     2026-12-01) = the projection-only GEMM time (measured by the caller)
//                 + the shared attention at the tensor-core peak
//                 + the private KV bytes at the copy rate.
//
// One departure from PERFORMANCE.md's wording: the shared term is max(FLOPs at the peak, the
// shared KV read once at the copy rate). Reading the prefix once bounds the step as surely as
// its FLOPs do, and it is the larger term only when B x (q heads / kv heads) is below about
// kTensorFlopsPerSecond / kCopyBytesPerSecond = 170 rows (B = 1 or 32 for an MHA shape); every
// case PERFORMANCE.md quotes (B = 256 and 1,024) is FLOP-bound there, so its numbers hold.
//
// Pure arithmetic, no CUDA: tests/bench/physical_limit_test.cc checks it against the numbers
// PERFORMANCE.md and issue 15 quote.
#pragma once

#include <algorithm>
#include <cstdint>

namespace banyan::bench {

// Device-to-device copy rate the floors use, bytes/s (PERFORMANCE.md section 1: "about 4.4 TB/s"
// for reads; a copy measures 4.1-4.2 TB/s counting its reads and writes).
inline constexpr double kCopyBytesPerSecond = 4.4e12;
// bf16 tensor-core rate, FLOP/s (PERFORMANCE.md: cuBLAS GEMMs at 730-780 TFLOP/s).
inline constexpr double kTensorFlopsPerSecond = 750e12;

struct Rates {
  double copy_bytes_per_s = kCopyBytesPerSecond;
  double tensor_flops_per_s = kTensorFlopsPerSecond;
};

// The roofline of one attention call: whichever of its bytes and its FLOPs takes longer.
inline double AttentionFloorSeconds(double bytes, double flops, const Rates& r = {}) {
  return std::max(bytes / r.copy_bytes_per_s, flops / r.tensor_flops_per_s);
}

// One decode step of a batch that shares a prefix.
struct DecodeStepShape {
  int64_t batch = 0;        // rows decoded in the step (B)
  int layers = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int kv_elem_bytes = 2;    // bf16 / fp16 KV; 1: FP8
  int kv_row_extra_bytes = 0;  // per K or V row of a kv head: 1 in an FP8 cache (its exponent)
  double shared_tokens = 0;        // the prefix all rows share (P), read once per step
  double private_tokens_per_row = 0;  // each row's own tokens after it (mean over the steps)
};

// FLOPs of the shared part's attention: QK^T and PV, 2 x 2 FLOPs per (row, head, dim, token).
inline double SharedAttentionFlops(const DecodeStepShape& s) {
  return 4.0 * static_cast<double>(s.batch) * s.layers * s.q_heads * s.head_dim * s.shared_tokens;
}

// Bytes of KV (K and V) per token over all layers.
inline double KvBytesPerToken(const DecodeStepShape& s) {
  return 2.0 * s.layers * s.kv_heads * (s.head_dim * s.kv_elem_bytes + s.kv_row_extra_bytes);
}

// The shared prefix's KV, read once for all rows.
inline double SharedKvBytes(const DecodeStepShape& s) {
  return s.shared_tokens * KvBytesPerToken(s);
}

// Every row's private KV, read once by that row.
inline double PrivateKvBytes(const DecodeStepShape& s) {
  return static_cast<double>(s.batch) * s.private_tokens_per_row * KvBytesPerToken(s);
}

struct DecodeStepLimit {
  double gemm_s = 0;     // projection-only GEMM time (measured)
  double shared_s = 0;   // shared attention: max(FLOPs at the peak, shared KV at the copy rate)
  double private_s = 0;  // private KV at the copy rate
  double seconds() const { return gemm_s + shared_s + private_s; }
  // Decode tokens per second at the limit: one token per row per step.
  double tokens_per_s(int64_t batch) const { return static_cast<double>(batch) / seconds(); }
};

inline DecodeStepLimit PhysicalDecodeStepLimit(double projection_gemm_s, const DecodeStepShape& s,
                                               const Rates& r = {}) {
  DecodeStepLimit l;
  l.gemm_s = projection_gemm_s;
  l.shared_s = AttentionFloorSeconds(SharedKvBytes(s), SharedAttentionFlops(s), r);
  l.private_s = PrivateKvBytes(s) / r.copy_bytes_per_s;
  return l;
}

// FLOPs of one decode step's projection, MLP and LM-head GEMMs (2 per weight per row): fused QKV
// [dim x (hq + 2 hkv) d], O [hq d x dim], gate+up [dim x 2 hidden], down [hidden x dim] per
// layer, and the LM head [dim x vocab]. Gives the rate of a measured GEMM-only step.
inline double ProjectionGemmFlops(int64_t batch, int layers, int dim, int q_heads, int kv_heads,
                                  int head_dim, int hidden, int vocab) {
  const double per_layer = static_cast<double>(dim) * (q_heads + 2.0 * kv_heads) * head_dim +
                           static_cast<double>(q_heads) * head_dim * dim +
                           static_cast<double>(dim) * 2.0 * hidden +
                           static_cast<double>(hidden) * dim;
  return 2.0 * static_cast<double>(batch) *
         (layers * per_layer + static_cast<double>(dim) * vocab);
}

}  // namespace banyan::bench
