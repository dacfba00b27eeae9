#include "model/rope.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace banyan::model {

std::vector<float> RopeInvFreq(const ModelConfig& cfg) {
  const int d = cfg.head_dim();
  const RopeScaling& rs = cfg.rope_scaling;
  std::vector<float> out(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) {
    double f = std::pow(static_cast<double>(cfg.rope_theta), -2.0 * i / static_cast<double>(d));
    if (rs.type == RopeScalingType::kLlama3) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      const double old_len = rs.original_max_pos;
      if (wavelen > old_len / rs.low_freq_factor) {
        f /= rs.factor;  // low frequencies: interpolated
      } else if (wavelen >= old_len / rs.high_freq_factor) {
        // In between: a linear blend of scaled and unscaled, by old_len / wavelen.
        const double smooth =
            (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
    if (!rs.freq_divisors.empty()) f /= rs.freq_divisors[static_cast<size_t>(i)];
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

absl::Status ValidateRopeScaling(const ModelConfig& cfg, const std::string& source) {
  const RopeScaling& rs = cfg.rope_scaling;
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid rope scaling: ", parts...));
  };
  if (rs.type == RopeScalingType::kLlama3) {
    if (!(std::isfinite(rs.factor) && rs.factor > 0)) return bad("factor ", rs.factor);
    if (!(std::isfinite(rs.low_freq_factor) && rs.low_freq_factor > 0)) {
      return bad("low_freq_factor ", rs.low_freq_factor);
    }
    if (!(std::isfinite(rs.high_freq_factor) && rs.high_freq_factor > rs.low_freq_factor)) {
      return bad("high_freq_factor ", rs.high_freq_factor, " must exceed low_freq_factor ",
                 rs.low_freq_factor);
    }
    if (rs.original_max_pos <= 0) {
      return bad("original_max_position_embeddings ", rs.original_max_pos);
    }
  }
  if (!rs.freq_divisors.empty()) {
    if (rs.freq_divisors.size() != static_cast<size_t>(cfg.head_dim() / 2)) {
      return bad(rs.freq_divisors.size(), " frequency factors for head_dim ", cfg.head_dim(),
                 " (need ", cfg.head_dim() / 2, ")");
    }
    for (float v : rs.freq_divisors) {
      if (!(std::isfinite(v) && v > 0)) return bad("frequency factor ", v, " is not positive");
    }
  }
  return absl::OkStatus();
}

}  // namespace banyan::model
