// GGML tensor types the GGUF loader reads, and dequantization of the block-quantized ones to
// fp32 (done once at load: the backends compute on fp32 / bf16 weights).
//
// Written here rather than taken from a library: the formats are small and fixed, the only
// library implementing them (ggml) would bring its own tensor runtime and threads for five loops,
// and Debian packages none of it.
//
// Block formats (little-endian; f16 is IEEE half; a row's length must be a multiple of the block):
//   Q8_0 (type 8):  32 values in 34 bytes  {f16 d; int8 q[32]}          x = d * q
//   Q4_0 (type 2):  32 values in 18 bytes  {f16 d; u8 qs[16]}           x[i] = d * ((qs[i] & 15) - 8),
//                                                                       x[i + 16] = d * ((qs[i] >> 4) - 8)
//   Q4_1 (type 3):  32 values in 20 bytes  {f16 d; f16 m; u8 qs[16]}    x = d * q + m, q as Q4_0's
//                                                                       nibbles without the - 8
//   Q5_0 (type 6):  32 values in 22 bytes  {f16 d; u32 qh; u8 qs[16]}   q[i] = nibble | bit i of
//                   qh << 4 (i < 16 low nibbles, i >= 16 high nibbles), x = d * (q - 16)
//   Q5_1 (type 7):  32 values in 24 bytes  {f16 d; f16 m; u32 qh; u8 qs[16]}  x = d * q + m
//   Q4_K (type 12): 256 values in 144 bytes {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
//   Q5_K (type 13): 256 values in 176 bytes {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K (type 14): 256 values in 210 bytes {u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d}
// Q4_K / Q5_K: eight sub-blocks of 32 with a 6-bit scale sc_j and a 6-bit min m_j packed in
// `scales` (j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: sc = (scales[j + 4] & 15)
// | (scales[j - 4] >> 6) << 4, m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4); value
// x = d * sc_j * q - dmin * m_j. Sub-blocks 2k and 2k + 1 share 32 bytes of qs: the low nibbles
// are sub-block 2k, the high nibbles 2k + 1; Q5_K adds bit 2k (resp. 2k + 1) of qh[l] as the
// fifth bit (value 16) of element l.
// Q6_K: sixteen sub-blocks of 16 with int8 scales; q (6 bits, minus 32) = low 4 bits from ql,
// high 2 bits from qh; per half of 128 values (ql += 64, qh += 32, scales += 8 after each), for
// l < 32: element l from (ql[l] & 15, qh[l] bits 0-1), l + 32 from (ql[l + 32] & 15, bits 2-3),
// l + 64 from (ql[l] >> 4, bits 4-5), l + 96 from (ql[l + 32] >> 4, bits 6-7); element e of the
// half uses scales[e / 16]; x = d * scale * q.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace banyan::model {

enum GgmlType : uint32_t {
  kGgmlTypeF32 = 0,
  kGgmlTypeF16 = 1,
  kGgmlTypeQ4_0 = 2,
  kGgmlTypeQ4_1 = 3,
  kGgmlTypeQ5_0 = 6,
  kGgmlTypeQ5_1 = 7,
  kGgmlTypeQ8_0 = 8,
  kGgmlTypeQ4_K = 12,
  kGgmlTypeQ5_K = 13,
  kGgmlTypeQ6_K = 14,
  kGgmlTypeBF16 = 30,
};

struct GgmlBlock {
  int64_t values = 0;  // elements per block (1 for the plain float types)
  int64_t bytes = 0;   // bytes per block; 0: a type the loader does not read
};

// Block geometry of `type`; {0, 0} for a type the loader does not read.
GgmlBlock GgmlBlockOf(uint32_t type);

// "Q4_K (12)".
std::string GgmlTypeName(uint32_t type);

// True for the block-quantized types above (not F32/F16/BF16).
bool IsQuantized(uint32_t type);

// Bytes a tensor of `row_len` x `rows` elements of `type` occupies; InvalidArgument naming
// `what` when the type is not read or row_len is not a multiple of its block.
absl::Status GgmlTensorBytes(uint32_t type, int64_t row_len, int64_t rows, const std::string& what,
                             uint64_t* bytes);

// Dequantizes n values (a multiple of the block) of a quantized `type` from `src` into dst.
// Requires IsQuantized(type) and n % GgmlBlockOf(type).values == 0.
void Dequantize(uint32_t type, const uint8_t* src, int64_t n, float* dst);

}  // namespace banyan::model
