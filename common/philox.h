// The sampler's random stream: Philox4x32-10, counter-based, so that the uniform number used for
// one sample is a pure function of (seed, stream, step).
//
// Contract (every backend must reproduce this bit for bit; the header is plain C++ and also
// compiles as CUDA, so the CUDA backend should include it rather than re-implement it):
//
//   key     = { uint32(seed), uint32(seed >> 32) }
//   counter = { uint32(step), uint32(step >> 32), stream, 0 }
//   x       = Philox4x32-10(counter, key)            // Salmon et al., SC'11; Random123 spec
//   u       = float(x[0] >> 8) * 2^-24                // exact; u in [0, 1 - 2^-24]
//
// - seed:   the request's seed (SamplingParams::seed, or RandomSeed() at admission).
// - stream: the index of the sample within the request (0 .. n-1 for OpenAI's `n`), so that the
//           n choices of one seeded request differ but stay reproducible.
// - step:   the number of tokens this sequence has generated before this one (0 for the first
//           generated token). It does not depend on the batch, the row, or the call order.
//
// The known-answer vectors of Random123's `kat_vectors` are checked in the tests.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BANYAN_HOST_DEVICE __host__ __device__
#else
#define BANYAN_HOST_DEVICE
#endif

namespace banyan {

// Philox4x32 constants: round multipliers and the Weyl key increments.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

struct Philox4x32Block {
  uint32_t v[4];
};

// One Philox4x32-10 block: `ctr` encrypted under `key`.
BANYAN_HOST_DEVICE inline Philox4x32Block Philox4x32_10(Philox4x32Block ctr, uint32_t key0,
                                                        uint32_t key1) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {  // the key is bumped before every round but the first
      key0 += kPhiloxW0;
      key1 += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4x32Block{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// The top 24 bits of a word as a float in [0, 1): every value is exactly representable, so the
// conversion is the same on every IEEE-754 machine and needs no rounding mode.
BANYAN_HOST_DEVICE inline float ToUnitFloat(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// The uniform number for sample `step` of stream `stream` of a request seeded with `seed`.
BANYAN_HOST_DEVICE inline float SampleUniform(uint64_t seed, uint32_t stream, uint64_t step) {
  const Philox4x32Block ctr{
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), stream, 0u}};
  const Philox4x32Block x =
      Philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return ToUnitFloat(x.v[0]);
}

}  // namespace banyan
