// The engine-side check of a generation request, shared by every caller of the engine loop.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "model/model.h"
#include "engine/sampler/sampling_params.h"

namespace banyan::engine {

// Checks a request against the model: non-empty prompt, ids in the vocabulary, prompt plus
// max_tokens within the context (the message gives both numbers), valid sampling parameters,
// n >= 1.
absl::Status ValidateGeneration(const model::ModelConfig& config, std::span<const int32_t> prompt,
                                const SamplingParams& params, int n);

}  // namespace banyan::engine
