// A test fixture whose random data is fresh on every run. On failure it prints the seed; set
// BANYAN_TEST_SEED=<seed> to replay that run.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace banyan::engine {

inline uint64_t TestSeed() {
  if (const char* env = std::getenv("BANYAN_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

class RandomizedTest : public ::testing::Test {
 protected:
  RandomizedTest() : test_seed_(TestSeed()), rng_(test_seed_) {}

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "[ seed ] this test's random data came from BANYAN_TEST_SEED=" << test_seed_
                << "\n";
    }
  }

  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  int UniformInt(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  uint64_t Bits64() { return rng_(); }

  // Gaussian logits of the given standard deviation.
  std::vector<float> RandomLogits(int vocab, float stddev) {
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> logits(vocab);
    for (float& l : logits) l = normal(rng_);
    return logits;
  }

  uint64_t test_seed_;
  std::mt19937_64 rng_;
};

}  // namespace banyan::engine
