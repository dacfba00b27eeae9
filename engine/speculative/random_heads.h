// Random Hydra heads for a base model, written in the head-set file format (docs/hydra.md,
// "File format"): for tests of speculation over models without trained heads, and for timing
// drafting on large shapes (bench/draft_heads_bench.cc). Random heads are rarely right.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace banyan::engine {

// Writes config.json and heads.safetensors for `base` into `dir` (created): `num_heads` heads
// with an MLP of `mlp_hidden`, matrices uniform with variance 1 / fan-in, small biases. Returns
// the config's path.
absl::StatusOr<std::string> WriteRandomHydraHeads(const model::ModelWeights& base, const std::string& dir,
                                                  int num_heads, int mlp_hidden, uint32_t seed);

}  // namespace banyan::engine
