// The device sampler (kernels/cuda/sampling.h through engine/cuda/device_sampler.h) against the
// CPU reference SampleWithUniform with the same u = SampleUniform(seed, stream, step):
//  - randomized differential cases: fresh logits every run (vocab 5 .. 128256, 1-64 rows, rows
//    with ties, -inf and NaN entries, a +inf entry, no finite entry, penalties that overflow to
//    -inf), 1-3 samples per row with random params over every field, the outputs poisoned first.
//    Greedy tokens, no-distribution rows and top-logprob ids must be identical (their ranking is
//    exact); sampled tokens too, unless the CPU itself picks the device's token under a tiny
//    perturbation of u, top_p or min_p (the rounding of expf and of the summation order, which is
//    all the contract allows to differ), and such cases must be rare. Logprobs: relative 1e-4.
//    About half the samples carry a random token mask (a grammar's, step 3: one allowed token, a
//    sparse or a dense set, or none at all, which leaves no distribution).
//  - a distribution test: one row, many steps, the empirical frequencies against the exact
//    probabilities of the filtered distribution (chi-square, and nothing outside the support).
//  - fed rows (their previous token still on the device): the penalties count that token, as
//    the CPU reference does with a state that has taken it.
//  - masks written in the sampler's upload (MaskStaging) against the same masks copied.
//  - CudaBackend::ForwardSample on the bundled stories260K against Forward + the CPU sampler.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_sampler.h"
#include "model/model_io.h"
#include "engine/sampler/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cuda/sampling.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/bundled_model.h"

namespace banyan::engine {
namespace {

namespace kc = kernels::cuda;
constexpr float kInf = std::numeric_limits<float>::infinity();

// A device array owned by the test.
template <typename T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n, int poison_byte = -1) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    if (poison_byte >= 0) cudaMemset(p, poison_byte, std::max<size_t>(n, 1) * sizeof(T));
  }
  ~Dev() { cudaFree(p); }
};

// Runs the packing and the kernel over host logits [rows, vocab] with poisoned outputs.
// `feed` and `fed_tokens`: a fed step's (PackSamples), the fed tokens uploaded here.
std::vector<SampleResult> DeviceSample(const std::vector<float>& logits, int32_t rows,
                                       int32_t vocab, std::span<const SampleSpec> specs,
                                       std::span<const int32_t> feed = {},
                                       std::span<const int32_t> fed_tokens = {}) {
  cuda::PackedSamples packed;
  const absl::Status st = cuda::PackSamples(specs, rows, vocab, &packed, feed);
  EXPECT_TRUE(st.ok()) << st;
  Dev<float> d_logits(logits.size());
  cudaMemcpy(d_logits.p, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice);
  Dev<kc::SampleSpecDev> d_specs(packed.specs.size());
  cudaMemcpy(d_specs.p, packed.specs.data(), packed.specs.size() * sizeof(kc::SampleSpecDev),
             cudaMemcpyHostToDevice);
  Dev<kc::SamplePenaltyEntry> d_entries(packed.entries.size());
  cudaMemcpy(d_entries.p, packed.entries.data(),
             packed.entries.size() * sizeof(kc::SamplePenaltyEntry), cudaMemcpyHostToDevice);
  Dev<float> d_pen(static_cast<size_t>(packed.penalized_rows) * vocab, 0xff);  // NaN
  Dev<kc::SampleTokenDev> d_out(specs.size(), 0x7f);
  Dev<kc::SampleTopDev> d_top(packed.num_top, 0x7f);
  std::vector<uint64_t> masks(static_cast<size_t>(packed.MaskWords()));
  packed.CopyMasks(masks.data());
  Dev<uint64_t> d_masks(masks.size());
  cudaMemcpy(d_masks.p, masks.data(), masks.size() * 8, cudaMemcpyHostToDevice);
  Dev<int32_t> d_fed(fed_tokens.size());
  cudaMemcpy(d_fed.p, fed_tokens.data(), fed_tokens.size() * 4, cudaMemcpyHostToDevice);
  kc::SampleParams p;
  p.pending_tokens = d_fed.p;
  p.logits = d_logits.p;
  p.specs = d_specs.p;
  p.penalties = d_entries.p;
  p.masks = d_masks.p;
  p.penalized = d_pen.p;
  p.out = d_out.p;
  p.top = d_top.p;
  p.rows = rows;
  p.vocab = vocab;
  p.num_specs = static_cast<int32_t>(specs.size());
  const absl::Status run = kc::SampleRows(p, nullptr);
  EXPECT_TRUE(run.ok()) << run;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<kc::SampleTokenDev> tokens(specs.size());
  std::vector<kc::SampleTopDev> top(packed.num_top);
  cudaMemcpy(tokens.data(), d_out.p, tokens.size() * sizeof(kc::SampleTokenDev),
             cudaMemcpyDeviceToHost);
  cudaMemcpy(top.data(), d_top.p, top.size() * sizeof(kc::SampleTopDev), cudaMemcpyDeviceToHost);
  std::vector<SampleResult> out;
  cuda::UnpackSamples(packed, tokens.data(), top.data(), &out);
  return out;
}

bool Close(float a, float b, double rel = 1e-4) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(static_cast<double>(a) - b) <= rel * std::max(1.0, std::abs(static_cast<double>(b)));
}

// Whether the CPU itself picks `token` when u, top_p and min_p move by a relative 1e-5: the
// rounding margin of the CDF and filter boundaries that the contract leaves to each backend.
bool WithinRoundingMargin(std::span<const float> row, const SamplingParams& params,
                          const SequenceSamplingState& state, float u, int32_t token,
                          std::span<const uint64_t> allowed) {
  constexpr double kEps = 1e-5;
  for (double du : {-kEps, 0.0, kEps}) {
    for (double dp : {-kEps, 0.0, kEps}) {
      for (double dm : {-kEps, 0.0, kEps}) {
        SamplingParams q = params;
        if (q.top_p < 1.0f) q.top_p = std::min(std::nextafter(1.0f, 0.0f), static_cast<float>(q.top_p * (1 + dp)));
        if (q.min_p > 0.0f) q.min_p = std::min(1.0f, static_cast<float>(q.min_p * (1 + dm)));
        const float uu = std::clamp(static_cast<float>(u + du), 0.0f, std::nextafter(1.0f, 0.0f));
        auto r = SampleWithUniform(row, q, state, uu, nullptr, 0, allowed);
        if (r.ok() && r->token == token) return true;
      }
    }
  }
  return false;
}

// log_softmax(sanitised row)[token], the +inf limit included (step 2).
float RawLogProb(std::span<const float> row, int32_t token) {
  const auto x = [&](size_t i) { return std::isnan(row[i]) ? -kInf : row[i]; };
  float max = -kInf;
  for (size_t i = 0; i < row.size(); ++i) max = std::max(max, x(i));
  double mass = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    mass += max == kInf ? (x(i) == kInf ? 1.0 : 0.0) : std::exp(static_cast<double>(x(i)) - max);
  }
  if (max == kInf) return x(token) == kInf ? static_cast<float>(-std::log(mass)) : -kInf;
  return static_cast<float>(static_cast<double>(x(token)) - max - std::log(mass));
}

struct Stats {
  int samples = 0, sampled = 0, margin_mismatches = 0;
};

// Compares one device result with the CPU reference (gtest failures). `allowed`: the sample's
// token mask, empty for none.
void Compare(std::span<const float> row, const SamplingParams& params,
             const SequenceSamplingState& state, const SampleResult& dev, const std::string& label,
             Stats* stats, std::span<const uint64_t> allowed = {}) {
  const float u = SampleUniform(state.seed(), state.stream(), state.step());
  auto cpu = SampleWithUniform(row, params, state, u, nullptr, 0, allowed);
  ++stats->samples;
  if (!cpu.ok()) {
    EXPECT_EQ(dev.token, -1) << label << ": the CPU finds no distribution";
    return;
  }
  ASSERT_GE(dev.token, 0) << label << ": the device found no distribution";
  ASSERT_LT(dev.token, static_cast<int32_t>(row.size())) << label;
  if (!allowed.empty()) {
    EXPECT_TRUE((allowed[dev.token / 64] >> (dev.token % 64)) & 1u)
        << label << ": the device drew token " << dev.token << ", which the mask forbids";
  }
  if (params.temperature < kGreedyTemperature) {
    EXPECT_EQ(dev.token, cpu->token) << label << " (greedy)";
  } else {
    ++stats->sampled;
    if (dev.token != cpu->token) {
      EXPECT_TRUE(WithinRoundingMargin(row, params, state, u, dev.token, allowed))
          << label << ": device " << dev.token << ", CPU " << cpu->token << ", u " << u;
      ++stats->margin_mismatches;
    }
  }
  // The device's token differs only in a margin case; its expected logprob is then computed here.
  const float cpu_lp = dev.token == cpu->token ? cpu->logprob : RawLogProb(row, dev.token);
  EXPECT_TRUE(Close(dev.logprob, cpu_lp)) << label << ": logprob " << dev.logprob << " vs "
                                          << cpu_lp;
  ASSERT_EQ(dev.top_logprobs.size(), cpu->top_logprobs.size()) << label;
  for (size_t j = 0; j < dev.top_logprobs.size(); ++j) {
    EXPECT_EQ(dev.top_logprobs[j].first, cpu->top_logprobs[j].first) << label << " top " << j;
    EXPECT_TRUE(Close(dev.top_logprobs[j].second, cpu->top_logprobs[j].second))
        << label << " top " << j << ": " << dev.top_logprobs[j].second << " vs "
        << cpu->top_logprobs[j].second;
  }
}

enum class RowKind { kNormal, kTies, kHoles, kPosInf, kNoneFinite, kFewFinite, kOverflow };

void FillRow(std::mt19937_64& rng, RowKind kind, std::span<float> row) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scale = std::uniform_real_distribution<float>(0.3f, 8.0f)(rng);
  for (float& x : row) x = normal(rng) * scale;
  std::uniform_int_distribution<size_t> pick(0, row.size() - 1);
  switch (kind) {
    case RowKind::kNormal:
      break;
    case RowKind::kTies:  // a few distinct values, many ties, -0 and +0 among them
      for (float& x : row) x = std::round(x / scale * 2.0f) * 0.5f;
      for (int i = 0; i < 4; ++i) row[pick(rng)] = -0.0f;
      break;
    case RowKind::kHoles:
      for (float& x : row) {
        const int r = static_cast<int>(rng() % 10);
        if (r == 0) x = -kInf;
        if (r == 1) x = std::numeric_limits<float>::quiet_NaN();
      }
      break;
    case RowKind::kPosInf:
      row[pick(rng)] = kInf;
      if (rng() % 2 == 0) row[pick(rng)] = kInf;
      row[pick(rng)] = std::numeric_limits<float>::quiet_NaN();
      break;
    case RowKind::kNoneFinite:
      for (size_t i = 0; i < row.size(); ++i) {
        row[i] = i % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : -kInf;
      }
      break;
    case RowKind::kFewFinite:  // fewer finite logits than top logprobs asked
      for (float& x : row) x = -kInf;
      for (int i = 0; i < 3; ++i) row[pick(rng)] = normal(rng);
      break;
    case RowKind::kOverflow:  // a repetition penalty pushes the only finite logits to -inf
      for (float& x : row) x = -kInf;
      row[0] = -3e38f;
      row[row.size() - 1] = -2e38f;
      break;
  }
}

SamplingParams RandomParams(std::mt19937_64& rng, int vocab) {
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  SamplingParams p;
  p.temperature = uni(rng) < 0.3f ? 0.0f : 0.05f + 1.95f * uni(rng);
  if (uni(rng) < 0.5f) p.top_k = 1 + static_cast<int>(rng() % (uni(rng) < 0.2f ? vocab + 10 : 100));
  if (uni(rng) < 0.5f) p.top_p = 0.02f + 0.97f * uni(rng);
  if (uni(rng) < 0.3f) p.min_p = uni(rng) < 0.2f ? 1.0f : 0.5f * uni(rng);
  if (uni(rng) < 0.4f) {
    p.repetition_penalty = uni(rng) < 0.3f ? 1.0f : 0.5f + 1.5f * uni(rng);
    p.frequency_penalty = 4.0f * uni(rng) - 2.0f;
    p.presence_penalty = uni(rng) < 0.3f ? 0.0f : 4.0f * uni(rng) - 2.0f;
  }
  p.logprobs = uni(rng) < 0.5f ? 0 : static_cast<int>(rng() % 21);
  if (uni(rng) < 0.3f) {
    // Biased tokens also from the range RandomState draws most from, so that they overlap the
    // prompt and generated tokens (entries that carry a bias and a penalty).
    const int k = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < k; ++i) {
      const int32_t id = static_cast<int32_t>(rng() % (rng() % 2 == 0 ? std::min(vocab, 50) : vocab));
      const float bias = uni(rng) < 0.2f ? (uni(rng) < 0.5f ? -100.0f : 100.0f)
                                         : 10.0f * uni(rng) - 5.0f;
      p.logit_bias.emplace_back(id, bias);
    }
    std::sort(p.logit_bias.begin(), p.logit_bias.end());
    p.logit_bias.erase(std::unique(p.logit_bias.begin(), p.logit_bias.end(),
                                   [](const auto& a, const auto& b) { return a.first == b.first; }),
                       p.logit_bias.end());
  }
  if (uni(rng) < 0.3f) {
    // min_tokens around RandomState's 0-99 generated tokens, so that the ban is on or off; banned
    // ids may be biased too (the ban wins).
    p.min_tokens = static_cast<int>(rng() % 150);
    p.max_tokens = std::max(p.max_tokens, p.min_tokens);
    const int k = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < k; ++i) {
      p.min_tokens_banned.push_back(
          static_cast<int32_t>(rng() % (rng() % 2 == 0 ? std::min(vocab, 50) : vocab)));
    }
    std::sort(p.min_tokens_banned.begin(), p.min_tokens_banned.end());
    p.min_tokens_banned.erase(std::unique(p.min_tokens_banned.begin(), p.min_tokens_banned.end()),
                              p.min_tokens_banned.end());
  }
  return p;
}

// A random token mask of `vocab` bits (empty half the time): one allowed token, a sparse set,
// a dense one, or none at all (no distribution).
std::vector<uint64_t> RandomMask(std::mt19937_64& rng, int vocab) {
  if (rng() % 2 == 0) return {};
  std::vector<uint64_t> mask(static_cast<size_t>(vocab + 63) / 64, 0);
  const int kind = static_cast<int>(rng() % 8);
  if (kind == 0) return mask;  // nothing allowed
  if (kind == 1) {
    const int32_t t = static_cast<int32_t>(rng() % vocab);
    mask[t / 64] |= uint64_t{1} << (t % 64);
    return mask;
  }
  const double density = kind <= 3 ? 0.01 : kind <= 5 ? 0.5 : 0.99;
  std::bernoulli_distribution on(density);
  for (int t = 0; t < vocab; ++t) {
    if (on(rng)) mask[t / 64] |= uint64_t{1} << (t % 64);
  }
  return mask;
}

SequenceSamplingState RandomState(std::mt19937_64& rng, int vocab, uint32_t stream) {
  std::vector<int32_t> prompt(rng() % 200);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  // Tokens from a small range as well, so that prompt and generated tokens overlap.
  const auto draw = [&] { return rng() % 2 == 0 ? tok(rng) : tok(rng) % std::min(vocab, 50); };
  for (int32_t& t : prompt) t = draw();
  SequenceSamplingState s(rng(), prompt, stream);
  const int generated = static_cast<int>(rng() % 100);
  for (int i = 0; i < generated; ++i) s.Accept(draw());
  return s;
}

TEST(DeviceSampling, MatchesCpuReference) {
  std::mt19937_64 rng(std::random_device{}());
  Stats stats;
  const int vocabs[] = {5, 1000, 32000, 128256};
  for (int c = 0; c < 24; ++c) {
    const int vocab = vocabs[c % 4];
    const int rows = 1 + static_cast<int>(rng() % (vocab > 100000 ? 12 : 64));
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    std::vector<RowKind> kinds(rows);
    for (int r = 0; r < rows; ++r) {
      const int k = static_cast<int>(rng() % 16);
      kinds[r] = k < 7 ? RowKind::kNormal : k < 10 ? RowKind::kTies : k < 12 ? RowKind::kHoles
               : k == 12 ? RowKind::kPosInf : k == 13 ? RowKind::kNoneFinite
               : k == 14 ? RowKind::kFewFinite : RowKind::kOverflow;
      FillRow(rng, kinds[r], std::span<float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab));
    }
    std::vector<SamplingParams> params;
    std::vector<SequenceSamplingState> states;
    std::vector<int32_t> spec_rows;
    for (int r = 0; r < rows; ++r) {
      const int n = 1 + static_cast<int>(rng() % 3);  // the n samples of one prompt
      const SequenceSamplingState base = RandomState(rng, vocab, 0);
      for (int i = 0; i < n; ++i) {
        params.push_back(RandomParams(rng, vocab));
        if (kinds[r] == RowKind::kOverflow) {
          params.back().repetition_penalty = 4.0f;
          params.back().logit_bias.clear();
        }
        states.push_back(base.Fork(static_cast<uint32_t>(i)));
        spec_rows.push_back(r);
      }
    }
    // The overflow rows need their two finite tokens in the prompt.
    for (size_t i = 0; i < states.size(); ++i) {
      if (kinds[spec_rows[i]] != RowKind::kOverflow) continue;
      std::vector<int32_t> prompt = {0, vocab - 1};
      states[i] = SequenceSamplingState(rng(), prompt, 0);
    }
    std::vector<std::vector<uint64_t>> masks(params.size());
    for (auto& m : masks) m = RandomMask(rng, vocab);
    std::vector<SampleSpec> specs(params.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      specs[i] = {spec_rows[i], &params[i], &states[i], 0, masks[i]};
    }
    const std::vector<SampleResult> dev = DeviceSample(logits, rows, vocab, specs);
    ASSERT_EQ(dev.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const SamplingParams& p = params[i];
      Compare(std::span<const float>(logits).subspan(static_cast<size_t>(spec_rows[i]) * vocab, vocab),
              p, states[i], dev[i],
              absl::StrCat("case ", c, " vocab ", vocab, " spec ", i, " row ", spec_rows[i],
                           " kind ", static_cast<int>(kinds[spec_rows[i]]), " T ", p.temperature,
                           " k ", p.top_k, " p ", p.top_p, " min_p ", p.min_p, " rep ",
                           p.repetition_penalty, " freq ", p.frequency_penalty, " pres ",
                           p.presence_penalty, " logprobs ", p.logprobs, " biased ",
                           p.logit_bias.size(), " min_tokens ", p.min_tokens, " step ",
                           states[i].step(), " masked ", !masks[i].empty()),
              &stats, masks[i]);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("samples %d, sampled %d, tokens that differ within the rounding margin %d\n",
              stats.samples, stats.sampled, stats.margin_mismatches);
  EXPECT_LE(stats.margin_mismatches, std::max(2, stats.sampled / 500));
}

// A fed row's sample (Backend::LaunchSample's feed, SampleSpec::step_ahead 1): its penalties
// count the fed token, read on the device, as generated once more. The pending token is one the
// state generated already, a prompt-only token, the row's argmax (so that a greedy row changes
// its pick when the penalty counts it), any token, or -1 (no distribution, read as 0). Rows
// without penalties or not fed are mixed in.
TEST(DeviceSampling, FedRowsCountTheirPendingToken) {
  std::mt19937_64 rng(std::random_device{}());
  Stats stats;
  int changed_by_pending = 0;  // greedy rows whose CPU pick moves when the token is counted
  for (int c = 0; c < 8; ++c) {
    const int vocab = c % 2 == 0 ? 1000 : 32000;
    const int rows = 16 + static_cast<int>(rng() % 48);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& x : logits) x = normal(rng);
    std::vector<SamplingParams> params(rows);
    std::vector<SequenceSamplingState> states;
    std::vector<int32_t> feed(rows, -1), pending(rows, -1);
    std::vector<int32_t> fed_tokens(rows + 7);
    std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
    for (int32_t& t : fed_tokens) t = tok(rng);
    std::vector<int32_t> slots(fed_tokens.size());
    for (size_t j = 0; j < slots.size(); ++j) slots[j] = static_cast<int32_t>(j);
    std::shuffle(slots.begin(), slots.end(), rng);
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
      params[r] = RandomParams(rng, vocab);
      SamplingParams& p = params[r];
      if (r % 5 != 4) {  // penalties on (the fifth row keeps whatever RandomParams drew)
        p.repetition_penalty = rng() % 2 == 0 ? 1.0f : 1.1f + 0.9f * static_cast<float>(rng() % 100) / 100;
        p.frequency_penalty = 0.5f + static_cast<float>(rng() % 300) / 100;
        p.presence_penalty = rng() % 2 == 0 ? 0.0f : static_cast<float>(rng() % 300) / 100;
      }
      if (r % 3 == 0) p.temperature = 0.0f;
      states.push_back(RandomState(rng, vocab, 0));
      if (r % 7 == 6) continue;  // not fed
      const SequenceSamplingState& st = states.back();
      int32_t t = -1;
      switch (rng() % 5) {
        case 0:
          if (!st.generated_counts().empty()) t = st.generated_counts().begin()->first;
          break;
        case 1:
          for (int32_t id : st.prompt_tokens()) {
            if (!st.generated_counts().contains(id)) t = id;
          }
          break;
        case 2:
        case 3:
          t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
          break;
        default:
          t = rng() % 3 == 0 ? -1 : tok(rng);
      }
      feed[r] = slots[r];
      fed_tokens[feed[r]] = t;
      pending[r] = std::max(t, 0);
    }
    std::vector<SampleSpec> specs(rows);
    for (int r = 0; r < rows; ++r) {
      specs[r] = {r, &params[r], &states[r], feed[r] >= 0 ? 1 : 0};
    }
    const std::vector<SampleResult> dev = DeviceSample(logits, rows, vocab, specs, feed, fed_tokens);
    ASSERT_EQ(dev.size(), specs.size());
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
      SequenceSamplingState taken = states[r];
      if (feed[r] >= 0) taken.Accept(pending[r]);
      const SamplingParams& p = params[r];
      if (feed[r] >= 0 && p.temperature < kGreedyTemperature) {
        auto with = SampleWithUniform(row, p, taken, 0.5f);
        auto without = SampleWithUniform(row, p, states[r], 0.5f);
        if (with.ok() && without.ok() && with->token != without->token) ++changed_by_pending;
      }
      Compare(row, p, taken, dev[r],
              absl::StrCat("case ", c, " vocab ", vocab, " row ", r, " fed ", feed[r], " pending ",
                           pending[r], " T ", p.temperature, " rep ", p.repetition_penalty,
                           " freq ", p.frequency_penalty, " pres ", p.presence_penalty),
              &stats);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("samples %d, sampled %d, margin mismatches %d, greedy picks moved by the pending "
              "token %d\n", stats.samples, stats.sampled, stats.margin_mismatches,
              changed_by_pending);
  EXPECT_GT(changed_by_pending, 0) << "no case where counting the pending token matters";
  EXPECT_LE(stats.margin_mismatches, std::max(2, stats.sampled / 500));
}

SamplingParams Params(float temperature, float top_p, int top_k, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  return p;
}

// The exact distribution of steps 5-7 for one row (no penalties), in double.
std::vector<double> ExactProbabilities(const std::vector<float>& z, const SamplingParams& p) {
  const int n = static_cast<int>(z.size());
  const float zmax = *std::max_element(z.begin(), z.end());
  std::vector<int> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  if (p.top_k > 0 && p.top_k < n) ids.resize(p.top_k);
  std::vector<double> w(n, 0.0);
  for (int id : ids) w[id] = std::exp((z[id] - zmax) / p.temperature);
  double mass = 0;
  for (int id : ids) mass += w[id];
  double before = 0;
  size_t keep = 0;
  for (; keep < ids.size(); ++keep) {
    if (keep > 0 && before >= p.top_p * mass) break;
    before += w[ids[keep]];
  }
  ids.resize(keep);
  std::vector<double> prob(n, 0.0);
  double total = 0;
  for (int id : ids) {
    if (w[id] >= p.min_p) total += w[id];
  }
  for (int id : ids) {
    if (w[id] >= p.min_p) prob[id] = w[id] / total;
  }
  return prob;
}

TEST(DeviceSampling, Distribution) {
  std::mt19937_64 rng(std::random_device{}());
  const int vocab = 4096;
  std::vector<float> logits(vocab);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  for (float& x : logits) x = normal(rng);
  for (const SamplingParams& p :
       {Params(0.8f, 0.9f, 40, 0.0f), Params(1.3f, 0.7f, 0, 0.0f), Params(1.0f, 1.0f, 25, 0.05f)}) {
    const std::vector<double> prob = ExactProbabilities(logits, p);
    const int draws = 200000;
    const SequenceSamplingState base(rng(), {}, 0);
    // Different steps: one state per draw, advanced by Accept (the step is the Philox counter).
    std::vector<SequenceSamplingState> states;
    states.reserve(draws);
    SequenceSamplingState s = base;
    for (int i = 0; i < draws; ++i) {
      states.push_back(s);
      s.Accept(0);
    }
    std::vector<SampleSpec> specs(draws);
    for (int i = 0; i < draws; ++i) specs[i] = {0, &p, &states[i]};
    const std::vector<SampleResult> dev = DeviceSample(logits, 1, vocab, specs);
    std::vector<int64_t> count(vocab, 0);
    for (const SampleResult& r : dev) {
      ASSERT_GE(r.token, 0);
      ASSERT_GT(prob[r.token], 0.0) << "token " << r.token << " is outside the support";
      ++count[r.token];
    }
    double chi2 = 0;
    int support = 0;
    for (int i = 0; i < vocab; ++i) {
      if (prob[i] == 0.0) continue;
      ++support;
      const double e = prob[i] * draws;
      chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    const double dof = std::max(1, support - 1);
    std::printf("support %d, chi2 %.1f (dof %.0f)\n", support, chi2, dof);
    EXPECT_LT(chi2, dof + 6.0 * std::sqrt(2.0 * dof) + 10.0);
  }
}

// Masks written straight into the sampler's upload (DeviceSampler::MaskStaging, as the engine
// loop's fill threads write a late step's) sample exactly as the same masks copied from the
// specs' own vectors: one sampler takes every mask from its spec, a fresh one a third of them
// from staged slots in a shuffled order (spare slots poisoned with all tokens allowed), the rest
// copied after them, so that its upload grows past the staging and must keep it. Both against
// the CPU reference too.
TEST(DeviceSampling, StagedMasksSampleAsCopiedOnes) {
  std::mt19937_64 rng(std::random_device{}());
  for (const int vocab : {1000, 128256}) {
    const int rows = 24;
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (int r = 0; r < rows; ++r) {
      FillRow(rng, RowKind::kNormal,
              std::span<float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab));
    }
    Dev<float> d_logits(logits.size());
    ASSERT_EQ(cudaMemcpy(d_logits.p, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    std::vector<SamplingParams> params;
    std::vector<SequenceSamplingState> states;
    std::vector<std::vector<uint64_t>> masks;
    for (int r = 0; r < rows; ++r) {
      params.push_back(RandomParams(rng, vocab));
      states.push_back(RandomState(rng, vocab, 0));
      std::vector<uint64_t> m;
      while (m.empty()) m = RandomMask(rng, vocab);
      masks.push_back(std::move(m));
    }
    const int64_t words = kernels::cuda::SampleMaskWords(vocab);
    std::vector<int> staged_rows;
    for (int r = 0; r < rows; r += 3) staged_rows.push_back(r);
    const int spare = 2;
    std::vector<int> slots(staged_rows.size() + spare);
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int>(i);
    std::shuffle(slots.begin(), slots.end(), rng);

    std::vector<SampleSpec> copied(rows), staged(rows);
    for (int r = 0; r < rows; ++r) copied[r] = staged[r] = {r, &params[r], &states[r], 0, masks[r]};
    cuda::DeviceSampler a, b;
    std::vector<SampleResult> out_a, out_b;
    ASSERT_TRUE(a.Enqueue(d_logits.p, rows, vocab, copied, nullptr).ok());
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    a.Collect(&out_a);
    std::span<uint64_t> staging;
    ASSERT_TRUE(b.MaskStaging(static_cast<int32_t>(slots.size()), words, &staging).ok());
    ASSERT_EQ(staging.size(), slots.size() * static_cast<size_t>(words));
    std::fill(staging.begin(), staging.end(), ~uint64_t{0});
    for (size_t i = 0; i < staged_rows.size(); ++i) {
      const int r = staged_rows[i];
      std::span<uint64_t> slot = staging.subspan(static_cast<size_t>(slots[i] * words), words);
      std::copy(masks[r].begin(), masks[r].end(), slot.begin());
      staged[r].allowed = slot;
    }
    ASSERT_TRUE(b.Enqueue(d_logits.p, rows, vocab, staged, nullptr).ok());
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    b.Collect(&out_b);
    ASSERT_EQ(out_a.size(), static_cast<size_t>(rows));
    ASSERT_EQ(out_b.size(), static_cast<size_t>(rows));
    Stats stats;
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(out_a[r].token, out_b[r].token) << "vocab " << vocab << " row " << r;
      EXPECT_EQ(out_a[r].logprob, out_b[r].logprob) << "vocab " << vocab << " row " << r;
      EXPECT_EQ(out_a[r].top_logprobs, out_b[r].top_logprobs) << "vocab " << vocab << " row " << r;
      Compare(std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab),
              params[r], states[r], out_b[r], absl::StrCat("staged, vocab ", vocab, " row ", r),
              &stats, masks[r]);
    }
    EXPECT_LE(stats.margin_mismatches, 1);
  }
}

// CudaBackend::ForwardSample on the bundled model against Forward + the CPU sampler.
TEST(DeviceSampling, BackendForwardSample) {
  auto w = model::LoadModel(::banyan::testing::BundledModelPath());
  ASSERT_TRUE(w.ok()) << w.status();
  CudaBackendOptions opt;
  opt.num_chunks = 16;
  opt.chunk_size = 64;
  opt.cuda_graphs = false;
  auto backend = CudaBackend::Create(&*w, opt);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int vocab = w->config.vocab_size;
  std::mt19937_64 rng(std::random_device{}());
  StepBatch batch;
  const int prompts = 6;
  for (int s = 0; s < prompts; ++s) {
    SeqWork work;
    const int len = 3 + static_cast<int>(rng() % 40);
    for (int j = 0; j < len; ++j) {
      work.tokens.push_back(1 + static_cast<int32_t>(rng() % (vocab - 1)));
      work.slots.push_back({s, j});
      work.write_kv.push_back(1);
    }
    work.span_chunk = {s};
    work.span_begin = {0};
    work.span_end = {len};
    batch.prefill.push_back(std::move(work));
  }
  std::vector<float> logits;
  ASSERT_TRUE((*backend)->Forward(batch, &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(prompts) * vocab);

  std::vector<SamplingParams> params;
  std::vector<SequenceSamplingState> states;
  std::vector<int32_t> rows;
  for (int r = 0; r < prompts; ++r) {
    for (int i = 0; i < 4; ++i) {
      SamplingParams p = RandomParams(rng, vocab);
      if (i == 0) {  // plain greedy with top logprobs
        p = Params(0.0f, 1.0f, 0, 0.0f);
        p.logprobs = 5;
      }
      if (i == 1) p.temperature = 0.0f;  // greedy with random penalties and filters
      params.push_back(p);
      states.push_back(RandomState(rng, vocab, static_cast<uint32_t>(i)));
      rows.push_back(r);
    }
  }
  std::vector<std::vector<uint64_t>> masks(params.size());
  for (auto& m : masks) m = RandomMask(rng, vocab);
  std::vector<SampleSpec> specs(params.size());
  for (size_t i = 0; i < specs.size(); ++i) specs[i] = {rows[i], &params[i], &states[i], 0, masks[i]};
  std::vector<SampleResult> dev;
  const absl::Status st = (*backend)->ForwardSample(batch, specs, &dev);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(dev.size(), specs.size());
  Stats stats;
  for (size_t i = 0; i < specs.size(); ++i) {
    Compare(std::span<const float>(logits).subspan(static_cast<size_t>(rows[i]) * vocab, vocab),
            params[i], states[i], dev[i],
            absl::StrCat("backend spec ", i, " masked ", !masks[i].empty()), &stats, masks[i]);
  }
  EXPECT_LE(stats.margin_mismatches, 2);
}

}  // namespace
}  // namespace banyan::engine
