// Helpers for the FP8 tests: the E4M3 format written out from its definition (an oracle that
// shares no code with model/dtype.cc), and tiny random FP8 checkpoints in both layouts together
// with the dense weights they stand for.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"

namespace banyan::model::testing {

// The value of an E4M3 ("e4m3fn") code by the OCP definition: sign, exponent bits 6..3 (bias
// 7), mantissa bits 2..0; exponent 0 is subnormal (mantissa * 2^-9); S.1111.111 is NaN.
double Fp8E4M3Definition(uint8_t code);

// The E4M3 code nearest to x (a finite double) among the finite codes, ties to the code with an
// even mantissa, magnitudes beyond 448 to +-448: brute force over the 254 finite codes.
uint8_t NearestFp8E4M3(double x);

enum class Fp8Layout { kCtPerTensor, kCtPerChannel, kFineGrained };

struct Fp8Checkpoint {
  nlohmann::ordered_json config;  // config.json, with its quantization_config
  std::vector<RawEntry> entries;  // model.safetensors, as written
  // The same model as dense fp32 weights: every projection value computed in double from the
  // definition (Fp8E4M3Definition(code) * scale), exact in fp32 because codes have 4 and
  // scales at most 8 significant bits.
  ModelWeights reference;
};

// A random model of config `c` whose seven projections per block are FP8 in `layout`, the other
// tensors F32; scales stored as BF16 when `bf16_scales` (else F32, still with 8 significant
// bits). Codes are random finite values of magnitude below 4, scales ~ 1 / (2 sqrt(in)), so
// the activations stay O(1).
Fp8Checkpoint MakeFp8Checkpoint(const ModelConfig& c, Fp8Layout layout, bool bf16_scales,
                                std::mt19937_64& rng);

// Writes dir/config.json and dir/model.safetensors.
void WriteCheckpoint(const std::string& dir, const nlohmann::ordered_json& config,
                     const std::vector<RawEntry>& entries);

// The entry named `name` (ASSERT-style: aborts the test if absent).
RawEntry& EntryNamed(std::vector<RawEntry>& entries, const std::string& name);

// Bytes of a float vector as BF16 (values must be BF16-exact).
std::string Bf16Bytes(const std::vector<float>& v);

}  // namespace banyan::model::testing
