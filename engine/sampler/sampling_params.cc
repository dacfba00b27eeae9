#include "engine/sampler/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace banyan::engine {
namespace {

absl::Status Bad(const char* field, const auto& value, const std::string& range) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", range, ", got ", value));
}

}  // namespace

absl::Status Validate(const SamplingParams& p, int vocab_size) {
  BANYAN_CHECK(vocab_size > 0) << "vocab_size " << vocab_size;
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f)) {
    return Bad("temperature", p.temperature, "a finite number >= 0 (0 means greedy)");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return Bad("top_p", p.top_p, "in (0, 1]");
  }
  if (p.top_k < -1) {
    return Bad("top_k", p.top_k, ">= 1, or 0 or -1 to disable it");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return Bad("min_p", p.min_p, "in [0, 1]");
  }
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f)) {
    return Bad("repetition_penalty", p.repetition_penalty, "a finite number > 0 (1 disables it)");
  }
  if (!(std::fabs(p.frequency_penalty) <= kMaxAbsFrequencyPenalty)) {
    return Bad("frequency_penalty", p.frequency_penalty, "in [-2, 2]");
  }
  if (!(std::fabs(p.presence_penalty) <= kMaxAbsPresencePenalty)) {
    return Bad("presence_penalty", p.presence_penalty, "in [-2, 2]");
  }
  if (p.max_tokens < 1) {
    return Bad("max_tokens", p.max_tokens, ">= 1");
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return Bad("min_tokens", p.min_tokens, absl::StrCat("in [0, max_tokens = ", p.max_tokens, "]"));
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return Bad("stop_token_ids", id,
                 absl::StrCat("token ids in [0, ", vocab_size, ") for this model"));
    }
  }
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs) {
    return Bad("logprobs", p.logprobs, "in [0, 20]");
  }
  if (p.logit_bias.size() > static_cast<size_t>(kMaxLogitBiasTokens)) {
    return Bad("logit_bias", absl::StrCat(p.logit_bias.size(), " tokens"),
               absl::StrCat("at most ", kMaxLogitBiasTokens, " tokens"));
  }
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto [id, bias] = p.logit_bias[i];
    if (id < 0 || id >= vocab_size) {
      return Bad("logit_bias", absl::StrCat("token id ", id),
                 absl::StrCat("keyed by token ids in [0, ", vocab_size, ") for this model"));
    }
    if (i > 0 && id <= p.logit_bias[i - 1].first) {
      return Bad("logit_bias", absl::StrCat("token id ", id, " out of order or twice"),
                 "keyed by distinct token ids");
    }
    if (!(std::fabs(bias) <= kMaxAbsLogitBias)) {
      return Bad("logit_bias", absl::StrCat(bias, " for token ", id), "biases in [-100, 100]");
    }
  }
  return absl::OkStatus();
}

FinishReason CheckStop(int32_t token, int generated_count, const SamplingParams& params,
                       int eos_id) {
  return CheckStopIsEos(token, generated_count, params, token == eos_id);
}

FinishReason CheckStopIsEos(int32_t token, int generated_count, const SamplingParams& params,
                            bool is_eos) {
  if (!params.ignore_eos && is_eos) return FinishReason::kStop;
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
      params.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (generated_count >= params.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace banyan::engine
