// Speculative decoding in the engine loop, on the bundled model: candidate chains and trees from
// its trained Hydra heads (and chains from prompt lookup) verified through the prefix tree must
// leave every output exactly as it is without speculation (tokens, text, finish reasons, usage):
// greedy, and sampled with a seed (each candidate row draws what its position would draw), with
// and without the CPU a step ahead, with shared prefixes, n > 1, stop strings, penalties and
// preemption; the candidates must actually be accepted (not a loop that silently never
// speculates); and sampled outputs without a common seed must follow the same distribution.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "gtest/gtest.h"
#include "scheduler/generate.h"
#include "tests/scheduler/forwarding_backend.h"
#include "tests/scheduler/speculation_util.h"
#include "tests/testing/bundled_model.h"

namespace banyan::scheduler {
namespace {

const std::string kDir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K";

class SpeculationTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    bundle_ = &banyan::testing::BundledModel();
    auto h = engine::DraftHeads::Load(kDir + "/hydra/config.json", bundle_->weights);
    ASSERT_TRUE(h.ok()) << h.status();
    heads_ = new engine::DraftHeads(std::move(*h));
  }
  static void TearDownTestSuite() {
    delete heads_;
  }

  Request Make(const std::string& text, int max_tokens) {
    Request r;
    r.id = absl::StrCat("s", ++ids_);
    r.prompt = bundle_->tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    return r;
  }

  // Hydra chains under the adaptive governor, four sequences at a time.
  LoopOptions GovernedHeads() const {
    LoopOptions o;
    o.speculation = LoopOptions::Speculation::kHeads;
    o.draft_heads = heads_;
    o.draft_tokens = heads_->num_heads();
    o.speculation_adaptive = true;
    o.max_running_sequences = 4;
    return o;
  }

  std::vector<Request> Mix() {
    std::vector<Request> reqs;
    const char* texts[] = {"Once upon a time", "The little dog", "Lily and her mom went to",
                           "One day, a big red ball", "Tom had a toy car. He liked to"};
    for (int i = 0; i < 12; ++i) {
      Request r = Make(texts[i % 5], 12 + 7 * i);
      if (i % 5 == 2) r.n = 2;                     // greedy: one sequence, two choices
      if (i % 4 == 3) r.stop = {"the", "Max"};     // stop strings inside accepted chains
      if (i == 9) r.params.ignore_eos = true;
      if (i % 6 == 5) {                            // sampled, with a seed
        r.params.temperature = 0.8f;
        r.params.seed = 7 + i;
        r.params.has_seed = true;
      }
      if (i == 7) {  // sampled through every filter and penalty (the rows' states carry counts)
        r.params.temperature = 1.1f;
        r.params.top_p = 0.9f;
        r.params.top_k = 40;
        r.params.repetition_penalty = 1.2f;
        r.params.frequency_penalty = 0.2f;
        r.params.presence_penalty = 0.3f;
        r.params.seed = 99;
        r.params.has_seed = true;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  absl::StatusOr<std::vector<GenerationResult>> Run(const std::vector<Request>& reqs,
                                                    LoopOptions o, int chunks,
                                                    MetricsSnapshot* metrics = nullptr,
                                                    LoopStats* stats = nullptr) {
    return testing::RunOnCpu(bundle_->weights, bundle_->tokenizer.get(), reqs, o, chunks, metrics,
                             16, stats);
  }

  static void ExpectSame(const std::vector<GenerationResult>& a,
                         const std::vector<GenerationResult>& b, const std::string& what) {
    testing::ExpectSameResults(a, b, what);
  }

  static const model::ModelBundle* bundle_;
  static engine::DraftHeads* heads_;
  int ids_ = 0;
};
const model::ModelBundle* SpeculationTest::bundle_ = nullptr;
engine::DraftHeads* SpeculationTest::heads_ = nullptr;

TEST_F(SpeculationTest, HydraHeadsKeepOutputsExactly) {
  const std::vector<Request> reqs = Mix();
  struct Drafting {
    const char* name;
    std::vector<int> tree;  // empty: a chain of 3
  };
  const Drafting draftings[] = {{"chain", {}}, {"tree 4,2,2", {4, 2, 2}}, {"tree 2,2", {2, 2}}};
  for (int overlap : {0, 1}) {
    // 48 chunks of 16: preemption, and trees that often do not fit.
    for (int chunks : {512, 48}) {
      LoopOptions off{.max_running_sequences = 16, .prefill_token_budget = 64,
                      .overlap = overlap};
      auto plain = Run(reqs, off, chunks);
      ASSERT_TRUE(plain.ok()) << plain.status();
      for (const Drafting& dr : draftings) {
        LoopOptions on = off;
        on.speculation = LoopOptions::Speculation::kHeads;
        on.draft_heads = heads_;
        on.draft_tokens = 3;
        on.draft_tree = dr.tree;
        on.speculation_max_rows = 64;
        on.speculation_adaptive = false;  // keep speculating: the test is about exactness
        on.speculation_min_accept = 0;
        MetricsSnapshot m;
        LoopStats st;
        auto spec = Run(reqs, on, chunks, &m, &st);
        ASSERT_TRUE(spec.ok()) << spec.status();
        const std::string what =
            absl::StrCat(dr.name, " overlap ", overlap, " chunks ", chunks);
        // A tree's nodes are packed into shared chunks (16 slots here): [4,2,2]'s 28 candidates
        // take under 2.5 chunks per sample and step, not one chunk per node.
        ASSERT_GT(st.speculating_samples, 0) << what;
        const double per_sample =
            static_cast<double>(st.candidate_chunks) / static_cast<double>(st.speculating_samples);
        EXPECT_LT(per_sample, 2.5) << what;
        std::printf("[%s] %.2f KV chunks per speculating sample and step\n", what.c_str(),
                    per_sample);
        ExpectSame(*plain, *spec, what);
        EXPECT_GT(m.spec_drafts_total, 0) << what;
        EXPECT_GT(m.spec_accepted_tokens_total, 0) << what;
        EXPECT_LE(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
        EXPECT_LE(m.spec_accepted_per_position[1], m.spec_accepted_per_position[0]);
        int32_t drafted = 0, accepted = 0;
        for (const GenerationResult& g : *spec) {
          drafted += g.usage.draft_tokens;
          accepted += g.usage.accepted_draft_tokens;
        }
        EXPECT_EQ(drafted, m.spec_draft_tokens_total);
        EXPECT_EQ(accepted, m.spec_accepted_tokens_total);
        std::printf("[%s] %s\n", what.c_str(), testing::SpecSummary(m).c_str());
      }
    }
  }
}

// With fed steps on, a speculating loop feeds the steps its governor keeps plain (a fed step's
// rows take their input tokens on the device, so it cannot carry candidates) and waits for the
// tokens where it speculates: both kinds of step run, and the outputs are plain decoding's.
TEST_F(SpeculationTest, GovernedSpeculationFeedsThePlainSteps) {
  const std::vector<Request> reqs = Mix();
  LoopOptions off{.max_running_sequences = 16, .prefill_token_budget = 64, .overlap = 1,
                  .feed = 1};
  MetricsSnapshot plain_m;
  auto plain = Run(reqs, off, 512, &plain_m);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(plain_m.decode_fed_steps_total, 0);
  for (const std::vector<int>& tree : {std::vector<int>{}, std::vector<int>{4, 2, 2}}) {
    LoopOptions on = off;
    on.speculation = LoopOptions::Speculation::kHeads;
    on.draft_heads = heads_;
    on.draft_tokens = 3;
    on.draft_tree = tree;
    on.speculation_adaptive = true;
    on.speculation_min_accept = 0;
    MetricsSnapshot m;
    LoopStats stats;
    auto spec = Run(reqs, on, 512, &m, &stats);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const std::string what = tree.empty() ? "chain" : "tree 4,2,2";
    // Drafting never reads a fed step's hidden rows as its own.
    EXPECT_EQ(stats.draft_failures, 0) << what;
    ExpectSame(*plain, *spec, what);
    EXPECT_GT(m.spec_drafts_total, 0) << what;
    EXPECT_GT(m.decode_fed_steps_total, 0) << what;
  }
  // Prompt lookup with nothing to look up yet (fresh prompts): the steps are fed as plain ones
  // (they once waited for every step, the governor saying "speculate" to steps without drafts).
  LoopOptions lookup = off;
  lookup.speculation = LoopOptions::Speculation::kLookup;
  lookup.ngram_lookup.max_n = 0;  // the continuations alone (the story model repeats itself)
  lookup.speculation_adaptive = true;
  std::vector<Request> fresh;
  for (int i = 0; i < 6; ++i) fresh.push_back(Make(absl::StrCat("Tom had ", i, " toy cars."), 24));
  MetricsSnapshot plain_fresh_m, lookup_m;
  auto plain_fresh = Run(fresh, off, 512, &plain_fresh_m);
  auto looked = Run(fresh, lookup, 512, &lookup_m);
  ASSERT_TRUE(plain_fresh.ok() && looked.ok());
  ExpectSame(*plain_fresh, *looked, "lookup");
  EXPECT_EQ(lookup_m.spec_drafts_total, 0);
  EXPECT_EQ(lookup_m.decode_fed_steps_total, plain_fresh_m.decode_fed_steps_total);
  EXPECT_GT(lookup_m.decode_fed_steps_total, 0);
}

// A tree accepts more per step than the chain through its top-1 path (the chain is one of its
// paths), and candidates that do not fit the step's token budget are not drafted.
TEST_F(SpeculationTest, TreesAcceptMoreAndDraftsCountInTheTokenBudget) {
  std::vector<Request> reqs;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and her mom went to"}) {
    Request r = Make(t, 48);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  LoopStats stats;
  auto per_step = [&](std::vector<int> tree, int budget, MetricsSnapshot* m) {
    LoopOptions o{.max_running_sequences = 16, .prefill_token_budget = budget};
    o.speculation = LoopOptions::Speculation::kHeads;
    o.draft_heads = heads_;
    o.draft_tree = std::move(tree);
    o.speculation_adaptive = false;
    o.speculation_min_accept = 0;
    auto res = Run(reqs, o, 512, m, &stats);
    EXPECT_TRUE(res.ok()) << res.status();
    return m->spec_drafts_total == 0
               ? 0.0
               : 1.0 + static_cast<double>(m->spec_accepted_tokens_total) /
                           static_cast<double>(m->spec_drafts_total);
  };
  MetricsSnapshot chain, tree, tight;
  const double chain_rate = per_step({1, 1, 1}, 64, &chain);
  const double tree_rate = per_step({4, 2, 2}, 64, &tree);
  std::printf("chain [1,1,1] %.2f tokens per step, tree [4,2,2] %.2f\n", chain_rate, tree_rate);
  EXPECT_GT(tree_rate, chain_rate);
  // 4 + 8 + 16 nodes, fewer only where max_tokens leaves less than 3 levels.
  EXPECT_LE(tree.spec_draft_tokens_total, 28 * tree.spec_drafts_total);
  EXPECT_GT(tree.spec_draft_tokens_total, 25 * tree.spec_drafts_total);
  EXPECT_EQ(stats.max_step_candidates, 2 * 28);  // three samples, room for two trees in 64 tokens
  // A 20-token budget: one full tree never fits; shallower ones near the end do.
  per_step({4, 2, 2}, 20, &tight);
  EXPECT_LE(stats.max_step_candidates, 20);
  EXPECT_LT(tight.spec_drafts_total, tree.spec_drafts_total / 4);
}

// Without a common seed, sampled outputs with speculation follow the distribution without it:
// a chi-square two-sample test per position over 400 fixed-seed samples each, and the same
// statistic must tell a different temperature apart (so that it can fail).
TEST_F(SpeculationTest, SampledOutputsKeepTheirDistribution) {
  const int kSamples = 400, kTokens = 5;
  auto draw = [&](bool speculate, float temperature, uint64_t seed0) {
    std::vector<Request> reqs;
    for (int i = 0; i < kSamples; ++i) {
      Request r = Make("Once upon a time", kTokens);
      r.params.temperature = temperature;
      r.params.ignore_eos = true;
      r.params.seed = seed0 + static_cast<uint64_t>(i);
      r.params.has_seed = true;
      reqs.push_back(r);
    }
    LoopOptions o{.max_running_sequences = 64, .prefill_token_budget = 1024};
    if (speculate) {
      o.speculation = LoopOptions::Speculation::kHeads;
      o.draft_heads = heads_;
      o.draft_tree = {3, 2, 1};
      o.speculation_max_rows = 64;
      o.speculation_adaptive = false;
      o.speculation_min_accept = 0;
    }
    MetricsSnapshot m;
    auto res = Run(reqs, o, 4096, &m);
    EXPECT_TRUE(res.ok()) << res.status();
    if (speculate) {
      EXPECT_GT(m.spec_accepted_tokens_total, kSamples / 2);
    }
    std::vector<std::vector<int32_t>> out;
    for (const GenerationResult& g : *res) out.push_back(g.samples[0].tokens);
    return out;
  };
  // Largest Wilson-Hilferty z of the per-position chi-square statistics (categories with fewer
  // than 10 draws in both runs pooled).
  auto worst_z = [&](const std::vector<std::vector<int32_t>>& a,
                     const std::vector<std::vector<int32_t>>& b) {
    double worst = -10;
    for (int pos = 0; pos < kTokens; ++pos) {
      std::map<int32_t, std::pair<double, double>> counts;
      for (const auto& t : a) counts[t[pos]].first += 1;
      for (const auto& t : b) counts[t[pos]].second += 1;
      std::vector<std::pair<double, double>> cells;
      std::pair<double, double> rare{0, 0};
      for (auto& [tok, c] : counts) {
        if (c.first + c.second < 10) {
          rare.first += c.first;
          rare.second += c.second;
        } else {
          cells.push_back(c);
        }
      }
      if (rare.first + rare.second > 0) cells.push_back(rare);
      if (cells.size() < 2) continue;
      double chi2 = 0;
      for (auto [x, y] : cells) chi2 += (x - y) * (x - y) / (x + y);  // equal sample sizes
      const double k = static_cast<double>(cells.size() - 1);
      const double z = (std::cbrt(chi2 / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
      worst = std::max(worst, z);
    }
    return worst;
  };
  const auto off = draw(false, 1.0f, 1000);
  const auto on = draw(true, 1.0f, 5000);
  const auto cooler = draw(false, 0.6f, 9000);
  const double same = worst_z(off, on), different = worst_z(off, cooler);
  std::printf("worst z: speculation on against off %.2f, temperature 0.6 against 1.0 %.2f\n",
              same, different);
  EXPECT_LT(same, 3.5);       // p > 2e-4 at every position
  EXPECT_GT(different, 3.5);  // the test can tell distributions apart
}

// Prompt lookup drafts a repeated request's own earlier continuation: the second run of the same
// greedy requests accepts every candidate, and the outputs stay the same.
TEST_F(SpeculationTest, LookupAcceptsARepeatedRequestWhole) {
  std::vector<Request> reqs;
  for (const char* t : {"Once upon a time", "The little dog ran"}) {
    Request r = Make(t, 40);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  auto backend = engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 256, .chunk_size = 16});
  ASSERT_TRUE(backend.ok());
  LoopOptions o{.max_running_sequences = 16, .prefill_token_budget = 64};
  o.speculation = LoopOptions::Speculation::kLookup;
  o.ngram_lookup.max_n = 0;  // the continuations alone
  o.draft_tokens = 4;
  o.speculation_adaptive = false;
  EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend), o);
  auto first = GenerateAll(loop, reqs);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(loop.metrics().spec_drafts_total, 0);  // nothing to look up yet
  auto second = GenerateAll(loop, reqs);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectSame(*first, *second, "lookup");
  const MetricsSnapshot& m = loop.metrics();
  EXPECT_GT(m.spec_draft_tokens_total, 0);
  EXPECT_EQ(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
  // 40 tokens in chains of 1 + 4: about 8 steps per request instead of 40.
  EXPECT_LE(m.spec_drafts_total, 2 * 9);
  EXPECT_TRUE(loop.tree().CheckInvariants().ok()) << loop.tree().CheckInvariants();
}

// The same with fed steps (a step launched before the one before it is collected, as on a GPU):
// a prompt's first decode step is fed plain when its prefill step decodes nothing, and the
// continuation must still be found from the next step on. It once was looked up at the first
// decode step only, so on a GPU a repeated request never drafted (H100, 2026-12-06: the 8B
// lookup load at 1 client verified no candidate), forced or governed.
TEST_F(SpeculationTest, LookupDraftsAfterAFedFirstStep) {
  std::vector<Request> reqs;
  for (const char* t : {"Once upon a time", "The little dog ran"}) {
    Request r = Make(t, 40);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  for (const bool adaptive : {false, true}) {
    auto backend =
        engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 256, .chunk_size = 16});
    ASSERT_TRUE(backend.ok());
    LoopOptions o{.max_running_sequences = 16, .prefill_token_budget = 64, .overlap = 1,
                  .feed = 1};
    o.speculation = LoopOptions::Speculation::kLookup;
    o.ngram_lookup.max_n = 0;  // the continuations alone
    o.draft_tokens = 4;
    o.speculation_adaptive = adaptive;
    o.speculation_min_accept = 0;
    EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend), o);
    auto first = GenerateAll(loop, reqs);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_GT(loop.metrics().decode_fed_steps_total, 0);
    auto second = GenerateAll(loop, reqs);
    ASSERT_TRUE(second.ok()) << second.status();
    ExpectSame(*first, *second, "lookup, fed");
    const MetricsSnapshot& m = loop.metrics();
    EXPECT_GT(m.spec_draft_tokens_total, 0) << "adaptive " << adaptive;
    EXPECT_EQ(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
    EXPECT_LE(m.spec_drafts_total, 2 * 12) << "adaptive " << adaptive;
  }
}

// N-gram lookup drafts from a request's own context the first time it is seen: a prompt that
// repeats itself has its repetition proposed, the model takes some of it, and every output
// (greedy and seeded sampled, with steps fed or not) stays that of plain decoding.
TEST_F(SpeculationTest, NgramLookupDraftsFromTheContextAndKeepsOutputs) {
  const std::string verse = "Lily went to the park. She saw a big dog. The dog was happy. ";
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r = Make(verse + verse + verse.substr(0, 20 + 9 * i), 32);
    if (i == 2) {
      r.params.temperature = 0.8f;
      r.params.seed = 11;
      r.params.has_seed = true;
    }
    reqs.push_back(r);
  }
  for (const int fed : {0, 1}) {
    LoopOptions off{.max_running_sequences = 16, .prefill_token_budget = 64, .overlap = fed,
                    .feed = fed};
    auto plain = Run(reqs, off, 512);
    ASSERT_TRUE(plain.ok()) << plain.status();
    LoopOptions o = off;
    o.speculation = LoopOptions::Speculation::kLookup;
    o.draft_tokens = 4;
    o.speculation_adaptive = false;
    o.speculation_min_accept = 0;
    o.ngram_lookup.max_n = 4;
    MetricsSnapshot m;
    auto spec = Run(reqs, o, 512, &m);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const std::string what = absl::StrCat("n-gram lookup, fed ", fed);
    ExpectSame(*plain, *spec, what);
    EXPECT_GT(m.spec_drafts_total, 0) << what;
    EXPECT_GT(m.spec_accepted_tokens_total, 0) << what;
    EXPECT_GT((*spec)[2].usage.draft_tokens, 0) << what << ": the sampled request";
    if (fed) EXPECT_GT(m.decode_fed_steps_total, 0) << what;
    std::printf("[%s] %s\n", what.c_str(), testing::SpecSummary(m).c_str());
  }
}

// A sample whose drafts are hardly ever right pauses for some tokens, and its steps are fed
// meanwhile: paused samples once counted as drafting, so a paused sample with an n-gram match
// kept every step waiting for the one before, while placing no candidates.
TEST_F(SpeculationTest, PausedSamplesLetTheirStepsBeFed) {
  const std::string verse = "Lily went to the park. She saw a big dog. The dog was happy. ";
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(Make(verse + verse + verse.substr(0, 24 + 9 * i), 40));
  auto run = [&](float min_accept, MetricsSnapshot* m) {
    LoopOptions o{.max_running_sequences = 16, .prefill_token_budget = 64, .overlap = 1,
                  .feed = 1};
    o.speculation = LoopOptions::Speculation::kLookup;
    o.draft_tokens = 4;
    o.speculation_adaptive = false;
    o.speculation_min_accept = min_accept;
    o.ngram_lookup.max_n = 4;
    return Run(reqs, o, 512, m);
  };
  MetricsSnapshot never, always;
  auto a = run(0, &never);
  auto b = run(16, &always);  // more than 4 candidates can give: every verification pauses
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSame(*a, *b, "paused");
  EXPECT_GT(always.spec_drafts_total, 0);
  EXPECT_LT(always.spec_drafts_total, never.spec_drafts_total);
  EXPECT_GT(always.decode_fed_steps_total, never.decode_fed_steps_total);
  std::printf("fed steps: %lld never paused, %lld always; verifications %lld / %lld\n",
              static_cast<long long>(never.decode_fed_steps_total),
              static_cast<long long>(always.decode_fed_steps_total),
              static_cast<long long>(never.spec_drafts_total),
              static_cast<long long>(always.spec_drafts_total));
}

// The governor measures both ways, keeps the faster, and probes the other way ever more rarely
// while the answer stays; a change of the measured rates changes the answer; the first steps
// after a switch (graph captures, cold caches) do not decide.
// Continuous arrivals: with a prompt in nearly every step, the governor must still measure both
// ways. It once measured decode-only steps alone; with few of them it stayed in its first way,
// speculating on every step, unmeasured (the adaptive mode lost as much as forced speculation).
TEST_F(SpeculationTest, GovernorMeasuresStepsThatAlsoPrefill) {
  LoopOptions o = GovernedHeads();
  o.prefill_token_budget = 8;  // a prompt takes several steps, beside the others' decode rows
  std::vector<Request> reqs;
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends and her dog";
  for (int i = 0; i < 48; ++i) reqs.push_back(Make(story + std::string(i % 7, '!'), 6));
  auto backend = engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 512, .chunk_size = 16});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend), o);
  auto results = GenerateAll(loop, reqs);
  ASSERT_TRUE(results.ok()) << results.status();
  const SpeculationGovernor& g = loop.speculation_governor();
  int64_t measured_with = 0, measured_without = 0, steps = 0;
  for (int c = 0; c < SpeculationGovernor::kClasses; ++c) {
    measured_with += g.at(c).with.n;
    measured_without += g.at(c).without.n;
    steps += g.at(c).steps;
  }
  EXPECT_GT(steps, 30);
  EXPECT_GE(measured_with, SpeculationGovernor::kMeasuredSteps) << steps << " steps";
  EXPECT_GE(measured_without, SpeculationGovernor::kMeasuredSteps) << steps << " steps";
}

// A CPU backend whose draft heads cost `draft_cost` of host time per drafting (as on a GPU where
// the heads' trees take longer than a small model's step): the sleep stands for work, it waits
// for nothing.
class SlowDraftBackend : public ForwardingBackend {
 public:
  SlowDraftBackend(std::unique_ptr<engine::Backend> inner, std::chrono::milliseconds draft_cost)
      : ForwardingBackend(std::move(inner)), draft_cost_(draft_cost) {}
  std::string_view name() const override { return "slow-draft-cpu"; }
  absl::Status DraftTrees(const engine::DraftHeads& heads, std::span<const int32_t> rows,
                          std::span<const int32_t> roots, std::span<const int32_t> branching,
                          std::vector<engine::DraftHeads::Tree>* out) override {
    absl::Status s = ForwardingBackend::DraftTrees(heads, rows, roots, branching, out);
    std::this_thread::sleep_for(draft_cost_);
    return s;
  }

 private:
  std::chrono::milliseconds draft_cost_;
};

// Drafting happens on the host between two steps; a speculating step's clients pay for it, so
// the governor must too: a step's wall time runs from the previous step's tokens, which holds
// the drafting of its candidates. With drafting a hundred times a plain step here, speculation
// must lose: only the first measurement and rare probes speculate (a step that left drafting
// out would measure more tokens for about the same time and speculate on most steps).
TEST_F(SpeculationTest, GovernorCountsDraftingAgainstSpeculation) {
  LoopOptions o = GovernedHeads();
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(Make("Once upon a time" + std::string(i, '!'), 160));
    reqs.back().params.ignore_eos = true;  // four rows to the end: one size class
  }
  auto inner = engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 256, .chunk_size = 16});
  ASSERT_TRUE(inner.ok()) << inner.status();
  auto backend = std::make_unique<SlowDraftBackend>(std::move(*inner), std::chrono::milliseconds(100));
  EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(backend), o);
  auto results = GenerateAll(loop, reqs);
  ASSERT_TRUE(results.ok()) << results.status();
  const SpeculationGovernor& g = loop.speculation_governor();
  int64_t with = 0, without = 0;
  std::string rates;
  for (int c = 0; c < SpeculationGovernor::kClasses; ++c) {
    with += g.at(c).with.seen;
    without += g.at(c).without.seen;
    if (g.at(c).steps > 0) {
      absl::StrAppend(&rates, " class ", c, ": ", g.at(c).with.rate(), " tok/s with, ",
                      g.at(c).without.rate(), " without;");
    }
  }
  SCOPED_TRACE(rates);
  EXPECT_GE(with, SpeculationGovernor::kSettleSteps + SpeculationGovernor::kMeasuredSteps);
  EXPECT_GT(without, 3 * with) << with << " steps with candidates, " << without << " without";
}

// The start-up profile on a loop whose drafting costs 20 ms a step: every class it profiles
// finds candidates slower, and the load that follows never speculates (without the profile the
// governor spends a burst of steps per class finding that out; see the test above). The profile
// leaves no trace: no cached KV, the same metrics as before.
TEST_F(SpeculationTest, StartUpProfileKeepsALosingWayOffFromTheFirstStep) {
  LoopOptions o = GovernedHeads();
  auto inner = engine::CpuBackend::Create(&bundle_->weights, {.num_chunks = 256, .chunk_size = 16});
  ASSERT_TRUE(inner.ok()) << inner.status();
  auto backend = std::make_unique<SlowDraftBackend>(std::move(*inner), std::chrono::milliseconds(20));
  EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(backend), o);
  const MetricsSnapshot before = loop.metrics();
  const auto profile = loop.ProfileSpeculation();
  ASSERT_EQ(profile.size(), 3u);  // 1, 2 and 4 rows (max_running_sequences)
  for (const auto& r : profile) {
    SCOPED_TRACE(r.rows);
    EXPECT_GE(r.steps_with, 3);
    EXPECT_GE(r.steps_without, 3);
    EXPECT_GT(r.seconds_with, r.seconds_without + 0.015);  // the drafting, and more rows
    EXPECT_TRUE(loop.speculation_governor().at(r.size_class).profiled());
  }
  EXPECT_EQ(loop.tree().Stats().chunks_cached, 0);
  EXPECT_EQ(loop.tree().Stats().chunks_live, 0);
  EXPECT_EQ(loop.metrics().generation_tokens_total, before.generation_tokens_total);
  EXPECT_EQ(loop.metrics().spec_drafts_total, 0);
  EXPECT_EQ(loop.metrics().requests_finished_total, 0);

  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(Make("Once upon a time" + std::string(i, '!'), 48));
    reqs.back().params.ignore_eos = true;
  }
  auto results = GenerateAll(loop, reqs);
  ASSERT_TRUE(results.ok()) << results.status();
  int64_t with = 0, without = 0;
  for (int c = 0; c < SpeculationGovernor::kClasses; ++c) {
    with += loop.speculation_governor().at(c).with.seen;
    without += loop.speculation_governor().at(c).without.seen;
  }
  EXPECT_EQ(with, 0);
  EXPECT_GE(without, 40);
  EXPECT_EQ(loop.metrics().spec_drafts_total, 0);
}

// With a start-up profile the answer is right from a class's first step: no burst measures
// the losing way first, and probes are priced by the predicted gap. Tokens per row measured in
// one class decide the others.
TEST(SpeculationGovernorTest, AProfiledClassIsRightFromItsFirstStep) {
  SpeculationGovernor g;
  g.SetPrior(2.5);
  // A step with candidates costs 4x a plain one: 2.5 tokens per row cannot pay.
  g.SetProfile(3, 0.004, 0.001);
  // It costs 1.5x: 2.5 tokens per row pay.
  g.SetProfile(0, 0.0015, 0.001);
  g.SetProfile(1, 0.0030, 0.001);  // 3x: pays only above 3 tokens per row
  int slow_class_speculated = 0;
  for (int i = 0; i < 150; ++i) {
    const bool s = g.Speculate(3);
    slow_class_speculated += s;
    g.Record(3, s, 8, s ? 20 : 8, s ? 0.004 : 0.001);
  }
  EXPECT_EQ(slow_class_speculated, 0);
  // The cheap class speculates from its first step; its measurements (1.2 tokens per row at 1.5x
  // the time: a loss) turn it off once measured, and what they say of acceptance turns off a
  // class that was never measured.
  EXPECT_TRUE(g.Speculate(0));
  g.Record(0, true, 1, 1.2, 0.0015);
  EXPECT_GT(g.Advantage(1), 2.5 / 3 - 1e-9);  // the prior still
  int first_off = -1;
  for (int i = 1; i < 40 && first_off < 0; ++i) {
    const bool s = g.Speculate(0);
    if (!s) first_off = i;
    g.Record(0, s, 1, s ? 1.2 : 1, s ? 0.0015 : 0.001);
  }
  EXPECT_EQ(first_off, SpeculationGovernor::kSettleSteps + SpeculationGovernor::kMeasuredSteps);
  EXPECT_NEAR(g.tokens_per_row(), 1.2, 1e-9);
  EXPECT_FALSE(g.MaySpeculate(1));
  EXPECT_FALSE(g.Speculate(1));
  // An unprofiled class still measures both ways first.
  EXPECT_TRUE(g.Speculate(5));
}

// A profiled class near a tie (the ways within 1 % of each other once measured) does not flip
// between them at short intervals: each probe's switches cost settling steps the rates do not
// show. Its first probe comes early (the profile may hide a gain); once both ways are measured,
// the next ones come after kProfiledReprobe steps and later still.
TEST(SpeculationGovernorTest, AProfiledClassProbesRarely) {
  SpeculationGovernor g;
  g.SetPrior(2.0);
  g.SetProfile(6, 0.0020, 0.0010);  // 2.0 tokens per row at 2x the time: a tie, so plain
  int64_t switches = 0, speculated = 0;
  bool last = false;
  for (int i = 0; i < 4 * SpeculationGovernor::kProfiledReprobe; ++i) {
    const bool s = g.Speculate(6);
    switches += s != last;
    speculated += s;
    last = s;
    g.Record(6, s, 64, s ? 2.0 * 64 * 0.99 : 64, s ? 0.0020 : 0.0010);
  }
  EXPECT_FALSE(g.Speculate(6));
  // The first probe, and at most two more (there and back each) in the 4,096 steps.
  EXPECT_LE(switches, 2 * 3);
  EXPECT_LE(speculated, 3 * (SpeculationGovernor::kSettleSteps + SpeculationGovernor::kMeasuredSteps));
}

// A profiled class whose first visit to the faster way measured it slow (a cold cache, a late
// graph capture) does not hold that answer: the probe interval set when that visit began was
// priced before both ways were measured, so a second visit comes soon, and from its measurement
// on the answer follows the rates at every step (the probe floor only spaces visits to the
// slower way). Here the profile prices a step with candidates at 2.94x a plain one (plain
// first); online such a step takes 2x and makes 2.56 tokens (1.28x), but the first visit's steps
// take 4x.
TEST(SpeculationGovernorTest, AProfiledClassReprobesSoonAfterABadVisit) {
  SpeculationGovernor g;
  g.SetPrior(2.5);
  g.SetProfile(0, 0.00294, 0.001);
  ASSERT_FALSE(g.MaySpeculate(0));
  int visits = 0, speculated = 0, first_steady = -1;
  bool last = false;
  for (int i = 0; i < 1000; ++i) {
    const bool s = g.Speculate(0);
    if (s && !last) ++visits;
    last = s;
    speculated += s;
    if (s && visits >= 2 && first_steady < 0) first_steady = i;
    const double seconds = !s ? 0.001 : visits == 1 ? 0.004 : 0.002;
    g.Record(0, s, 1, s ? 2.56 : 1, seconds);
  }
  SCOPED_TRACE(absl::StrCat("second visit at step ", first_steady, "; ", speculated,
                            " steps speculated"));
  EXPECT_GE(visits, 2);
  EXPECT_GT(first_steady, 0);
  EXPECT_LT(first_steady, 300);
  EXPECT_GT(speculated, 650);
  EXPECT_TRUE(g.MaySpeculate(0));
}

// A probe that lands where every step got faster (a new load) does not switch on the strength
// of the old, slower average of the way that ran: that way is measured again first. Plain steps
// make 1 token in 1 ms and steps with candidates 1.5 in 2 ms until the probe; from the probe on
// both take half as long. Plain stays 1.33x faster throughout; without the second measurement
// the probe's 1,500 tok/s beat plain's stale 1,000 and the class ran candidates from then on
// (a visit of 198 steps here, until the next probe).
TEST(SpeculationGovernorTest, AProbeThatSaysSwitchMeasuresTheWayThatRanAgain) {
  SpeculationGovernor g;
  g.SetPrior(1.5);
  g.SetProfile(0, 0.002, 0.001);
  ASSERT_FALSE(g.MaySpeculate(0));
  const int64_t probe = g.at(0).next_probe;
  int64_t row = 0, speculated = 0, after_probe = 0, longest_visit = 0;
  bool prev = false;
  for (int64_t step = 1; step <= probe + 500; ++step) {
    const bool may = g.MaySpeculate(0);
    const bool s = g.Speculate(0);
    ASSERT_EQ(s, may) << "step " << step;
    row = s == prev ? row + 1 : 1;
    prev = s;
    speculated += s;
    if (step >= probe) after_probe += s;
    if (s) longest_visit = std::max(longest_visit, row);
    const double scale = step >= probe ? 0.5 : 1.0;
    // The first steps after a switch of ways take 10x (they settle; the governor skips them).
    const double seconds = (s ? 0.002 : 0.001) * scale * (row <= 3 ? 10 : 1);
    g.Record(0, s, 1, s ? 1.5 : 1, seconds);
  }
  // Candidates only in probes (a probe is one burst), none before the first.
  EXPECT_EQ(longest_visit, SpeculationGovernor::kSettleSteps + SpeculationGovernor::kMeasuredSteps);
  EXPECT_EQ(after_probe, speculated);
  EXPECT_FALSE(g.MaySpeculate(0));
  EXPECT_NEAR(g.at(0).without.seconds, 0.0005, 1e-9);  // plain measured again at its new rate
}

TEST(SpeculationGovernorTest, KeepsTheFasterWayAndProbes) {
  EXPECT_EQ(SpeculationGovernor::ClassOf(1), 0);
  EXPECT_EQ(SpeculationGovernor::ClassOf(3), 1);
  EXPECT_EQ(SpeculationGovernor::ClassOf(8), 3);
  EXPECT_EQ(SpeculationGovernor::ClassOf(1000), 9);
  SpeculationGovernor g;
  const int c = SpeculationGovernor::ClassOf(8);
  // A step takes 1 ms, but the first three after a switch of ways take 10 ms (they settle).
  std::vector<int64_t> probes;  // where a visit to the slower way began
  bool last = true;
  int64_t in_a_row = 0;
  auto run = [&](int steps, double with, double without) {
    int speculated = 0;
    for (int i = 0; i < steps; ++i) {
      const bool s = g.Speculate(c);
      speculated += s;
      in_a_row = s == last ? in_a_row + 1 : 1;
      if (s != last && s != (with >= without) && g.at(c).without.n >= 2) {
        probes.push_back(g.at(c).steps);
      }
      last = s;
      g.Record(c, s, 1, s ? with : without, in_a_row <= 3 ? 0.010 : 0.001);
    }
    return speculated;
  };
  // Speculation gives a third of the tokens per second: after 6 + 6 steps measuring both ways,
  // only probes of 6 steps speculate, ever more rarely.
  const int first = run(3000, 1, 3);
  EXPECT_LT(g.at(c).with.rate(), g.at(c).without.rate());
  ASSERT_GE(probes.size(), 3u);
  EXPECT_EQ(first, 6 + 6 * static_cast<int>(probes.size()));
  for (size_t i = 2; i < probes.size(); ++i) {
    EXPECT_GT(probes[i] - probes[i - 1], probes[i - 1] - probes[i - 2]);
  }
  // Speculation becomes 3x faster (acceptance rose): at the next probe the answer turns, and
  // from then on nearly every step speculates.
  const int64_t turn = g.at(c).next_probe;
  const int later = run(20000, 9, 3);
  EXPECT_GT(g.at(c).with.rate(), g.at(c).without.rate());
  EXPECT_GE(later, 20000 - (turn - 3000) - 40);
  // Speculation at 1.5x the rate is found although each switch costs 10x for three steps.
  SpeculationGovernor fair;
  int64_t row = 0;
  bool prev = true;
  int spec = 0;
  for (int i = 0; i < 2000; ++i) {
    const bool s = fair.Speculate(0);
    row = s == prev ? row + 1 : 1;
    prev = s;
    spec += s;
    fair.Record(0, s, 1, s ? 1.5 : 1.0, row <= 3 ? 0.010 : 0.001);
  }
  EXPECT_GT(fair.at(0).with.rate(), fair.at(0).without.rate());
  EXPECT_GT(spec, 1900);
  // MaySpeculate tells the next answer without counting the step.
  const bool next = g.MaySpeculate(c);
  EXPECT_EQ(g.Speculate(c), next);
  // Other classes are independent.
  EXPECT_TRUE(g.Speculate(SpeculationGovernor::ClassOf(1)));
}

}  // namespace
}  // namespace banyan::scheduler
