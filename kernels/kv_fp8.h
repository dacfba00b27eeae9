// The FP8 KV cache's number format, shared by the CPU reference (engine/cpu), the CUDA kernels
// that write the cache (kernels/cuda/layer_kernels.cuh) and every kernel that reads it.
//
// Each (token, kv head) K vector and each V vector of head_dim values is stored as head_dim
// E4M3 codes and one power-of-two scale 2^e, e a signed byte:
//   amax = max |x_i| over the vector's non-NaN values (fp32, as computed: K after RoPE, V as
//          projected);
//   e    = the smallest integer with amax <= 448 * 2^e, clamped to [-120, 120]; 0 when amax is
//          0 or infinite;
//   code = E4M3(x_i * 2^-e), round to nearest even, saturating at +-448 (x_i * 2^-e is exact;
//          a NaN keeps the NaN code);
// and read back as value = E4M3ToFloat(code) * 2^e, which is exact in fp32 and in bf16 (a code
// has 4 significant bits and 2^e is within both formats' exponent range), and in fp16 unless it
// falls below fp16's subnormals or, for a row whose amax is within 1/16 of fp16's largest value,
// rounds up past it. So a kernel that dequantizes into the model's dtype before its
// matrix products computes on exactly the values the CPU reference dequantizes, and the scale of
// a K vector could equally be applied to a score (q . k) and that of a V vector to a probability.
//
// Chunk layout of an FP8 cache (PagedKvView with scale_offset != 0; element = byte):
//   [k|v][kv_head][chunk_size][head_dim] codes, then [k|v][kv_head][chunk_size] exponents (int8)
// so chunk_stride = 2 * num_kv_heads * chunk_size * (head_dim + 1) and
// scale_offset = 2 * num_kv_heads * chunk_size * head_dim; the exponent of the K row at element
// offset (kv_head * chunk_size + slot) * head_dim of a chunk is at scale_offset +
// kv_head * chunk_size + slot, its V's num_kv_heads * chunk_size further.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define BANYAN_HD __host__ __device__
#else
#define BANYAN_HD
#endif

namespace banyan::kernels {

inline constexpr int kKvFp8MinExp = -120;
inline constexpr int kKvFp8MaxExp = 120;

// e of the rule above. frexp gives amax = m * 2^x, m in [0.5, 1); 448 = 0.875 * 2^9, so
// amax <= 448 * 2^e  <=>  e >= x - 9 (m <= 0.875) or e >= x - 8 (m > 0.875): no rounding.
BANYAN_HD inline int KvFp8Exponent(float amax) {
  if (!(amax > 0.0f) || !(amax <= 3.402823466e38f)) return 0;  // zero, NaN or infinite
  int x = 0;
  const float m = frexpf(amax, &x);
  int e = x - 9 + (m > 0.875f ? 1 : 0);
  e = e < kKvFp8MinExp ? kKvFp8MinExp : e;
  return e > kKvFp8MaxExp ? kKvFp8MaxExp : e;
}

// 2^e as a float, e in [kKvFp8MinExp, kKvFp8MaxExp] (normal floats: exact).
BANYAN_HD inline float KvFp8Scale(int e) { return ldexpf(1.0f, e); }

#if !defined(__CUDA_ARCH__)
// The rule on the host, for one row of n values: writes the codes, returns e. `encode` is the
// E4M3 rounding of a float (round to nearest even, saturating: model::FloatToFp8E4M3), which
// kernels/ cannot include; the device uses the toolkit's conversion (kernels/cuda/kv_fp8.cuh).
inline int KvFp8RowExponent(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));  // fmax skips NaN
  return KvFp8Exponent(amax);
}
template <typename Encode>
int QuantizeKvRowFp8(const float* x, int n, uint8_t* codes, const Encode& encode) {
  const int e = KvFp8RowExponent(x, n);
  const float inv = KvFp8Scale(-e);
  for (int i = 0; i < n; ++i) codes[i] = encode(x[i] * inv);
  return e;
}
#endif

// The byte layout numbers of an FP8 chunk (see the top).
struct KvFp8Layout {
  int64_t v_offset;      // codes from a K row to its V row
  int64_t scale_offset;  // from a chunk's start to its K exponents
  int64_t chunk_stride;  // bytes per chunk
};
BANYAN_HD inline KvFp8Layout KvFp8LayoutOf(int32_t num_kv_heads, int32_t chunk_size,
                                           int32_t head_dim) {
  const int64_t rows = int64_t{num_kv_heads} * chunk_size;
  return {rows * head_dim, 2 * rows * head_dim, 2 * rows * (head_dim + 1)};
}

}  // namespace banyan::kernels

#undef BANYAN_HD
