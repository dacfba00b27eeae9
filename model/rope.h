// RoPE inverse frequencies of a model, computed in one place for every backend:
//   inv_freq[i] = rope_theta^(-2i / head_dim), i in [0, head_dim / 2),
// then ModelConfig::rope_scaling's rule (kLlama3, see model.h), then its freq_divisors.
// Computed in double, rounded to float once.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "model/model.h"

namespace banyan::model {

std::vector<float> RopeInvFreq(const ModelConfig& cfg);

// Checks rope_scaling's parameters (positive factors, high_freq_factor > low_freq_factor,
// freq_divisors empty or head_dim / 2 positive values). InvalidArgument naming `source`.
absl::Status ValidateRopeScaling(const ModelConfig& cfg, const std::string& source);

}  // namespace banyan::model
