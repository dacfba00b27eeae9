#include "engine/request_check.h"

#include "absl/strings/str_cat.h"

namespace banyan::engine {

absl::Status ValidateGeneration(const model::ModelConfig& config, std::span<const int32_t> prompt,
                                const SamplingParams& params, int n) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int32_t t : prompt) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", t, " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n must be >= 1, got ", n));
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", prompt.size(), " tokens) plus max_tokens (", params.max_tokens, ") is ",
        total, " tokens, more than the model's context of ", config.max_seq_len));
  }
  return Validate(params, config.vocab_size);
}

}  // namespace banyan::engine
