#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "common/check.h"

namespace banyan::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float Sanitized(float x) { return std::isnan(x) ? -kInf : x; }

// The ranking of steps 2 and 6: higher logit first, lower id on ties. A strict total order as
// long as there is no NaN, which Sanitized() guarantees.
struct ByLogitDesc {
  const float* z;
  bool operator()(int32_t a, int32_t b) const { return z[a] > z[b] || (z[a] == z[b] && a < b); }
};

// log_softmax of the raw logits, in a form that also covers the +inf limit.
struct LogSoftmax {
  float max;        // the largest logit, > -inf
  double log_mass;  // log(sum_i exp(x_i - max)); log(#{x_i = +inf}) when max = +inf

  float LogProb(float x) const {
    if (max == kInf) return x == kInf ? static_cast<float>(-log_mass) : -kInf;
    return static_cast<float>(static_cast<double>(x) - max - log_mass);
  }
};

LogSoftmax ComputeLogSoftmax(std::span<const float> x) {
  const float max = *std::max_element(x.begin(), x.end());
  double mass = 0.0;
  if (max == kInf) {
    mass = static_cast<double>(std::count(x.begin(), x.end(), kInf));
  } else {
    // x_i = -inf, or x_i - max overflowing to -inf, contributes exp(-inf) = 0.
    for (float xi : x) mass += std::exp(xi - max);
  }
  return {max, std::log(mass)};
}

std::vector<std::pair<int32_t, float>> TopLogprobs(std::span<const float> x, int k,
                                                   const LogSoftmax& lsm,
                                                   std::vector<int32_t>& ids) {
  std::vector<std::pair<int32_t, float>> top;
  k = std::min<int>(k, static_cast<int>(x.size()));
  if (k <= 0) return top;
  ids.resize(x.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), ByLogitDesc{x.data()});
  top.reserve(k);
  for (int r = 0; r < k; ++r) top.emplace_back(ids[r], lsm.LogProb(x[ids[r]]));
  return top;
}

absl::Status NoDistributionError(bool after_penalties) {
  return absl::InternalError(
      after_penalties
          ? "sampler: the penalties pushed every logit to -inf; no token can be sampled"
          : "sampler: every logit is NaN or -inf; the model produced no usable distribution");
}

// Steps 5-7 of the header. z: penalised logits, at least one > -inf.
int32_t SampleFiltered(std::span<const float> z, const SamplingParams& p, float u,
                       SamplerScratch& s) {
  const float z_max = *std::max_element(z.begin(), z.end());
  std::vector<int32_t>& ids = s.ids;
  ids.clear();
  for (size_t i = 0; i < z.size(); ++i) {
    if (z[i] > -kInf) ids.push_back(static_cast<int32_t>(i));
  }
  size_t n = ids.size();
  const ByLogitDesc by_logit{z.data()};
  bool reordered = false;

  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::nth_element(ids.begin(), ids.begin() + p.top_k, ids.begin() + n, by_logit);
    n = static_cast<size_t>(p.top_k);
    reordered = true;
  }

  // Weights only for the survivors of top-k: the exps are most of the cost.
  std::vector<float>& w = s.weights;
  w.resize(z.size());
  for (size_t j = 0; j < n; ++j) {
    const int32_t id = ids[j];
    if (z_max == kInf) {
      w[id] = z[id] == kInf ? 1.0f : 0.0f;
    } else {
      // z - z_max <= 0, so exp never overflows, and the top token's weight is exactly 1.
      w[id] = std::exp((z[id] - z_max) / p.temperature);
    }
  }

  if (p.top_p < 1.0f) {
    std::sort(ids.begin(), ids.begin() + n, by_logit);
    reordered = true;
    double mass = 0.0;
    for (size_t j = 0; j < n; ++j) mass += w[ids[j]];
    const double limit = static_cast<double>(p.top_p) * mass;
    double before = 0.0;  // mass of the ranks above the current one
    size_t keep = 0;
    for (; keep < n; ++keep) {
      if (keep > 0 && before >= limit) break;
      before += w[ids[keep]];
    }
    n = keep;
  }

  if (p.min_p > 0.0f) {
    // The top token has w = 1, so w_i >= min_p is p_i >= min_p * p_max, and it always survives.
    auto end =
        std::remove_if(ids.begin(), ids.begin() + n, [&](int32_t id) { return w[id] < p.min_p; });
    n = static_cast<size_t>(end - ids.begin());
  }
  BANYAN_CHECK(n > 0) << "the most likely token must survive every filter";

  if (reordered) std::sort(ids.begin(), ids.begin() + n);
  double mass = 0.0;
  for (size_t j = 0; j < n; ++j) mass += w[ids[j]];
  const double target = static_cast<double>(u) * mass;
  double cdf = 0.0;
  for (size_t j = 0; j < n; ++j) {
    cdf += w[ids[j]];
    if (cdf > target) return ids[j];
  }
  // Unreachable in exact arithmetic (u < 1 and cdf ends at mass); kept for safety.
  return ids[n - 1];
}

}  // namespace

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | static_cast<uint64_t>(rd());
}

uint64_t AdmissionSeed(const SamplingParams& params) {
  return params.has_seed ? params.seed : RandomSeed();
}

SequenceSamplingState::SequenceSamplingState(uint64_t seed, std::span<const int32_t> prompt_tokens,
                                             uint32_t stream)
    : seed_(seed), stream_(stream), prompt_tokens_(prompt_tokens.begin(), prompt_tokens.end()) {
  for (int32_t t : prompt_tokens_) BANYAN_CHECK(t >= 0) << "prompt token id " << t;
}

void SequenceSamplingState::Accept(int32_t token) {
  BANYAN_CHECK(token >= 0) << "token id " << token;
  if (count_tokens_) ++generated_counts_[token];
  ++step_;
}

SequenceSamplingState SequenceSamplingState::Fork(uint32_t stream) const {
  SequenceSamplingState copy = *this;
  copy.stream_ = stream;
  return copy;
}

int32_t SequenceSamplingState::GeneratedCount(int32_t token) const {
  auto it = generated_counts_.find(token);
  return it == generated_counts_.end() ? 0 : it->second;
}

void ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                    const SequenceSamplingState& state, uint64_t step_ahead) {
  const float rep = params.repetition_penalty;
  const float freq = params.frequency_penalty;
  const float presence = params.presence_penalty;
  const auto at = [&](int32_t id) -> float& {
    BANYAN_CHECK(static_cast<size_t>(id) < logits.size())
        << "token id " << id << " outside a vocabulary of " << logits.size();
    return logits[id];
  };
  const auto repeat = [rep](float& l) { l = l > 0.0f ? l / rep : l * rep; };

  for (const auto& [id, bias] : params.logit_bias) at(id) = at(id) + bias;
  if (state.step() + step_ahead < static_cast<uint64_t>(params.min_tokens)) {
    for (int32_t id : params.min_tokens_banned) at(id) = -kInf;
  }
  if (rep != 1.0f) {
    for (int32_t id : state.prompt_tokens()) {
      if (!state.generated_counts().contains(id)) repeat(at(id));
    }
  }
  if (!params.HasPenalties()) return;
  for (const auto& [id, count] : state.generated_counts()) {
    float& l = at(id);
    if (rep != 1.0f) repeat(l);
    l = l - freq * static_cast<float>(count);
    l = l - presence;  // count > 0 for every entry
  }
}

void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> allowed) {
  BANYAN_CHECK(allowed.size() * 64 >= logits.size())
      << "a mask of " << allowed.size() * 64 << " bits for " << logits.size() << " tokens";
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    const uint64_t bits = allowed[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(logits.size(), (w + 1) * 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (((bits >> (i & 63)) & 1) == 0) logits[i] = -kInf;
    }
  }
}

absl::StatusOr<SampleResult> SampleWithUniform(std::span<const float> logits,
                                               const SamplingParams& params,
                                               const SequenceSamplingState& state, float u,
                                               SamplerScratch* scratch, uint64_t step_ahead,
                                               std::span<const uint64_t> allowed) {
  BANYAN_CHECK(!logits.empty()) << "empty logits";
  BANYAN_CHECK(u >= 0.0f && u < 1.0f) << "u = " << u;
  SamplerScratch local;
  SamplerScratch& s = scratch != nullptr ? *scratch : local;

  std::vector<float>& z = s.logits;
  z.resize(logits.size());
  std::transform(logits.begin(), logits.end(), z.begin(), Sanitized);
  const LogSoftmax raw = ComputeLogSoftmax(z);
  if (raw.max == -kInf) return NoDistributionError(/*after_penalties=*/false);

  SampleResult result;
  result.top_logprobs = TopLogprobs(z, params.logprobs, raw, s.ids);

  if (!allowed.empty()) ApplyTokenMask(z, allowed);
  ApplyPenalties(z, params, state, step_ahead);
  if (*std::max_element(z.begin(), z.end()) == -kInf) {
    return NoDistributionError(/*after_penalties=*/true);
  }
  if (params.temperature < kGreedyTemperature) {
    // max_element returns the first maximum: the lowest id on ties.
    result.token = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  } else {
    result.token = SampleFiltered(z, params, u, s);
  }
  result.logprob = raw.LogProb(Sanitized(logits[result.token]));
  return result;
}

absl::StatusOr<SampleResult> Sample(std::span<const float> logits, const SamplingParams& params,
                                    const SequenceSamplingState& state, SamplerScratch* scratch) {
  const float u = SampleUniform(state.seed(), state.stream(), state.step());
  return SampleWithUniform(logits, params, state, u, scratch);
}

}  // namespace banyan::engine
