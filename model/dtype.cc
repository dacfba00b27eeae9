#include "model/dtype.h"

#include <cmath>
#include <limits>

namespace banyan::model {

absl::string_view DtypeName(WeightDtype t) {
  switch (t) {
    case WeightDtype::kF32:
      return "F32";
    case WeightDtype::kF16:
      return "F16";
    case WeightDtype::kBF16:
      return "BF16";
  }
  return "?";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: value = mant * 2^-24. Normalise so the leading 1 reaches bit 10.
    int e = 113;  // exponent field of 2^-14 in fp32 (127 - 14)
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN -> quiet NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (abs >= 0x38800000u) {                       // normal half (>= 2^-14)
    uint32_t v = abs - (112u << 23);              // rebias exponent 127 -> 15
    v += 0xfffu + ((v >> 13) & 1u);               // round to nearest even on the 13 dropped bits
    return sign | static_cast<uint16_t>(v >> 13);
  }
  if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal (2^-25): zero
  // Subnormal half: value / 2^-24, rounded to nearest even.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // with the implicit 1
  const uint32_t shift = 126 - exp;                     // 14..24 for exp in [102, 112]
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

namespace {

// All 256 E4M3 values, computed once from the definition in dtype.h.
struct Fp8E4M3Table {
  float v[256];
  Fp8E4M3Table() {
    for (int c = 0; c < 256; ++c) {
      const int exp = (c >> 3) & 0xf, mant = c & 7;
      float mag;
      if (exp == 0xf && mant == 7) {
        mag = std::numeric_limits<float>::quiet_NaN();
      } else if (exp == 0) {
        mag = std::ldexp(static_cast<float>(mant), -9);
      } else {
        mag = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
      }
      v[c] = (c & 0x80) ? -mag : mag;
    }
  }
};

}  // namespace

float Fp8E4M3ToFloat(uint8_t code) {
  static const Fp8E4M3Table table;
  return table.v[code];
}

uint8_t FloatToFp8E4M3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;  // NaN
  if (abs >= 0x43e00000u) return sign | 0x7e;  // >= 448 (inf included): saturate
  if (abs >= 0x3c800000u) {                    // normal E4M3 (>= 2^-6)
    uint32_t v = abs - (120u << 23);           // rebias exponent 127 -> 7
    v += 0x7ffffu + ((v >> 20) & 1u);          // round to nearest even on the 20 dropped bits
    const uint32_t code = v >> 20;
    return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);  // 448 < x < 464 rounds to 448
  }
  // Subnormal: x / 2^-9 is exact in float and below 8; nearbyint rounds ties to even (the
  // default rounding mode). 8 is 0x08, the smallest normal, as it should be.
  const float q = std::nearbyint(std::bit_cast<float>(abs) * 512.0f);
  return sign | static_cast<uint8_t>(q);
}

void ConvertToFloat(WeightDtype t, const void* src, size_t n, float* dst) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case WeightDtype::kF32:
      std::memcpy(dst, p, n * 4);
      return;
    case WeightDtype::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = HalfToFloat(h);
      }
      return;
    case WeightDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
  }
}

void ConvertFromFloat(WeightDtype t, const float* src, size_t n, void* dst) {
  auto* p = static_cast<unsigned char*>(dst);
  switch (t) {
    case WeightDtype::kF32:
      std::memcpy(p, src, n * 4);
      return;
    case WeightDtype::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalf(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case WeightDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
  }
}

}  // namespace banyan::model
