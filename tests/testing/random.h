// Test helpers: fresh randomness on every run, with the seed printed so a failure can be
// replayed (BANYAN_TEST_SEED=<seed> pins it).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace banyan::testing {

inline uint64_t FreshSeed() {
  if (const char* env = std::getenv("BANYAN_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Usage: auto rng = SeededRng(); -- records the seed in the failure message of this scope.
#define BANYAN_SEEDED_RNG(var)                                                      \
  const uint64_t var##_seed = ::banyan::testing::FreshSeed();                       \
  SCOPED_TRACE("BANYAN_TEST_SEED=" + std::to_string(var##_seed));                   \
  std::mt19937_64 var(var##_seed)

}  // namespace banyan::testing
