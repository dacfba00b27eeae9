#include "server/common/validation.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "server/common/server_context.h"

namespace banyan::server {
bool IsValidUtf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 1;
    if (!utf8::DecodeFirst(s.substr(i), &len)) {
      if (bad_offset != nullptr) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::string CacheNamespace(std::string_view tenant, std::string_view user,
                           std::string_view cache_salt) {
  auto sv = [](std::string_view v) { return absl::string_view(v.data(), v.size()); };
  return absl::StrCat("t", tenant.size(), ":", sv(tenant), "|u", user.size(), ":", sv(user), "|s",
                      cache_salt.size(), ":", sv(cache_salt));
}

absl::Status CheckPromptBytes(std::string_view prompt, const ServerOptions& options,
                              std::string_view param) {
  return CheckPromptSize(static_cast<int64_t>(prompt.size()), options, param);
}

absl::Status CheckPromptSize(int64_t bytes, const ServerOptions& options,
                             std::string_view param) {
  if (bytes <= options.max_prompt_bytes) return absl::OkStatus();
  return InvalidParam(param,
                      absl::StrCat("the prompt is ", bytes, " bytes long; this server "
                                   "accepts at most ", options.max_prompt_bytes,
                                   " bytes (max_prompt_bytes)"),
                      "prompt_too_long");
}

absl::Status ValidatePromptTokens(std::span<const int32_t> prompt, int vocab_size,
                                  std::string_view param) {
  if (prompt.empty()) {
    return InvalidParam(param, "the prompt is empty; send at least one token of text");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return InvalidParam(
          param, absl::StrCat("token id ", prompt[i], " at position ", i,
                              " is outside this model's vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateN(int64_t n, int max_n) {
  if (n < 1 || n > max_n) {
    return InvalidParam("n", absl::StrCat("n must be between 1 and ", max_n, ", got ", n));
  }
  return absl::OkStatus();
}

absl::Status ValidateStop(std::span<const std::string> stop) {
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return InvalidParam("stop", absl::StrCat("at most ", kMaxStopStrings,
                                             " stop strings are accepted, got ", stop.size()));
  }
  for (const std::string& s : stop) {
    if (s.empty()) return InvalidParam("stop", "stop strings must not be empty");
    if (s.size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return InvalidParam("stop", absl::StrCat("a stop string is ", s.size(),
                                               " bytes long; the limit is ", kMaxStopStringBytes));
    }
    if (!IsValidUtf8(s)) return InvalidParam("stop", "a stop string is not valid UTF-8");
  }
  return absl::OkStatus();
}

absl::Status ValidateSampling(const engine::SamplingParams& p, int vocab_size) {
  // Written so that NaN fails every comparison.
  auto bad = [](std::string_view field, auto value, std::string_view range) {
    return InvalidParam(
        field, absl::StrCat(absl::string_view(field.data(), field.size()), " must be ",
                            absl::string_view(range.data(), range.size()), ", got ", value));
  };
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f)) {
    return bad("temperature", p.temperature, "a finite number >= 0 (0 means greedy)");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "in (0, 1]");
  if (p.top_k < -1) return bad("top_k", p.top_k, ">= 1, or 0 or -1 to disable it");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "in [0, 1]");
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f)) {
    return bad("repetition_penalty", p.repetition_penalty, "a finite number > 0 (1 disables it)");
  }
  if (!(std::fabs(p.frequency_penalty) <= engine::kMaxAbsFrequencyPenalty)) {
    return bad("frequency_penalty", p.frequency_penalty, "in [-2, 2]");
  }
  if (!(std::fabs(p.presence_penalty) <= engine::kMaxAbsPresencePenalty)) {
    return bad("presence_penalty", p.presence_penalty, "in [-2, 2]");
  }
  if (p.logprobs < 0 || p.logprobs > engine::kMaxLogprobs) {
    return bad("logprobs", p.logprobs, "in [0, 20]");
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return bad("stop_token_ids", id, absl::StrCat("a token id in [0, ", vocab_size, ")"));
    }
  }
  if (!p.logit_bias.empty()) {  // the engine's checks, named after the field
    engine::SamplingParams bias_only;
    bias_only.logit_bias = p.logit_bias;
    if (absl::Status s = engine::Validate(bias_only, vocab_size); !s.ok()) {
      return InvalidParam("logit_bias", std::string(s.message()));
    }
  }
  // The engine's own check, in case it knows more than the list above.
  engine::SamplingParams copy = p;
  copy.max_tokens = 1;
  copy.min_tokens = 0;  // checked against the resolved max_tokens in BuildRequest
  if (p.min_tokens < 0) return bad("min_tokens", p.min_tokens, ">= 0");
  absl::Status s = engine::Validate(copy, vocab_size);
  if (!s.ok()) return InvalidParam("", std::string(s.message()));
  return absl::OkStatus();
}

absl::StatusOr<int> ResolveMaxTokens(std::optional<int64_t> requested, int default_max_tokens,
                                     int prompt_tokens, int context_tokens, std::string_view param,
                                     std::string_view prompt_param) {
  if (requested.has_value() && *requested < 1) {
    return InvalidParam(param, absl::StrCat(absl::string_view(param.data(), param.size()),
                                            " must be at least 1, got ", *requested));
  }
  const int64_t left = static_cast<int64_t>(context_tokens) - prompt_tokens;
  if (left < 1) {
    return InvalidParam(
        prompt_param,
        absl::StrCat("This model's maximum context length is ", context_tokens,
                     " tokens. However, your prompt has ", prompt_tokens,
                     " tokens, which leaves no room for the completion (", prompt_tokens,
                     " prompt tokens + at least 1 completion token > ", context_tokens,
                     "). Please shorten the prompt."),
        "context_length_exceeded");
  }
  int64_t want;
  if (requested.has_value()) {
    want = *requested;
  } else if (default_max_tokens > 0) {
    // The default never makes a fitting prompt fail: it is clipped to what is left.
    want = std::min<int64_t>(default_max_tokens, left);
  } else {
    want = left;
  }
  if (want > left) {
    return InvalidParam(
        param,
        absl::StrCat("This model's maximum context length is ", context_tokens,
                     " tokens. However, you requested ", static_cast<int64_t>(prompt_tokens) + want,
                     " tokens (", prompt_tokens, " in the prompt, ", want,
                     " for the completion). Please reduce the prompt or ",
                     absl::string_view(param.data(), param.size()), " (at most ", left,
                     " for this prompt)."),
        "context_length_exceeded");
  }
  return static_cast<int>(want);
}

absl::StatusOr<scheduler::Request> BuildRequest(GenerationInput input, const ModelLimits& limits,
                                                int default_max_tokens, std::string id) {
  if (absl::Status s = ValidatePromptTokens(input.prompt, limits.vocab_size, input.prompt_field);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateN(input.n, limits.max_n); !s.ok()) return s;
  if (absl::Status s = ValidateStop(input.stop); !s.ok()) return s;
  if (absl::Status s = ValidateSampling(input.params, limits.vocab_size); !s.ok()) return s;
  if (input.priority < -kMaxAbsPriority || input.priority > kMaxAbsPriority) {
    return InvalidParam("priority", absl::StrCat("priority must be in [", -kMaxAbsPriority, ", ",
                                                 kMaxAbsPriority, "], got ", input.priority));
  }
  if (input.user.size() > kMaxTenantBytes) {
    return InvalidParam("user", absl::StrCat("user is ", input.user.size(),
                                             " bytes long; the limit is ", kMaxTenantBytes));
  }
  if (input.cache_salt.size() > kMaxTenantBytes) {
    return InvalidParam("cache_salt", absl::StrCat("cache_salt is ", input.cache_salt.size(),
                                                   " bytes long; the limit is ", kMaxTenantBytes));
  }
  absl::StatusOr<int> max_tokens =
      ResolveMaxTokens(input.max_tokens, default_max_tokens, static_cast<int>(input.prompt.size()),
                       limits.context_tokens, input.max_tokens_field, input.prompt_field);
  if (!max_tokens.ok()) return max_tokens.status();
  if (input.params.min_tokens > *max_tokens) {
    return InvalidParam("min_tokens", absl::StrCat("min_tokens (", input.params.min_tokens,
                                                   ") must be at most max_tokens (", *max_tokens,
                                                   ")"));
  }

  scheduler::Request r;
  r.id = std::move(id);
  r.prompt = std::move(input.prompt);
  r.params = std::move(input.params);
  r.params.max_tokens = *max_tokens;
  r.stop = std::move(input.stop);
  r.n = static_cast<int>(input.n);
  r.priority = static_cast<int>(input.priority);
  r.cache_namespace = CacheNamespace(input.tenant, input.user, input.cache_salt);
  r.constraint = std::move(input.constraint);
  return r;
}

}  // namespace banyan::server
