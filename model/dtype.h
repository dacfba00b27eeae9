// Element types that model files store and the conversions to and from the in-memory fp32.
//
// Conversions narrow with round-to-nearest-even, keep NaN a (quiet) NaN and saturate to
// infinity on overflow, matching PyTorch's `tensor.to(torch.bfloat16 / torch.float16)`.
// Sources may be unaligned (safetensors data offsets need not be multiples of the element
// size), so everything goes through memcpy.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace banyan::model {

static_assert(std::endian::native == std::endian::little,
              "model files are little-endian; a big-endian host needs byte swapping");

enum class WeightDtype { kF32, kF16, kBF16 };

// FP8 (OCP 8-bit floating point, as in safetensors' F8_E4M3 / F8_E5M2 and PyTorch's
// float8_e4m3fn / float8_e5m2). They are not WeightDtypes: an FP8 tensor means nothing without
// its scales, so it is read only as part of a QuantizedTensor (model/quantized.h).
//
// E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities.
//   exponent field 0: subnormal, value = mantissa * 2^-9 (so +-0 and multiples of 2^-9 up to
//   7 * 2^-9); fields 1..15: (1 + mantissa / 8) * 2^(e - 7); S.1111.111 (0x7f, 0xff) is NaN, so
//   the largest finite value is S.1111.110 = 448.
// Decoding is exact. Encoding rounds to nearest, ties to even, and saturates: a magnitude that
// would round above 448 (including +-inf) becomes +-448, the rule of the hardware's
// "satfinite" conversion; NaN becomes NaN (0x7f, with the input's sign bit); -0 stays -0.
// (PyTorch's .to(float8_e4m3fn) differs only there: it turns overflow and inf into NaN. Our
// quantizers never rely on either, since they divide by scale = amax / 448 first.)
float Fp8E4M3ToFloat(uint8_t code);
uint8_t FloatToFp8E4M3(float f);
inline bool IsFp8E4M3Nan(uint8_t code) { return (code & 0x7f) == 0x7f; }
constexpr float kFp8E4M3Max = 448.0f;
// E5M2: the top byte of an IEEE half (bias 15, with infinities and NaNs). Only decoded, so that
// a checkpoint storing it can be recognised and refused by name.
inline float Fp8E5M2ToFloat(uint8_t code);

// Bytes per element.
inline size_t DtypeSize(WeightDtype t) { return t == WeightDtype::kF32 ? 4 : 2; }

// "F32" / "F16" / "BF16" (the safetensors spelling).
absl::string_view DtypeName(WeightDtype t);

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

inline float Fp8E5M2ToFloat(uint8_t code) { return HalfToFloat(static_cast<uint16_t>(code << 8)); }

// Widens n elements of type `t` at `src` (any alignment) into dst[0..n).
void ConvertToFloat(WeightDtype t, const void* src, size_t n, float* dst);

// Narrows n floats into `dst` (any alignment), n * DtypeSize(t) bytes.
void ConvertFromFloat(WeightDtype t, const float* src, size_t n, void* dst);

}  // namespace banyan::model
