// Fed steps (LoopOptions::feed) on the CPU backend, where a step can be made to fail on demand:
// a step that fails while another is in flight fails every request cleanly (no event names a
// freed request, no step is left in flight) and the loop serves the next requests; steps of
// prompts alone are launched ahead too; and random arrivals (prompts continuing live sequences,
// n = 2, penalties, stop strings, small caches) give every request its solo tokens; penalised
// rows are fed.
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "gtest/gtest.h"
#include "scheduler/engine_loop.h"
#include "scheduler/generate.h"
#include "tests/scheduler/forwarding_backend.h"
#include "tests/testing/random.h"
#include "tests/testing/bundled_model.h"

namespace banyan::scheduler {
namespace {

// The CPU backend with one launch or one collect failing when asked.
class FlakyBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::string_view name() const override { return "flaky-cpu"; }
  using Backend::LaunchSample;
  absl::Status LaunchSample(const engine::StepBatch& b, std::span<const engine::SampleSpec> s,
                            std::span<const int32_t> feed) override {
    if (fail_launch) {
      fail_launch = false;
      return absl::ResourceExhaustedError("injected launch failure");
    }
    return Backend::LaunchSample(b, s, feed);
  }
  absl::Status CollectSample(std::vector<engine::SampleResult>* out) override {
    absl::Status s = Backend::CollectSample(out);
    if (fail_collect) {
      fail_collect = false;
      return absl::InternalError("injected collect failure");
    }
    return s;
  }
  bool fail_launch = false;
  bool fail_collect = false;
};

class FedStepsTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { bundle_ = &banyan::testing::BundledModel(); }

  // Paged attention on a row-invariant CPU backend: a request gets the same bits in any batch
  // and any tree layout as alone, so that runs compare with solo runs exactly (a seeded sample
  // near a tie flipped 3 runs in 120 with the step's GEMM and span-wise softmax maxima).
  std::unique_ptr<EngineLoop> Make(int chunks, int budget, int feed, FlakyBackend** flaky) {
    auto cpu = engine::CpuBackend::Create(
        &bundle_->weights,
        {.num_chunks = chunks, .chunk_size = 16, .attention = engine::AttentionMode::kPaged,
         .row_invariant = true});
    EXPECT_TRUE(cpu.ok());
    auto backend = std::make_unique<FlakyBackend>(std::move(*cpu));
    if (flaky != nullptr) *flaky = backend.get();
    return std::make_unique<EngineLoop>(
        bundle_->weights.config, bundle_->tokenizer.get(), std::move(backend),
        LoopOptions{.max_running_sequences = 8, .prefill_token_budget = budget,
                    .attention = engine::AttentionMode::kPaged, .overlap = 1, .feed = feed});
  }
  Request Greedy(const std::string& text, int max_tokens) {
    Request r;
    r.id = "r" + std::to_string(++ids_);
    r.prompt = bundle_->tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    return r;
  }
  std::vector<int32_t> Solo(const Request& r, int sample = 0) {
    auto loop = Make(512, 64, 0, nullptr);
    auto res = GenerateAll(*loop, std::span<const Request>(&r, 1));
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? (*res)[0].samples[sample].tokens : std::vector<int32_t>{};
  }
  // Tokens of a finished stream by sample (the kStop event's token left out, as GenerateAll).
  static std::vector<std::vector<int32_t>> Read(RequestStream& s, int n) {
    std::vector<std::vector<int32_t>> got(n);
    std::vector<TokenEvent> ev;
    while (s.Read(&ev, std::chrono::milliseconds(0))) {
      for (const TokenEvent& e : ev) {
        if (e.token >= 0 && e.finish != FinishReason::kStop) got[e.sample].push_back(e.token);
      }
      ev.clear();
    }
    return got;
  }

  static const model::ModelBundle* bundle_;
  int ids_ = 0;
};
const model::ModelBundle* FedStepsTest::bundle_ = nullptr;

// A long greedy request, six steps in: decoding with fed steps.
std::shared_ptr<RequestStream> StartDecoding(FedStepsTest* t, EngineLoop& loop) {
  Request a = t->Greedy("Once upon a time, there was a little dog", 60);
  a.params.ignore_eos = true;
  auto s = std::make_shared<RequestStream>();
  loop.Add(a, s, std::chrono::steady_clock::now());
  for (int i = 0; i < 6; ++i) loop.Step();
  return s;
}

// Runs `a` for a few steps, then injects the failure in the next Step and checks that every
// request failed, nothing is left in flight, live or cached (the failed steps' KV is unknown),
// and new requests get their solo tokens: one new, and `again` (a request of the failed step,
// whose prompt was placed but never computed) asked again.
void ExpectCleanFailure(FedStepsTest* t, EngineLoop& loop, std::shared_ptr<RequestStream> a,
                        const Request* again = nullptr) {
  EXPECT_TRUE(a->finished());
  EXPECT_FALSE(a->status().ok());
  EXPECT_TRUE(loop.idle());
  EXPECT_EQ(loop.tree().Stats().chunks_live, 0);
  EXPECT_EQ(loop.tree().Stats().chunks_cached, 0);
  EXPECT_TRUE(loop.tree().CheckInvariants().ok()) << loop.tree().CheckInvariants();
  std::vector<Request> next = {t->Greedy("Lily went to the park", 12)};
  if (again != nullptr) {
    next.push_back(*again);
    next.back().id += "-again";
  }
  for (const Request& r : next) {
    auto s = std::make_shared<RequestStream>();
    loop.Add(r, s, std::chrono::steady_clock::now());
    while (!loop.idle()) loop.Step();
    ASSERT_TRUE(s->status().ok()) << s->status();
    EXPECT_EQ(FedStepsTest::Read(*s, 1)[0], t->Solo(r)) << r.id;
  }
}

// A prompt that continues a decoding sequence's whole path makes that sequence's next token a
// pending fork (no fallback); then the fed launch fails, and releasing the failed sequences
// drops the fork that was never set.
TEST_F(FedStepsTest, LaunchFailureWithAPendingForkFailsEveryRequest) {
  FlakyBackend* flaky = nullptr;
  auto loop = Make(512, 64, 1, &flaky);
  auto sa = StartDecoding(this, *loop);
  ASSERT_GT(loop->stats().fed_steps, 0);
  Request e = Greedy("", 5);
  e.prompt = loop->tree().Tokens(loop->tree().DfsOrder().at(0));
  e.prompt.push_back(9);
  auto se = std::make_shared<RequestStream>();
  loop->Add(e, se, std::chrono::steady_clock::now());
  flaky->fail_launch = true;
  loop->Step();
  EXPECT_EQ(loop->stats().fed_fallbacks, 0);
  while (!loop->idle()) loop->Step();
  EXPECT_FALSE(se->status().ok());
  ExpectCleanFailure(this, *loop, sa, &e);
}

// Step N's collect fails while the fed step N + 1 is in flight.
TEST_F(FedStepsTest, CollectFailureWithAStepAheadFailsEveryRequest) {
  FlakyBackend* flaky = nullptr;
  auto loop = Make(512, 64, 1, &flaky);
  auto sa = StartDecoding(this, *loop);
  const int64_t fed = loop->stats().fed_steps;
  ASSERT_GT(fed, 0);
  flaky->fail_collect = true;
  loop->Step();
  EXPECT_EQ(loop->stats().fed_steps, fed + 1) << "the failing collect came after a fed launch";
  while (!loop->idle()) loop->Step();
  ExpectCleanFailure(this, *loop, sa);
}

// KV events through the loop (kvcache/kv_events.h): flushed at the end of every Step, with fed
// steps' pending tokens in the tree, they keep a subscriber's set equal to the tree's full
// blocks; a failed step that drops the cache ends with AllBlocksCleared.
class SetSink : public kvcache::KvEventSink {
 public:
  void Publish(std::vector<kvcache::KvEvent> events) override {
    for (const kvcache::KvEvent& e : events) {
      if (e.kind == kvcache::KvEvent::Kind::kStored) held.insert(e.hash);
      if (e.kind == kvcache::KvEvent::Kind::kRemoved) held.erase(e.hash);
      if (e.kind == kvcache::KvEvent::Kind::kAllCleared) {
        held.clear();
        ++cleared;
      }
    }
  }
  std::set<uint64_t> held;
  int cleared = 0;
};

std::set<uint64_t> TreeBlocks(const EngineLoop& loop) {
  std::set<uint64_t> out;
  for (const kvcache::FullBlock& b : loop.tree().FullBlocks()) out.insert(b.hash);
  return out;
}

TEST_F(FedStepsTest, KvEventsFollowEveryStepAndAFailedStepClearsThem) {
  FlakyBackend* flaky = nullptr;
  auto loop = Make(512, 64, 1, &flaky);
  SetSink sink;
  loop->set_kv_event_sink(&sink);
  Request a = Greedy("Once upon a time, there was a little dog", 60);
  a.params.ignore_eos = true;
  Request b = Greedy("Once upon a time, there was a little cat", 40);
  b.n = 2;
  b.params.temperature = 1.0f;
  auto sa = std::make_shared<RequestStream>();
  auto sb = std::make_shared<RequestStream>();
  loop->Add(a, sa, std::chrono::steady_clock::now());
  loop->Add(b, sb, std::chrono::steady_clock::now());
  for (int i = 0; i < 30; ++i) {
    loop->Step();
    ASSERT_EQ(sink.held, TreeBlocks(*loop)) << "after step " << i;
  }
  ASSERT_GT(loop->stats().fed_steps, 0);
  ASSERT_FALSE(sink.held.empty());
  flaky->fail_collect = true;
  while (!loop->idle()) loop->Step();
  EXPECT_EQ(sink.cleared, 1);
  EXPECT_TRUE(sink.held.empty());
  EXPECT_TRUE(TreeBlocks(*loop).empty());
  loop->set_kv_event_sink(nullptr);
}

// A long prompt prefilled in chunks: its chunk steps are launched ahead too (none of them has a
// decode row to feed, and none is a fallback).
TEST_F(FedStepsTest, PromptChunksAreLaunchedAhead) {
  auto loop = Make(512, 16, 1, nullptr);
  std::string text;
  for (int i = 0; i < 6; ++i) text += "Once upon a time, there was a little dog named Max. ";
  Request a = Greedy(text, 3);
  ASSERT_GT(a.prompt.size(), 64u);
  auto sa = std::make_shared<RequestStream>();
  loop->Add(a, sa, std::chrono::steady_clock::now());
  while (!loop->idle()) loop->Step();
  ASSERT_TRUE(sa->status().ok()) << sa->status();
  EXPECT_EQ(loop->stats().fed_fallbacks, 0);
  EXPECT_GE(loop->stats().fed_steps, static_cast<int64_t>(a.prompt.size() / 16) - 1);
  EXPECT_EQ(Read(*sa, 1)[0], Solo(a));
}

// A prompt asked again (its first answer cached below its leaf) and samples that agree (n = 3
// at a temperature low enough that they draw the greedy tokens, so they share their leaf at
// every step) were steps the loop waited on. Now their tokens take pending forks (the n = 3
// samples are made before the prompt's first token is collected): every step but the prompt's
// is fed. The tokens are the solo ones, and the tree holds them all.
TEST_F(FedStepsTest, RepeatedPromptsAndAgreeingSamplesAreFed) {
  auto loop = Make(512, 64, 1, nullptr);
  Request a = Greedy("Once upon a time, there was a little dog named Max.", 24);
  a.params.ignore_eos = true;
  const std::vector<int32_t> solo = Solo(a);
  ASSERT_EQ(solo.size(), 24u);
  auto run = [&](const Request& r) {
    auto s = std::make_shared<RequestStream>();
    const LoopStats before = loop->stats();
    loop->Add(r, s, std::chrono::steady_clock::now());
    while (!loop->idle()) loop->Step();
    EXPECT_TRUE(s->status().ok()) << s->status();
    EXPECT_EQ(loop->stats().fed_fallbacks, before.fed_fallbacks);
    const int64_t steps = loop->stats().steps - before.steps;
    const int64_t fed = loop->stats().fed_steps - before.fed_steps;
    std::printf("[ fed ] %s: %lld of %lld steps fed\n", r.id.c_str(),
                static_cast<long long>(fed), static_cast<long long>(steps));
    return std::make_tuple(Read(*s, r.n), steps, fed);
  };
  auto [first, steps1, fed1] = run(a);
  EXPECT_EQ(first[0], solo);
  EXPECT_EQ(fed1, steps1 - 1);

  Request again = a;
  again.id = "again";
  auto [second, steps2, fed2] = run(again);
  EXPECT_EQ(second[0], solo);
  EXPECT_EQ(fed2, steps2 - 1) << "the cached answer below the prompt held no step back";

  Request three = a;
  three.id = "three";
  three.n = 3;
  three.params.temperature = 0.01f;  // not greedy (three samples run), yet they agree
  three.params.seed = 5;
  three.params.has_seed = true;
  const int64_t rows_before = loop->stats().decode_tokens;
  auto [samples, steps3, fed3] = run(three);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(samples[k], solo) << "sample " << k;
  EXPECT_EQ(fed3, steps3 - 1) << "n > 1 and agreeing samples held no step back";
  EXPECT_EQ(loop->stats().decode_tokens - rows_before, 3 * 23) << "three samples decoded";

  EXPECT_EQ(loop->tree().Stats().chunks_live, 0);
  EXPECT_TRUE(loop->tree().CheckInvariants().ok()) << loop->tree().CheckInvariants();
  std::vector<int32_t> all = a.prompt;
  all.insert(all.end(), solo.begin(), solo.end() - 1);  // the last token's KV is never written
  EXPECT_EQ(loop->tree().Match(a.cache_namespace, all), static_cast<int32_t>(all.size()));
}

// Greedy n > 1: every sample would draw the same tokens, so one sequence runs (one decode row a
// step) and each choice gets its events: the solo tokens, text, logprobs and a finish event per
// choice, and usage counts the tokens of all choices. A stop string ends every choice alike.
TEST_F(FedStepsTest, GreedySamplesRunOnceForEveryChoice) {
  auto loop = Make(512, 64, 1, nullptr);
  Request a = Greedy("Once upon a time, there was a little dog named Max.", 24);
  a.params.ignore_eos = true;
  a.params.logprobs = 2;
  const std::vector<int32_t> solo = Solo(a);
  ASSERT_EQ(solo.size(), 24u);
  Request four = a;
  four.n = 4;
  auto s = std::make_shared<RequestStream>();
  loop->Add(four, s, std::chrono::steady_clock::now());
  while (!loop->idle()) loop->Step();
  ASSERT_TRUE(s->status().ok()) << s->status();
  EXPECT_EQ(loop->stats().decode_tokens, 23) << "one sequence decoded";
  std::vector<std::vector<TokenEvent>> by_choice(4);
  std::vector<TokenEvent> ev;
  while (s->Read(&ev, std::chrono::milliseconds(0))) {
    for (TokenEvent& e : ev) {
      ASSERT_GE(e.sample, 0);
      ASSERT_LT(e.sample, 4);
      by_choice[e.sample].push_back(std::move(e));
    }
    ev.clear();
  }
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> tokens;
    int finishes = 0;
    for (const TokenEvent& e : by_choice[k]) {
      if (e.token >= 0) tokens.push_back(e.token);
      if (e.finish != FinishReason::kNone) ++finishes;
      EXPECT_EQ(e.top_logprobs.size(), e.token >= 0 ? 2u : 0u);
    }
    EXPECT_EQ(tokens, solo) << "choice " << k;
    EXPECT_EQ(finishes, 1) << "choice " << k;
    ASSERT_EQ(by_choice[k].size(), by_choice[0].size());
    for (size_t j = 0; j < by_choice[k].size(); ++j) {
      EXPECT_EQ(by_choice[k][j].text, by_choice[0][j].text);
      EXPECT_EQ(by_choice[k][j].logprob, by_choice[0][j].logprob);
    }
  }
  EXPECT_EQ(s->usage().completion_tokens, 4 * 24);
  EXPECT_EQ(loop->metrics().generation_tokens_total, 4 * 24);

  Request stop = Greedy("Once upon a time", 40);  // "... named " then the stop string
  stop.stop = {"Lily"};
  stop.n = 3;
  auto st = std::make_shared<RequestStream>();
  loop->Add(stop, st, std::chrono::steady_clock::now());
  while (!loop->idle()) loop->Step();
  std::vector<std::string> text(3);
  std::vector<FinishReason> finish(3, FinishReason::kNone);
  while (st->Read(&ev, std::chrono::milliseconds(0))) {
    for (const TokenEvent& e : ev) {
      text[e.sample] += e.text;
      if (e.finish != FinishReason::kNone) finish[e.sample] = e.finish;
    }
    ev.clear();
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(text[k], text[0]) << "choice " << k;
    EXPECT_EQ(finish[k], FinishReason::kStop) << "choice " << k;
  }
  EXPECT_EQ(text[0].find("Lily"), std::string::npos);
  EXPECT_EQ(loop->tree().Stats().chunks_live, 0);
}

// Requests with penalties are fed like any other: a fed row's penalties count its token in
// flight (Backend::LaunchSample's feed). Repetition (with the prompt's tokens), frequency and
// presence penalties, greedy and seeded, all at once and one arriving while the others decode
// (its first token feeds its first decode row): most steps are fed, and every request gets its
// solo tokens.
TEST_F(FedStepsTest, PenalisedRowsAreFedAndEqualSoloRuns) {
  auto loop = Make(512, 64, 1, nullptr);
  const char* texts[] = {"Once upon a time, there was a little dog named Max.",
                         "Lily went to the park", "The sun was hot and", "Once upon a time"};
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = Greedy(texts[i % 4], 30 + 4 * i);
    r.params.ignore_eos = true;
    r.params.repetition_penalty = i % 3 == 0 ? 1.3f : 1.0f;
    r.params.frequency_penalty = i % 3 == 1 ? 0.8f : 0.0f;
    r.params.presence_penalty = i % 2 == 0 ? 0.6f : 0.0f;
    if (i >= 3) {
      r.params.temperature = 0.8f;
      r.params.seed = 7 + i;
      r.params.has_seed = true;
    }
    reqs.push_back(r);
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == reqs.size() - 1) {  // the last arrives while the others decode
      for (int k = 0; k < 5; ++k) loop->Step();
    }
    streams.push_back(std::make_shared<RequestStream>());
    loop->Add(reqs[i], streams.back(), std::chrono::steady_clock::now());
  }
  while (!loop->idle()) loop->Step();
  EXPECT_GT(loop->stats().fed_steps, loop->stats().steps / 2)
      << loop->stats().fed_steps << " of " << loop->stats().steps << " steps fed";
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(streams[i]->status().ok()) << streams[i]->status();
    EXPECT_EQ(Read(*streams[i], 1)[0], Solo(reqs[i])) << "request " << i;
  }
}

// Random arrivals on caches from roomy to tight: prompts that continue a live sequence's path
// (or stop one token short of it), greedy and seeded sampling, n = 2, penalties, stop strings.
TEST_F(FedStepsTest, RandomArrivalsEqualSoloRuns) {
  BANYAN_SEEDED_RNG(seeds);
  const char* bases[] = {"Once upon a time, there was a little dog named Max.",
                         "Lily went to the park", "The sun was hot and", "Once upon a time"};
  int64_t fed = 0, fallbacks = 0, steps = 0;
  for (int round = 0; round < 12; ++round) {
    std::mt19937_64 rng(seeds());
    const int chunks = round % 3 == 0 ? 512 : round % 3 == 1 ? 24 : 14;
    auto loop = Make(chunks, 24, 1, nullptr);
    std::vector<Request> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int step = 0; reqs.size() < 10 || !loop->idle(); ++step) {
      ASSERT_LT(step, 20000);
      if (reqs.size() < 10 && rng() % 3 == 0) {
        Request r = Greedy(bases[rng() % 4], 1 + static_cast<int>(rng() % 25));
        const std::vector<kvcache::SeqId> live = loop->tree().DfsOrder();
        if (!live.empty() && rng() % 3 == 0) {
          r.prompt = loop->tree().Tokens(live[rng() % live.size()]);
          if (rng() % 2) {
            r.prompt.push_back(5 + static_cast<int32_t>(rng() % 50));
          } else if (r.prompt.size() > 3) {
            r.prompt.pop_back();
          }
        }
        if (rng() % 2) {
          r.params.temperature = 0.9f;
          r.params.seed = rng();
          r.params.has_seed = true;
        }
        r.params.ignore_eos = rng() % 2;
        if (rng() % 4 == 0) r.n = 2;
        if (rng() % 6 == 0) r.stop = {"the"};
        if (rng() % 8 == 0) r.params.frequency_penalty = 0.5f;
        if (loop->Check(r).ok()) {
          reqs.push_back(r);
          streams.push_back(std::make_shared<RequestStream>());
          loop->Add(r, streams.back(), std::chrono::steady_clock::now());
        }
      }
      loop->Step();
    }
    ASSERT_TRUE(loop->tree().CheckInvariants().ok()) << loop->tree().CheckInvariants();
    ASSERT_EQ(loop->tree().Stats().chunks_live, 0);
    fed += loop->stats().fed_steps;
    fallbacks += loop->stats().fed_fallbacks;
    steps += loop->stats().steps;
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(streams[i]->status().ok()) << streams[i]->status();
      const auto got = Read(*streams[i], reqs[i].n);
      for (int k = 0; k < reqs[i].n; ++k) {
        EXPECT_EQ(got[k], Solo(reqs[i], k)) << "round " << round << " request " << i << " sample "
                                            << k;
      }
    }
  }
  std::printf("[ fed ] %lld of %lld steps fed, %lld fallbacks\n", static_cast<long long>(fed),
              static_cast<long long>(steps), static_cast<long long>(fallbacks));
  EXPECT_GT(fed, steps / 3);
}

}  // namespace
}  // namespace banyan::scheduler
