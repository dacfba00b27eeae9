#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/sampler/randomized_test.h"

namespace banyan::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const SequenceSamplingState kFresh(/*seed=*/1234, {});

int32_t Argmax(const std::vector<float>& z) {
  int32_t best = 0;
  for (size_t i = 1; i < z.size(); ++i) {
    if (z[i] > z[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

SampleResult MustSample(std::span<const float> logits, const SamplingParams& p,
                        const SequenceSamplingState& state, SamplerScratch* scratch = nullptr) {
  absl::StatusOr<SampleResult> r = Sample(logits, p, state, scratch);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SampleResult{};
}

// The distribution of steps 5-7 in sampler.h, computed independently: double precision,
// normalised probabilities, filters written from their definitions. z: penalised logits, all
// finite. `margin` is how far top_p and min_p are from flipping a decision, so that tests can
// avoid draws where float rounding legitimately decides.
struct Reference {
  std::vector<double> p;
  double margin = std::numeric_limits<double>::infinity();
};

Reference ReferenceDistribution(const std::vector<float>& z, const SamplingParams& params) {
  const int vocab = static_cast<int>(z.size());
  const double z_max = *std::max_element(z.begin(), z.end());
  std::vector<double> q(vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += q[i] = std::exp((z[i] - z_max) / params.temperature);
  for (double& x : q) x /= sum;

  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
  int n = vocab;
  if (params.top_k > 0) n = std::min(n, params.top_k);

  Reference ref;
  if (params.top_p < 1.0f) {
    double mass = 0.0;
    for (int r = 0; r < n; ++r) mass += q[order[r]];
    double before = 0.0;
    int kept = n;
    for (int r = 0; r < n; ++r) {
      if (r > 0) ref.margin = std::min(ref.margin, std::fabs(before / mass - params.top_p));
      if (r > 0 && before / mass >= params.top_p && kept == n) kept = r;
      before += q[order[r]];
    }
    n = kept;
  }
  std::vector<bool> keep(vocab, false);
  for (int r = 0; r < n; ++r) keep[order[r]] = true;
  if (params.min_p > 0.0f) {
    const double p_max = q[order[0]];
    for (int i = 0; i < vocab; ++i) {
      ref.margin = std::min(ref.margin, std::fabs(q[i] / p_max - params.min_p));
      if (q[i] < params.min_p * p_max) keep[i] = false;
    }
  }
  ref.p.assign(vocab, 0.0);
  double kept_mass = 0.0;
  for (int i = 0; i < vocab; ++i) kept_mass += keep[i] ? q[i] : 0.0;
  for (int i = 0; i < vocab; ++i) ref.p[i] = keep[i] ? q[i] / kept_mass : 0.0;
  return ref;
}

// The exact distribution Sample() realises: the token frequencies over a uniform grid of u.
// Each token's frequency is within 1/grid of its probability.
std::vector<double> Sweep(const std::vector<float>& logits, const SamplingParams& p,
                          const SequenceSamplingState& state, int grid) {
  std::vector<double> freq(logits.size(), 0.0);
  SamplerScratch scratch;
  for (int j = 0; j < grid; ++j) {
    const float u = (static_cast<float>(j) + 0.5f) / static_cast<float>(grid);
    absl::StatusOr<SampleResult> r = SampleWithUniform(logits, p, state, u, &scratch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) freq[r->token] += 1.0 / grid;
  }
  return freq;
}

void ExpectSameDistribution(const std::vector<double>& got, const std::vector<double>& want,
                            double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance) << "token " << i;
    if (want[i] == 0.0) {
      EXPECT_EQ(got[i], 0.0) << "token " << i << " was filtered out";
    }
  }
}

// Upper tail bound of chi-square with `df` degrees of freedom at z standard deviations
// (Wilson-Hilferty); z = 5 is p ~ 3e-7.
double ChiSquareBound(int df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

class SamplerTest : public RandomizedTest {};

TEST_F(SamplerTest, StateCountsTokensAndSteps) {
  const std::vector<int32_t> prompt = {5, 3, 5, 9};
  SequenceSamplingState s(/*seed=*/77, prompt, /*stream=*/2);
  EXPECT_EQ(s.seed(), 77u);
  EXPECT_EQ(s.stream(), 2u);
  EXPECT_EQ(s.step(), 0u);
  EXPECT_EQ(s.prompt_tokens(), (absl::flat_hash_set<int32_t>{3, 5, 9}));
  s.Accept(4);
  s.Accept(5);
  s.Accept(4);
  EXPECT_EQ(s.step(), 3u);
  EXPECT_EQ(s.GeneratedCount(4), 2);
  EXPECT_EQ(s.GeneratedCount(5), 1);  // prompt occurrences do not count
  EXPECT_EQ(s.GeneratedCount(3), 0);
  const SequenceSamplingState f = s.Fork(7);
  EXPECT_EQ(f.stream(), 7u);
  EXPECT_EQ(f.seed(), 77u);
  EXPECT_EQ(f.step(), 3u);
  EXPECT_EQ(f.generated_counts(), s.generated_counts());
}

TEST_F(SamplerTest, AdmissionSeedKeepsTheRequestSeed) {
  SamplingParams p;
  p.seed = Bits64();
  p.has_seed = true;
  EXPECT_EQ(AdmissionSeed(p), p.seed);
  p.has_seed = false;
  EXPECT_NE(RandomSeed(), RandomSeed());  // 2^-64 chance of a false failure
}

TEST_F(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits = RandomLogits(UniformInt(1, 5000), 3.0f);
    if (trial % 2 == 1) {  // plant ties at the maximum
      const float m = logits[Argmax(logits)];
      for (int k = 0; k < 3; ++k) logits[UniformInt(0, static_cast<int>(logits.size()) - 1)] = m;
    }
    const int32_t want = Argmax(logits);
    EXPECT_EQ(MustSample(logits, p, kFresh).token, want);
    p.temperature = 0.5f * kGreedyTemperature;  // below the epsilon: greedy too
    EXPECT_EQ(MustSample(logits, p, kFresh).token, want);
    p.temperature = 0.0f;
  }
}

TEST_F(SamplerTest, TopKOneIsGreedy) {
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> logits = RandomLogits(UniformInt(1, 300), 2.0f);
    SamplingParams p;
    p.top_k = 1;
    p.temperature = Uniform(0.05f, 2.0f);
    p.top_p = Uniform(0.1f, 1.0f);
    p.min_p = Uniform(0.0f, 0.5f);
    SequenceSamplingState s(Bits64(), {});
    EXPECT_EQ(MustSample(logits, p, s).token, Argmax(logits));
  }
}

TEST_F(SamplerTest, SameSeedAndStepGiveSameTokenWhateverElseRuns) {
  const std::vector<float> logits = RandomLogits(500, 1.0f);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.95f;
  const uint64_t seed = Bits64();
  constexpr int kSteps = 40;

  // Alone, in order, without a scratch buffer.
  std::vector<int32_t> alone;
  SequenceSamplingState a(seed, {});
  for (int t = 0; t < kSteps; ++t) {
    alone.push_back(MustSample(logits, p, a).token);
    a.Accept(0);  // the step advances whatever was appended; no penalties are on
  }

  // Reversed step order, other sequences sampled in between, a shared scratch buffer.
  SamplerScratch scratch;
  std::vector<SequenceSamplingState> at_step;
  SequenceSamplingState b(seed, {});
  for (int t = 0; t < kSteps; ++t, b.Accept(0)) at_step.push_back(b);
  for (int t = kSteps - 1; t >= 0; --t) {
    const std::vector<float> other = RandomLogits(UniformInt(1, 800), 2.0f);
    SequenceSamplingState o(Bits64(), {});
    MustSample(other, p, o, &scratch);
    EXPECT_EQ(MustSample(logits, p, at_step[t], &scratch).token, alone[t]) << "step " << t;
    // Sample() is SampleWithUniform() at the documented u.
    const float u = SampleUniform(seed, /*stream=*/0, static_cast<uint64_t>(t));
    absl::StatusOr<SampleResult> r = SampleWithUniform(logits, p, at_step[t], u);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token, alone[t]) << "step " << t;
  }
  EXPECT_GT(std::set<int32_t>(alone.begin(), alone.end()).size(), 10u);
}

TEST_F(SamplerTest, DifferentSeedsAndStreamsDiffer) {
  const std::vector<float> logits(1000, 0.0f);  // uniform over 1000 tokens
  const SamplingParams p;
  const uint64_t seed = Bits64();
  auto run = [&](uint64_t s, uint32_t stream) {
    std::vector<int32_t> tokens;
    SequenceSamplingState st(s, {}, stream);
    for (int t = 0; t < 32; ++t, st.Accept(0)) tokens.push_back(MustSample(logits, p, st).token);
    return tokens;
  };
  const std::vector<int32_t> base = run(seed, 0);
  EXPECT_EQ(base, run(seed, 0));
  EXPECT_NE(base, run(seed + 1, 0));
  EXPECT_NE(base, run(seed, 1));
}

// Many samples over consecutive steps, compared with softmax(logits / T) by chi-square.
TEST_F(SamplerTest, EmpiricalDistributionMatchesSoftmax) {
  const int vocab = UniformInt(4, 12);
  const std::vector<float> logits = RandomLogits(vocab, 1.5f);
  SamplingParams p;
  p.temperature = Uniform(0.5f, 1.5f);
  const std::vector<double> want = ReferenceDistribution(logits, p).p;
  constexpr int kDraws = 50000;
  std::vector<int> hist(vocab, 0);
  SequenceSamplingState s(Bits64(), {});
  SamplerScratch scratch;
  for (int t = 0; t < kDraws; ++t, s.Accept(0)) ++hist[MustSample(logits, p, s, &scratch).token];

  // Pool the tokens expected fewer than 5 times into one bin.
  double chi2 = 0.0, pooled_obs = 0.0, pooled_exp = 0.0;
  int bins = 0;
  for (int i = 0; i < vocab; ++i) {
    const double e = want[i] * kDraws;
    if (e < 5.0) {
      pooled_obs += hist[i];
      pooled_exp += e;
      continue;
    }
    chi2 += (hist[i] - e) * (hist[i] - e) / e;
    ++bins;
  }
  if (pooled_exp > 0.0) {
    chi2 += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / std::max(pooled_exp, 1.0);
    ++bins;
  }
  ASSERT_GE(bins, 2);
  EXPECT_LT(chi2, ChiSquareBound(bins - 1, 5.0)) << "vocab " << vocab << " T " << p.temperature;
}

TEST_F(SamplerTest, SweepRealisesSoftmaxExactly) {
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<float> logits = RandomLogits(UniformInt(2, 24), 2.0f);
    SamplingParams p;
    p.temperature = Uniform(0.2f, 2.0f);
    constexpr int kGrid = 4000;
    ExpectSameDistribution(Sweep(logits, p, kFresh, kGrid), ReferenceDistribution(logits, p).p,
                           1.5 / kGrid);
  }
}

TEST_F(SamplerTest, TopKNeverLeavesTheTopK) {
  const int vocab = 200;
  const std::vector<float> logits = RandomLogits(vocab, 1.0f);
  std::vector<int> rank_of(vocab);
  {
    std::vector<int> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[a] > logits[b]; });
    for (int r = 0; r < vocab; ++r) rank_of[order[r]] = r;
  }
  SamplingParams p;
  p.top_k = UniformInt(2, 20);
  p.temperature = 2.0f;  // flat, so that the filter does the work
  SequenceSamplingState s(Bits64(), {});
  std::set<int32_t> seen;
  for (int t = 0; t < 3000; ++t, s.Accept(0)) {
    const int32_t token = MustSample(logits, p, s).token;
    EXPECT_LT(rank_of[token], p.top_k) << "token " << token;
    seen.insert(token);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), p.top_k);  // and the whole top k is reachable

  // Off, -1 and k >= vocab are the same distribution.
  const std::vector<float> small = RandomLogits(10, 1.0f);
  SamplingParams off;
  const std::vector<double> base = Sweep(small, off, kFresh, 2000);
  off.top_k = -1;
  EXPECT_EQ(Sweep(small, off, kFresh, 2000), base);
  off.top_k = 10;
  EXPECT_EQ(Sweep(small, off, kFresh, 2000), base);
  off.top_k = 1000;
  EXPECT_EQ(Sweep(small, off, kFresh, 2000), base);
}

// Logits whose softmax is exactly the given probabilities, placed at shuffled ids.
std::vector<float> LogitsOf(const std::vector<double>& probs, const std::vector<int>& ids) {
  std::vector<float> logits(probs.size());
  for (size_t r = 0; r < probs.size(); ++r) logits[ids[r]] = static_cast<float>(std::log(probs[r]));
  return logits;
}

TEST_F(SamplerTest, TopPKeepsTheMinimalNucleus) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  std::vector<int> ids = {0, 1, 2, 3};
  std::shuffle(ids.begin(), ids.end(), rng_);
  const std::vector<float> logits = LogitsOf(probs, ids);
  struct Case {
    float top_p;
    std::vector<double> kept;  // probabilities by rank after renormalisation
  };
  const Case cases[] = {
      {0.3f, {1.0, 0, 0, 0}},                 // the top token alone already covers 0.3
      {0.75f, {0.5 / 0.8, 0.3 / 0.8, 0, 0}},  // 0.5 < 0.75 <= 0.8
      {0.85f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
      {0.99f, {0.5, 0.3, 0.15, 0.05}},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    p.top_p = c.top_p;
    std::vector<double> want(4);
    for (int r = 0; r < 4; ++r) want[ids[r]] = c.kept[r];
    SCOPED_TRACE(testing::Message() << "top_p " << c.top_p);
    ExpectSameDistribution(Sweep(logits, p, kFresh, 4000), want, 1e-3);
  }
}

// Step 7's order is part of the cross-backend contract: the CDF runs over ascending token ids,
// not over the ranking, so one u maps to one token on every backend.
TEST_F(SamplerTest, InverseCdfRunsInAscendingIdOrder) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3}, {0, 1, 2, 3});
  SamplingParams p;
  p.top_p = 0.999f;  // takes the sorted path without dropping anything
  auto token_at = [&](float u) {
    absl::StatusOr<SampleResult> r = SampleWithUniform(logits, p, kFresh, u);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->token : -1;
  };
  // CDF over ids 0..3: 0.1, 0.5, 0.7, 1.0.
  EXPECT_EQ(token_at(0.0f), 0);
  EXPECT_EQ(token_at(0.05f), 0);
  EXPECT_EQ(token_at(0.3f), 1);
  EXPECT_EQ(token_at(0.6f), 2);
  EXPECT_EQ(token_at(0.8f), 3);
  EXPECT_EQ(token_at(1.0f - std::ldexp(1.0f, -24)), 3);
  // top_k = 3 drops id 0; CDF over ids 1..3: 0.4, 0.6, 0.9 out of 0.9.
  p.top_k = 3;
  EXPECT_EQ(token_at(0.0f), 1);
  EXPECT_EQ(token_at(0.4f), 1);
  EXPECT_EQ(token_at(0.5f), 2);
  EXPECT_EQ(token_at(0.9f), 3);
}

TEST_F(SamplerTest, MinPKeepsTokensAboveTheFractionOfTheTop) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  std::vector<int> ids = {0, 1, 2, 3};
  std::shuffle(ids.begin(), ids.end(), rng_);
  const std::vector<float> logits = LogitsOf(probs, ids);
  SamplingParams p;
  p.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
  std::vector<double> want(4, 0.0);
  want[ids[0]] = 0.5 / 0.8;
  want[ids[1]] = 0.3 / 0.8;
  ExpectSameDistribution(Sweep(logits, p, kFresh, 4000), want, 1e-3);
  p.min_p = 1.0f;  // only the top token
  want.assign(4, 0.0);
  want[ids[0]] = 1.0;
  ExpectSameDistribution(Sweep(logits, p, kFresh, 4000), want, 1e-3);
}

// Random logits and every filter at once, against the independent reference.
TEST_F(SamplerTest, CombinedFiltersMatchTheReference) {
  int checked = 0;
  for (int trial = 0; trial < 300 && checked < 40; ++trial) {
    const std::vector<float> logits = RandomLogits(UniformInt(2, 24), 1.5f);
    SamplingParams p;
    p.temperature = Uniform(0.3f, 2.0f);
    if (UniformInt(0, 1)) p.top_k = UniformInt(1, 24);
    if (UniformInt(0, 1)) p.top_p = Uniform(0.05f, 1.0f);
    if (UniformInt(0, 1)) p.min_p = Uniform(0.0f, 0.6f);
    const Reference ref = ReferenceDistribution(logits, p);
    if (ref.margin < 1e-3) continue;  // too close to a boundary for float vs double
    ++checked;
    SCOPED_TRACE(testing::Message() << "T " << p.temperature << " top_k " << p.top_k << " top_p "
                                    << p.top_p << " min_p " << p.min_p);
    ExpectSameDistribution(Sweep(logits, p, kFresh, 4000), ref.p, 1.5 / 4000);
  }
  EXPECT_GE(checked, 40);
}

TEST_F(SamplerTest, PenaltiesFollowTheFormulas) {
  const std::vector<int32_t> prompt = {1, 2, 6};
  SequenceSamplingState s(1, prompt);
  for (int32_t t : {2, 3, 3, 5}) s.Accept(t);
  SamplingParams p;
  p.repetition_penalty = Uniform(1.05f, 2.0f);
  p.frequency_penalty = Uniform(-2.0f, 2.0f);
  p.presence_penalty = Uniform(-2.0f, 2.0f);
  const std::vector<float> in = {0.7f, 1.5f, -0.8f, 2.5f, -3.0f, -1.25f, 0.0f, -kInf};
  std::vector<float> out = in;
  ApplyPenalties(out, p, s);
  const float r = p.repetition_penalty, f = p.frequency_penalty, pr = p.presence_penalty;
  EXPECT_EQ(out[0], in[0]);                      // never seen
  EXPECT_EQ(out[1], in[1] / r);                  // prompt only, positive: divided
  EXPECT_EQ(out[2], in[2] * r - f * 1.0f - pr);  // prompt and generated once, negative
  EXPECT_EQ(out[3], in[3] / r - f * 2.0f - pr);  // generated twice
  EXPECT_EQ(out[4], in[4]);                      // never seen
  EXPECT_EQ(out[5], in[5] * r - f - pr);         // generated once, negative
  EXPECT_EQ(out[6], 0.0f);                       // prompt only, zero stays zero
  EXPECT_EQ(out[7], -kInf);                      // -inf stays -inf

  SamplingParams neutral;
  std::vector<float> same = in;
  ApplyPenalties(same, neutral, s);
  EXPECT_EQ(std::memcmp(same.data(), in.data(), in.size() * sizeof(float)), 0);
}

TEST_F(SamplerTest, EachPenaltyFlipsTheGreedyChoice) {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> pos = {2.0f, 1.9f};
  const std::vector<float> neg = {-1.0f, -1.05f};
  const std::vector<int32_t> prompt0 = {0};
  SequenceSamplingState generated0(1, {});
  generated0.Accept(0);
  SequenceSamplingState in_prompt0(1, prompt0);

  EXPECT_EQ(MustSample(pos, p, generated0).token, 0);
  p.frequency_penalty = 0.2f;  // 2.0 - 0.2 = 1.8 < 1.9
  EXPECT_EQ(MustSample(pos, p, generated0).token, 1);
  EXPECT_EQ(MustSample(pos, p, in_prompt0).token, 0);  // frequency ignores the prompt
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.2f;
  EXPECT_EQ(MustSample(pos, p, generated0).token, 1);
  EXPECT_EQ(MustSample(pos, p, in_prompt0).token, 0);  // presence ignores the prompt
  p.presence_penalty = 0.0f;
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.82 < 1.9
  EXPECT_EQ(MustSample(pos, p, in_prompt0).token, 1);
  EXPECT_EQ(MustSample(pos, p, generated0).token, 1);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(MustSample(neg, greedy, in_prompt0).token, 0);
  EXPECT_EQ(MustSample(neg, p, in_prompt0).token, 1);  // -1.0 * 1.1 = -1.1 < -1.05
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = -0.2f;  // a negative penalty encourages repetition
  const std::vector<float> behind = {1.9f, 2.0f};
  EXPECT_EQ(MustSample(behind, p, generated0).token, 0);
}

// Sampling (not just greedy) sees the penalised logits, before temperature.
TEST_F(SamplerTest, SamplingUsesPenalisedLogits) {
  const std::vector<float> logits = RandomLogits(12, 1.0f);
  const std::vector<int32_t> prompt = {0, 1, 2, 3};
  SequenceSamplingState s(1, prompt);
  for (int32_t t : {3, 4, 4, 5}) s.Accept(t);
  SamplingParams p;
  p.temperature = Uniform(0.5f, 1.5f);
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.3f;
  std::vector<float> z = logits;
  ApplyPenalties(z, p, s);
  ExpectSameDistribution(Sweep(logits, p, s, 4000), ReferenceDistribution(z, p).p, 1.5 / 4000);
}

std::vector<double> DirectLogSoftmax(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max<double>(m, v);
  double sum = 0.0;
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(sum));
  return out;
}

// logit_bias is added before the penalties (vLLM's order), to the listed tokens only, and the
// log-probabilities stay the raw model's.
TEST_F(SamplerTest, LogitBiasIsAddedBeforeThePenalties) {
  const std::vector<int32_t> prompt = {0};
  SequenceSamplingState s(1, prompt);
  s.Accept(1);
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.logit_bias = {{0, 3.0f}, {1, -1.5f}, {3, 0.25f}};
  const std::vector<float> in = {1.0f, 2.0f, 0.5f, -0.75f, -kInf};
  std::vector<float> out = in;
  ApplyPenalties(out, p, s);
  EXPECT_EQ(out[0], (1.0f + 3.0f) / 2.0f);                  // biased, then repeated (prompt)
  EXPECT_EQ(out[1], (2.0f - 1.5f) / 2.0f - 0.5f);           // biased, repeated, presence
  EXPECT_EQ(out[2], 0.5f);                                   // untouched
  EXPECT_EQ(out[3], -0.75f + 0.25f);                         // biased only
  EXPECT_EQ(out[4], -kInf);

  // Alone (no penalties), a bias flips the greedy choice and sampling follows the biased
  // logits; the reported log-probabilities are those of the raw logits.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 2;
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  EXPECT_EQ(MustSample(logits, greedy, s).token, 0);
  greedy.logit_bias = {{2, 2.5f}};
  const SampleResult r = MustSample(logits, greedy, s);
  EXPECT_EQ(r.token, 2);
  const std::vector<double> raw = DirectLogSoftmax(logits);
  EXPECT_NEAR(r.logprob, raw[2], 1e-5);
  ASSERT_EQ(r.top_logprobs.size(), 2u);
  EXPECT_EQ(r.top_logprobs[0].first, 0);
  greedy.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(MustSample(logits, greedy, s).token, 1);

  SamplingParams sampled;
  sampled.temperature = Uniform(0.5f, 1.5f);
  sampled.logit_bias = {{1, 1.25f}, {2, -0.5f}};
  std::vector<float> z = logits;
  ApplyPenalties(z, sampled, s);
  EXPECT_EQ(z[1], 2.25f);
  ExpectSameDistribution(Sweep(logits, sampled, s, 4000), ReferenceDistribution(z, sampled).p,
                         1.5 / 4000);
}

// min_tokens: the banned ids are -inf while fewer than min_tokens tokens are generated (counting
// step_ahead, the tokens a fed draw is ahead of its state), over any bias; nothing after.
TEST_F(SamplerTest, MinTokensBansUntilReached) {
  SequenceSamplingState s(1, {});
  s.Accept(4);
  s.Accept(4);  // step 2
  SamplingParams p;
  p.min_tokens = 4;
  p.min_tokens_banned = {0, 3};
  p.logit_bias = {{3, 50.0f}};
  const std::vector<float> in = {5.0f, 1.0f, 0.5f, kInf, 2.0f};
  std::vector<float> z = in;
  ApplyPenalties(z, p, s);
  EXPECT_EQ(z, (std::vector<float>{-kInf, 1.0f, 0.5f, -kInf, 2.0f}));
  z = in;
  ApplyPenalties(z, p, s, /*step_ahead=*/1);  // the draw of step 3: still banned
  EXPECT_EQ(z[0], -kInf);
  z = in;
  ApplyPenalties(z, p, s, /*step_ahead=*/2);  // step 4: min_tokens reached
  EXPECT_EQ(z, (std::vector<float>{5.0f, 1.0f, 0.5f, kInf, 2.0f}));

  SamplingParams greedy = p;
  greedy.temperature = 0.0f;
  const std::vector<float> logits = {5.0f, 1.0f, 0.5f, 0.0f, 2.0f};
  EXPECT_EQ(MustSample(logits, greedy, s).token, 4);  // 0 and the biased 3 banned
  auto later = SampleWithUniform(logits, greedy, s, 0.5f, nullptr, /*step_ahead=*/2);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->token, 3);  // the bias counts again: 0 + 50
  // Every finite logit banned: no distribution, an error rather than a banned token.
  const std::vector<float> only_banned = {1.0f, -kInf, -kInf, 2.0f, -kInf};
  EXPECT_FALSE(SampleWithUniform(only_banned, greedy, s, 0.5f).ok());
}

TEST_F(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  for (int trial = 0; trial < 30; ++trial) {
    const std::vector<float> logits = RandomLogits(UniformInt(1, 2000), 3.0f);
    const std::vector<double> want = DirectLogSoftmax(logits);
    SamplingParams p;
    p.logprobs = UniformInt(0, kMaxLogprobs);
    p.temperature = Uniform(0.0f, 2.0f);
    p.top_k = UniformInt(0, 5);
    // Penalties and temperature must not change the logprobs: every token is penalised.
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 1.0f;
    std::vector<int32_t> prompt(logits.size());
    std::iota(prompt.begin(), prompt.end(), 0);
    SequenceSamplingState s(Bits64(), prompt);
    for (int k = 0; k < 5; ++k) s.Accept(UniformInt(0, static_cast<int>(logits.size()) - 1));
    const SampleResult r = MustSample(logits, p, s);
    EXPECT_NEAR(r.logprob, want[r.token], 1e-5);
    const size_t k = std::min<size_t>(p.logprobs, logits.size());
    ASSERT_EQ(r.top_logprobs.size(), k);
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return want[a] > want[b]; });
    for (size_t j = 0; j < k; ++j) {
      EXPECT_EQ(r.top_logprobs[j].first, order[j]) << "rank " << j;
      EXPECT_NEAR(r.top_logprobs[j].second, want[order[j]], 1e-5) << "rank " << j;
    }
  }
}

TEST_F(SamplerTest, TopLogprobsOverTheWholeVocabularySumToOne) {
  const std::vector<float> logits = RandomLogits(UniformInt(1, kMaxLogprobs), 4.0f);
  SamplingParams p;
  p.logprobs = kMaxLogprobs;
  const SampleResult r = MustSample(logits, p, kFresh);
  ASSERT_EQ(r.top_logprobs.size(), logits.size());
  double mass = 0.0;
  for (size_t j = 0; j < r.top_logprobs.size(); ++j) {
    mass += std::exp(static_cast<double>(r.top_logprobs[j].second));
    if (j > 0) {
      EXPECT_GE(r.top_logprobs[j - 1].second, r.top_logprobs[j].second);
    }
  }
  EXPECT_NEAR(mass, 1.0, 1e-5);
}

TEST_F(SamplerTest, NaNIsNeverSampledAndHasNoMass) {
  std::vector<float> logits = RandomLogits(16, 1.0f);
  const std::set<int> nan_ids = {0, UniformInt(1, 15), UniformInt(1, 15)};
  for (int i : nan_ids) logits[i] = kNaN;
  SamplingParams p;
  p.logprobs = 16;
  const std::vector<double> freq = Sweep(logits, p, kFresh, 2000);
  for (int i : nan_ids) EXPECT_EQ(freq[i], 0.0) << "NaN token " << i << " was sampled";
  p.temperature = 0.0f;
  const SampleResult r = MustSample(logits, p, kFresh);
  EXPECT_EQ(nan_ids.count(r.token), 0u);
  for (const auto& [id, lp] : r.top_logprobs) {
    if (nan_ids.count(id)) {
      EXPECT_EQ(lp, -kInf) << id;
    } else {
      EXPECT_TRUE(std::isfinite(lp)) << id;
    }
  }
}

TEST_F(SamplerTest, PositiveInfinityTakesAllTheMass) {
  std::vector<float> logits = RandomLogits(10, 1.0f);
  logits[3] = kInf;
  logits[7] = kInf;
  logits[5] = kNaN;
  SamplingParams p;
  p.logprobs = 3;
  p.repetition_penalty = 1.2f;  // inf / 1.2 is still inf
  const std::vector<int32_t> prompt = {3};
  SequenceSamplingState s(1, prompt);
  std::vector<double> want(10, 0.0);
  want[3] = want[7] = 0.5;
  ExpectSameDistribution(Sweep(logits, p, s, 2000), want, 1e-3);
  const SampleResult r = MustSample(logits, p, s);
  EXPECT_FLOAT_EQ(r.logprob, -std::log(2.0f));
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[0].first, 3);
  EXPECT_EQ(r.top_logprobs[1].first, 7);
  EXPECT_EQ(r.top_logprobs[2].second, -kInf);
  p.temperature = 0.0f;
  EXPECT_EQ(MustSample(logits, p, s).token, 3);
}

TEST_F(SamplerTest, NoFiniteLogitIsAnError) {
  const std::vector<std::vector<float>> cases = {
      {kNaN}, {-kInf}, {kNaN, -kInf, kNaN}, std::vector<float>(100, -kInf)};
  for (const std::vector<float>& logits : cases) {
    for (float t : {0.0f, 1.0f}) {
      SamplingParams p;
      p.temperature = t;
      absl::StatusOr<SampleResult> r = Sample(logits, p, kFresh);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    }
  }
  // A valid but extreme repetition penalty can overflow every negative logit to -inf.
  const std::vector<float> negative = {-10.0f, -20.0f};
  const std::vector<int32_t> prompt = {0, 1};
  SequenceSamplingState s(1, prompt);
  SamplingParams p;
  p.repetition_penalty = 1e38f;
  ASSERT_TRUE(Validate(p, 2).ok());
  EXPECT_EQ(Sample(negative, p, s).status().code(), absl::StatusCode::kInternal);
}

TEST_F(SamplerTest, DoesNotModifyTheLogits) {
  std::vector<float> logits = RandomLogits(64, 1.0f);
  logits[1] = kNaN;
  logits[2] = kInf;
  const std::vector<float> copy = logits;
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.top_k = 5;
  p.top_p = 0.5f;
  p.logprobs = 5;
  const std::vector<int32_t> prompt = {0, 1, 2, 3};
  SequenceSamplingState s(1, prompt);
  s.Accept(4);
  MustSample(logits, p, s);
  EXPECT_EQ(std::memcmp(logits.data(), copy.data(), logits.size() * sizeof(float)), 0);
}

TEST_F(SamplerTest, ScratchReuseDoesNotChangeResults) {
  SamplerScratch scratch;
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = RandomLogits(UniformInt(1, 3000), 2.0f);
    SamplingParams p;
    p.temperature = Uniform(0.1f, 2.0f);
    p.top_k = UniformInt(0, 50);
    p.top_p = Uniform(0.1f, 1.0f);
    p.min_p = Uniform(0.0f, 0.2f);
    p.logprobs = UniformInt(0, 5);
    SequenceSamplingState s(Bits64(), {});
    const SampleResult a = MustSample(logits, p, s, &scratch);
    const SampleResult b = MustSample(logits, p, s);
    EXPECT_EQ(a.token, b.token);
    EXPECT_EQ(a.logprob, b.logprob);
    EXPECT_EQ(a.top_logprobs, b.top_logprobs);
  }
}

// Preemption by recompute rebuilds the state from the prompt and the generated tokens; the
// continuation must be the same as if nothing had happened.
TEST_F(SamplerTest, RebuiltStateContinuesIdentically) {
  const int vocab = 50;
  std::vector<std::vector<float>> logits_at;
  for (int t = 0; t < 30; ++t) logits_at.push_back(RandomLogits(vocab, 1.0f));
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.5f;
  p.top_p = 0.9f;
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const uint64_t seed = Bits64();

  std::vector<int32_t> first;
  SequenceSamplingState s(seed, prompt);
  for (int t = 0; t < 30; ++t) {
    first.push_back(MustSample(logits_at[t], p, s).token);
    s.Accept(first.back());
  }
  SequenceSamplingState rebuilt(seed, prompt);
  for (int t = 0; t < 12; ++t) rebuilt.Accept(first[t]);
  for (int t = 12; t < 30; ++t) {
    const int32_t token = MustSample(logits_at[t], p, rebuilt).token;
    EXPECT_EQ(token, first[t]) << "step " << t;
    rebuilt.Accept(token);
  }
}

}  // namespace
}  // namespace banyan::engine

namespace banyan::engine {
namespace {

// A grammar's token mask (step 3, first): masked tokens are never drawn, whatever their logit,
// bias or the draw's u; the log-probabilities stay the raw model's.
TEST_F(SamplerTest, TokenMaskComesBeforeBiasAndKeepsRawLogprobs) {
  const int vocab = 130;  // three mask words, the last partial
  std::vector<float> logits(vocab);
  for (int i = 0; i < vocab; ++i) logits[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  std::vector<uint64_t> mask(3, 0);
  const std::vector<int32_t> allowed = {3, 64, 129};
  for (int32_t id : allowed) mask[id >> 6] |= uint64_t{1} << (id & 63);
  SamplingParams p;
  p.logprobs = 2;
  p.logit_bias = {{0, 100.0f}, {64, -3.0f}};  // a forced token outside the mask stays out
  p.frequency_penalty = 1.0f;
  SequenceSamplingState s(7, {});
  s.Accept(3);
  SamplingParams unmasked_p = p;
  auto raw = SampleWithUniform(logits, unmasked_p, s, 0.5f);
  ASSERT_TRUE(raw.ok());
  for (float u : {0.0f, 0.2f, 0.5f, 0.8f, 0.999f}) {
    auto r = SampleWithUniform(logits, p, s, u, nullptr, 0, mask);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::find(allowed.begin(), allowed.end(), r->token) != allowed.end()) << r->token;
    EXPECT_EQ(r->top_logprobs, raw->top_logprobs) << "logprobs are the raw model's";
  }
  p.temperature = 0.0f;
  auto greedy = SampleWithUniform(logits, p, s, 0.5f, nullptr, 0, mask);
  ASSERT_TRUE(greedy.ok());
  // Among 3, 64 and 129 after the bias and the penalty on 3, the best.
  std::vector<float> z = logits;
  ApplyTokenMask(z, mask);
  ApplyPenalties(z, p, s);
  const int32_t best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  EXPECT_EQ(greedy->token, best);
  EXPECT_EQ(z[0], -kInf);
  EXPECT_EQ(z[128], -kInf);

  // A mask that leaves nothing: no distribution, never a guess.
  std::vector<uint64_t> none(3, 0);
  EXPECT_FALSE(SampleWithUniform(logits, p, s, 0.5f, nullptr, 0, none).ok());
}

}  // namespace
}  // namespace banyan::engine
