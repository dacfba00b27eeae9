// Dequantization of the GGUF block formats against blocks encoded here from the formats'
// definitions (model/gguf_quant.h): random codes, scales and mins are packed bit by bit,
// and the dequantized values must equal the definition's expression exactly. Plus the loader
// refusing malformed quantized tensors.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "model/dummy_weights.h"
#include "model/gguf_loader.h"
#include "model/gguf_quant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_util.h"
#include "tests/testing/random.h"

namespace banyan::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A random f16 scale, and its exact value.
float RandomHalf(std::mt19937_64& rng, uint16_t* bits) {
  std::uniform_real_distribution<float> u(1e-3f, 0.2f);
  *bits = FloatToHalf(u(rng));
  return HalfToFloat(*bits);
}

template <typename T>
void Put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct Case {
  std::string bytes;        // encoded blocks
  std::vector<float> want;  // their values by the definition
};

Case Q8_0(std::mt19937_64& rng, int blocks) {
  Case c;
  for (int b = 0; b < blocks; ++b) {
    uint16_t dh;
    const float d = RandomHalf(rng, &dh);
    Put(c.bytes, dh);
    for (int i = 0; i < 32; ++i) {
      const int8_t q = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
      Put(c.bytes, q);
      c.want.push_back(d * static_cast<float>(q));
    }
  }
  return c;
}

Case Q4_0(std::mt19937_64& rng, int blocks) {
  Case c;
  for (int b = 0; b < blocks; ++b) {
    uint16_t dh;
    const float d = RandomHalf(rng, &dh);
    int q[32];
    for (int& x : q) x = static_cast<int>(rng() % 16);
    Put(c.bytes, dh);
    for (int i = 0; i < 16; ++i) Put(c.bytes, static_cast<uint8_t>(q[i] | q[i + 16] << 4));
    for (int i = 0; i < 32; ++i) c.want.push_back(d * static_cast<float>(q[i] - 8));
  }
  return c;
}

// Q4_1 (five_bits false, with_min true), Q5_0 (true, false), Q5_1 (true, true).
Case Legacy(std::mt19937_64& rng, int blocks, bool five_bits, bool with_min) {
  Case c;
  for (int b = 0; b < blocks; ++b) {
    uint16_t dh, mh;
    const float d = RandomHalf(rng, &dh);
    float m = RandomHalf(rng, &mh);
    if (rng() % 2) {  // negative minimums too
      mh ^= 0x8000;
      m = -m;
    }
    int q[32];
    for (int& x : q) x = static_cast<int>(rng() % (five_bits ? 32 : 16));
    Put(c.bytes, dh);
    if (with_min) Put(c.bytes, mh);
    if (five_bits) {
      uint32_t qh = 0;
      for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>(q[i] >> 4) << i;
      Put(c.bytes, qh);
    }
    for (int i = 0; i < 16; ++i) {
      Put(c.bytes, static_cast<uint8_t>((q[i] & 15) | (q[i + 16] & 15) << 4));
    }
    for (int i = 0; i < 32; ++i) {
      c.want.push_back(with_min ? d * static_cast<float>(q[i]) + m
                                : d * static_cast<float>(q[i] - (five_bits ? 16 : 8)));
    }
  }
  return c;
}

// Q4_K (five_bits false) and Q5_K (true).
Case K45(std::mt19937_64& rng, int blocks, bool five_bits) {
  Case c;
  for (int b = 0; b < blocks; ++b) {
    uint16_t dh, mh;
    const float d = RandomHalf(rng, &dh), dmin = RandomHalf(rng, &mh);
    int sc[8], m[8], q[256];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<int>(rng() % 64);
      m[j] = static_cast<int>(rng() % 64);
    }
    for (int& x : q) x = static_cast<int>(rng() % (five_bits ? 32 : 16));
    uint8_t scales[12];
    for (int j = 0; j < 4; ++j) {  // low six bits of 0-3, high two bits of 4-7 on top
      scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
      scales[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
      scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    uint8_t qh[32] = {}, qs[128];
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * k + l], hi = q[64 * k + 32 + l];
        qs[32 * k + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
        qh[l] |= static_cast<uint8_t>(((lo >> 4) & 1) << (2 * k) | ((hi >> 4) & 1) << (2 * k + 1));
      }
    }
    Put(c.bytes, dh);
    Put(c.bytes, mh);
    c.bytes.append(reinterpret_cast<const char*>(scales), 12);
    if (five_bits) c.bytes.append(reinterpret_cast<const char*>(qh), 32);
    c.bytes.append(reinterpret_cast<const char*>(qs), 128);
    for (int e = 0; e < 256; ++e) {
      const int j = e / 32;
      c.want.push_back(d * static_cast<float>(sc[j]) * static_cast<float>(q[e]) -
                       dmin * static_cast<float>(m[j]));
    }
  }
  return c;
}

Case Q6_K(std::mt19937_64& rng, int blocks) {
  Case c;
  for (int b = 0; b < blocks; ++b) {
    uint16_t dh;
    const float d = RandomHalf(rng, &dh);
    int q[256];
    int8_t sc[16];
    for (int& x : q) x = static_cast<int>(rng() % 64);
    for (int8_t& s : sc) s = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    uint8_t ql[128], qh[64];
    for (int h = 0; h < 2; ++h) {
      const int* v = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[64 * h + l] = static_cast<uint8_t>((v[l] & 15) | (v[l + 64] & 15) << 4);
        ql[64 * h + l + 32] = static_cast<uint8_t>((v[l + 32] & 15) | (v[l + 96] & 15) << 4);
        qh[32 * h + l] = static_cast<uint8_t>((v[l] >> 4) | (v[l + 32] >> 4) << 2 |
                                              (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
      }
    }
    c.bytes.append(reinterpret_cast<const char*>(ql), 128);
    c.bytes.append(reinterpret_cast<const char*>(qh), 64);
    c.bytes.append(reinterpret_cast<const char*>(sc), 16);
    Put(c.bytes, dh);
    for (int e = 0; e < 256; ++e) {
      c.want.push_back(d * static_cast<float>(sc[e / 16]) * static_cast<float>(q[e] - 32));
    }
  }
  return c;
}

TEST(GgufQuant, DequantizesEncodedBlocksExactly) {
  BANYAN_SEEDED_RNG(rng);
  const struct {
    uint32_t type;
    Case c;
  } cases[] = {{kGgmlTypeQ8_0, Q8_0(rng, 9)},
               {kGgmlTypeQ4_0, Q4_0(rng, 9)},
               {kGgmlTypeQ4_1, Legacy(rng, 9, false, true)},
               {kGgmlTypeQ5_0, Legacy(rng, 9, true, false)},
               {kGgmlTypeQ5_1, Legacy(rng, 9, true, true)},
               {kGgmlTypeQ4_K, K45(rng, 3, false)},
               {kGgmlTypeQ5_K, K45(rng, 3, true)},
               {kGgmlTypeQ6_K, Q6_K(rng, 3)}};
  for (const auto& [type, c] : cases) {
    SCOPED_TRACE(GgmlTypeName(type));
    const GgmlBlock blk = GgmlBlockOf(type);
    ASSERT_EQ(c.bytes.size() % blk.bytes, 0u);
    ASSERT_EQ(static_cast<int64_t>(c.want.size()), static_cast<int64_t>(c.bytes.size()) / blk.bytes * blk.values);
    uint64_t bytes = 0;
    ASSERT_TRUE(GgmlTensorBytes(type, blk.values, static_cast<int64_t>(c.want.size()) / blk.values,
                                "t", &bytes).ok());
    EXPECT_EQ(bytes, c.bytes.size());
    std::vector<float> got(c.want.size(), std::nanf(""));
    Dequantize(type, reinterpret_cast<const uint8_t*>(c.bytes.data()),
               static_cast<int64_t>(got.size()), got.data());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], c.want[i]) << "value " << i;
  }
}

TEST(GgufQuant, EncodedQ8_0IsCloseToItsSource) {
  BANYAN_SEEDED_RNG(rng);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(256);
  for (float& v : x) v = nd(rng);
  const std::string q = testing::EncodeQ8_0(x.data(), x.size());
  ASSERT_EQ(q.size(), 8u * 34);
  std::vector<float> y(x.size());
  Dequantize(kGgmlTypeQ8_0, reinterpret_cast<const uint8_t*>(q.data()), 256, y.data());
  for (size_t b = 0; b < 8; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    // Rounding to the code costs d / 2; storing d as f16 (relative 2^-11) up to 127 codes'
    // worth of it more: |error| <= d * (1/2 + 127 * 2^-11) < 0.563 d.
    for (size_t i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(y[32 * b + i] - x[32 * b + i]), amax / 127 * 0.563f) << 32 * b + i;
    }
  }
}

TEST(GgufQuant, MalformedTensorsAreRefused) {
  uint64_t bytes = 0;
  absl::Status s = GgmlTensorBytes(kGgmlTypeQ4_K, 64, 3, "blk.0.attn_q.weight", &bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("blk.0.attn_q.weight"), HasSubstr("256")));
  EXPECT_EQ(GgmlTensorBytes(10, 256, 1, "x", &bytes).code(), absl::StatusCode::kUnimplemented);

  // In a file: rows of 64 values cannot hold 256-value Q6_K blocks.
  const ModelWeights w = MakeDummyWeights(*NamedShapeConfig("tiny-d64-gqa4"), 1);
  testing::TempDir dir;
  testing::WriteBytes(dir.File("k.gguf"), testing::GgufFromWeights(w, testing::kGgmlF32,
                                                                   "blk.0.attn_k.weight",
                                                                   kGgmlTypeQ6_K));
  s = LoadGguf(dir.File("k.gguf"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("blk.0.attn_k.weight"), HasSubstr("Q6_K")));
  // The last tensor quantized but cut short: truncated.
  std::string q8 = testing::GgufFromWeights(w, testing::kGgmlQ8_0);
  q8.resize(q8.size() - 10);
  testing::WriteBytes(dir.File("t.gguf"), q8);
  s = LoadGguf(dir.File("t.gguf"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated"));
}

}  // namespace
}  // namespace banyan::model
