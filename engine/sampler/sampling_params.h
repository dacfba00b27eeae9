// Per-request sampling parameters, their validation, and the token-level stop check.
//
// Field meanings and ranges follow the OpenAI API and vLLM. Validate() is run once at admission
// (by both front ends); the sampler assumes valid parameters afterwards.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace banyan::engine {

struct SamplingParams {
  // Divides the penalised logits. 0 (or anything below kGreedyTemperature, see sampler.h)
  // means greedy decoding. Range: finite, >= 0.
  float temperature = 1.0f;
  // Nucleus: keep the smallest set of most likely tokens whose mass is >= top_p. Range: (0, 1].
  float top_p = 1.0f;
  // Keep the top_k most likely tokens. 0 or -1: off. Range: >= -1.
  int top_k = 0;
  // Keep tokens whose probability is >= min_p * (probability of the most likely token).
  // Range: [0, 1]; 0 is off.
  float min_p = 0.0f;
  // Over prompt and generated tokens: a positive logit is divided by it, any other multiplied.
  // Range: > 0; 1 is off.
  float repetition_penalty = 1.0f;
  // Over generated tokens only: logit -= frequency_penalty * count. Range: [-2, 2].
  float frequency_penalty = 0.0f;
  // Over generated tokens only: logit -= presence_penalty * (count > 0). Range: [-2, 2].
  float presence_penalty = 0.0f;
  // The request's seed, meaningful only when has_seed. Without one the scheduler draws
  // RandomSeed() at admission, so every sequence still has a fixed seed for its lifetime.
  uint64_t seed = 0;
  bool has_seed = false;
  // Upper bound on generated tokens (the prompt not counted). Range: >= 1.
  int max_tokens = 16;
  // vLLM's min_tokens: until this many tokens are generated, the ids in min_tokens_banned (the
  // model's end-of-sequence ids unless ignore_eos, and stop_token_ids) cannot be sampled (their
  // logits are -inf) and stop strings do not end the sample. Range: [0, max_tokens].
  int min_tokens = 0;
  // Set by the engine loop at admission from the model and stop_token_ids (not by clients):
  // sorted, distinct, in [0, vocab).
  std::vector<int32_t> min_tokens_banned;
  // Sampling any of these finishes the sequence with kStop (the token is emitted). Each must be
  // a valid token id.
  std::vector<int32_t> stop_token_ids;
  // When true the EOS token does not finish the sequence (stop_token_ids still do).
  bool ignore_eos = false;
  // How many top log-probabilities to return per token. Range: [0, 20].
  int logprobs = 0;
  // Added to the logits of these tokens before the penalties (OpenAI's logit_bias, applied
  // first as vLLM does): (token id, bias) pairs in ascending id order, ids distinct and in
  // [0, vocab), biases in [-100, 100], at most kMaxLogitBiasTokens of them. -100 all but bans a
  // token, +100 all but forces it. Log-probabilities stay those of the raw model.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Whether any of the three penalties is on (step 3 of sampler.h changes the logits).
  bool HasPenalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  // Whether step 3 of sampler.h may change a logit (a bias, min_tokens or a penalty).
  bool ChangesLogits() const { return HasPenalties() || !logit_bias.empty() || min_tokens > 0; }
};

inline constexpr int kMaxLogprobs = 20;
inline constexpr float kMaxAbsFrequencyPenalty = 2.0f;
inline constexpr float kMaxAbsPresencePenalty = 2.0f;
inline constexpr float kMaxAbsLogitBias = 100.0f;
inline constexpr int kMaxLogitBiasTokens = 1024;

// Returns InvalidArgument naming the first bad field, its value and the accepted range.
// vocab_size: the model's vocabulary size (> 0), used to check stop_token_ids.
absl::Status Validate(const SamplingParams& params, int vocab_size);

enum class FinishReason {
  kNone,    // keep generating
  kStop,    // EOS (unless ignore_eos) or one of stop_token_ids was sampled
  kLength,  // max_tokens reached
};

// Decides whether the sequence finishes after sampling `token`.
// generated_count: tokens generated so far, *including* `token`.
// A stop token takes precedence over the length limit (OpenAI reports "stop" when both hold).
// Stop strings are not handled here; they need detokenised text and live in the server.
FinishReason CheckStop(int32_t token, int generated_count, const SamplingParams& params,
                       int eos_id);
// The same, where the caller has decided whether `token` is one of the model's end-of-sequence
// ids (a model may have several: ModelConfig::IsStop).
FinishReason CheckStopIsEos(int32_t token, int generated_count, const SamplingParams& params,
                            bool is_eos);

}  // namespace banyan::engine
