#include "model/gguf_quant.h"

#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "model/dtype.h"

namespace banyan::model {
namespace {

float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 15) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

// Q4_1 (m == nullptr: Q4_0-style offset -8 instead) and the 5-bit Q5_0 / Q5_1 (qh != nullptr):
// x = d * q + m, or d * (q - offset) without m.
void DequantLegacy(float d, const float* m, const uint8_t* qh, const uint8_t* qs, float* y) {
  uint32_t high = 0;
  if (qh != nullptr) std::memcpy(&high, qh, 4);
  const int offset = qh != nullptr ? 16 : 8;
  for (int i = 0; i < 16; ++i) {
    int lo = qs[i] & 15, hi = qs[i] >> 4;
    if (qh != nullptr) {
      lo |= static_cast<int>((high >> i) & 1) << 4;
      hi |= static_cast<int>((high >> (i + 16)) & 1) << 4;
    }
    if (m != nullptr) {
      y[i] = d * static_cast<float>(lo) + *m;
      y[i + 16] = d * static_cast<float>(hi) + *m;
    } else {
      y[i] = d * static_cast<float>(lo - offset);
      y[i + 16] = d * static_cast<float>(hi - offset);
    }
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block.
void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K when qh == nullptr, Q5_K otherwise.
void DequantK45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  for (int k = 0; k < 4; ++k) {  // sub-blocks 2k and 2k + 1
    int sc0, m0, sc1, m1;
    ScaleMinK4(2 * k, scales, &sc0, &m0);
    ScaleMinK4(2 * k + 1, scales, &sc1, &m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const uint8_t* q = qs + 32 * k;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 15, hi = q[l] >> 4;
      if (qh != nullptr) {
        lo |= ((qh[l] >> (2 * k)) & 1) << 4;
        hi |= ((qh[l] >> (2 * k + 1)) & 1) << 4;
      }
      y[64 * k + l] = d0 * static_cast<float>(lo) - min0;
      y[64 * k + 32 + l] = d1 * static_cast<float>(hi) - min1;
    }
  }
}

void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q0);
      y[l + 32] = d * static_cast<float>(sc[(l + 32) / 16]) * static_cast<float>(q1);
      y[l + 64] = d * static_cast<float>(sc[(l + 64) / 16]) * static_cast<float>(q2);
      y[l + 96] = d * static_cast<float>(sc[(l + 96) / 16]) * static_cast<float>(q3);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

GgmlBlock GgmlBlockOf(uint32_t type) {
  switch (type) {
    case kGgmlTypeF32:
      return {1, 4};
    case kGgmlTypeF16:
    case kGgmlTypeBF16:
      return {1, 2};
    case kGgmlTypeQ8_0:
      return {32, 34};
    case kGgmlTypeQ4_0:
      return {32, 18};
    case kGgmlTypeQ4_1:
      return {32, 20};
    case kGgmlTypeQ5_0:
      return {32, 22};
    case kGgmlTypeQ5_1:
      return {32, 24};
    case kGgmlTypeQ4_K:
      return {256, 144};
    case kGgmlTypeQ5_K:
      return {256, 176};
    case kGgmlTypeQ6_K:
      return {256, 210};
    default:
      return {0, 0};
  }
}

bool IsQuantized(uint32_t type) { return GgmlBlockOf(type).values > 1; }

std::string GgmlTypeName(uint32_t t) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (t < std::size(kNames)) return absl::StrCat(kNames[t], " (", t, ")");
  return absl::StrCat("type ", t);
}

absl::Status GgmlTensorBytes(uint32_t type, int64_t row_len, int64_t rows, const std::string& what,
                             uint64_t* bytes) {
  const GgmlBlock b = GgmlBlockOf(type);
  if (b.bytes == 0) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported tensor type ", GgmlTypeName(type), " for tensor ", what,
                     " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"));
  }
  if (row_len <= 0 || rows <= 0 || row_len % b.values != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", what, " of type ", GgmlTypeName(type),
                                                   " has rows of ", row_len,
                                                   " values, not a multiple of its block of ",
                                                   b.values));
  }
  // row_len and rows are bounded by the parser (numel < 2^48), so this cannot overflow.
  *bytes = static_cast<uint64_t>(row_len / b.values) * static_cast<uint64_t>(b.bytes) *
           static_cast<uint64_t>(rows);
  return absl::OkStatus();
}

void Dequantize(uint32_t type, const uint8_t* src, int64_t n, float* dst) {
  const GgmlBlock b = GgmlBlockOf(type);
  BANYAN_CHECK(b.values > 1 && n % b.values == 0) << GgmlTypeName(type) << " n " << n;
  for (int64_t i = 0; i < n / b.values; ++i) {
    const uint8_t* blk = src + i * b.bytes;
    float* y = dst + i * b.values;
    switch (type) {
      case kGgmlTypeQ8_0:
        DequantQ8_0(blk, y);
        break;
      case kGgmlTypeQ4_0:
        DequantQ4_0(blk, y);
        break;
      case kGgmlTypeQ4_1: {
        const float m = LoadHalf(blk + 2);
        DequantLegacy(LoadHalf(blk), &m, nullptr, blk + 4, y);
        break;
      }
      case kGgmlTypeQ5_0:
        DequantLegacy(LoadHalf(blk), nullptr, blk + 2, blk + 6, y);
        break;
      case kGgmlTypeQ5_1: {
        const float m = LoadHalf(blk + 2);
        DequantLegacy(LoadHalf(blk), &m, blk + 4, blk + 8, y);
        break;
      }
      case kGgmlTypeQ4_K:
        DequantK45(blk, nullptr, blk + 16, y);
        break;
      case kGgmlTypeQ5_K:
        DequantK45(blk, blk + 16, blk + 48, y);
        break;
      case kGgmlTypeQ6_K:
        DequantQ6_K(blk, y);
        break;
      default:
        BANYAN_CHECK(false) << "unreachable";
    }
  }
}

}  // namespace banyan::model
