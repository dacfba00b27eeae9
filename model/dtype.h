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

// Widens n elements of type `t` at `src` (any alignment) into dst[0..n).
void ConvertToFloat(WeightDtype t, const void* src, size_t n, float* dst);

// Narrows n floats into `dst` (any alignment), n * DtypeSize(t) bytes.
void ConvertFromFloat(WeightDtype t, const float* src, size_t n, void* dst);

}  // namespace banyan::model
