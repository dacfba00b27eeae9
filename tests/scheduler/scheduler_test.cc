// The scheduler on the real bundled model: batch invariance with shared prefixes, preemption by
// recompute, cancellation, queue limits, deadlines, draining, and a soak with no leaked chunks.
#include "scheduler/scheduler.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "scheduler/generate.h"
#include "gtest/gtest.h"
#include "kvcache/chunk_pool.h"
#include "tests/testing/generated_cached.h"
#include "tests/testing/random.h"
#include "tests/testing/bundled_model.h"

namespace banyan::scheduler {
namespace {

using namespace std::chrono_literals;

struct Result {
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;  // of each token
  std::vector<FinishReason> finish;
  absl::Status status;
  Usage usage;
};

Result Collect(RequestStream& s, int n, std::function<void(int)> on_event = nullptr) {
  Result r;
  r.text.resize(n);
  r.tokens.resize(n);
  r.logprobs.resize(n);
  r.finish.resize(n, FinishReason::kNone);
  std::vector<TokenEvent> ev;
  int events = 0;
  while (s.Read(&ev, 100ms)) {
    for (TokenEvent& e : ev) {
      r.text[e.sample] += e.text;
      if (e.token >= 0) {
        r.tokens[e.sample].push_back(e.token);
        r.logprobs[e.sample].push_back(e.logprob);
      }
      if (e.finish != FinishReason::kNone) r.finish[e.sample] = e.finish;
      if (on_event) on_event(++events);
    }
    ev.clear();
  }
  r.status = s.status();
  r.usage = s.usage();
  return r;
}

class SchedulerTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { bundle_ = &banyan::testing::BundledModel(); }

  void Make(int chunks, int chunk_size = 16, SchedulerOptions opts = {}) {
    sched_ = std::make_unique<Scheduler>(
        bundle_->weights.config, bundle_->tokenizer.get(),
        *engine::CpuBackend::Create(&bundle_->weights,
                                    {.num_chunks = chunks, .chunk_size = chunk_size}),
        opts);
  }
  void TearDown() override {
    if (sched_) {
      sched_->Stop();
      const kvcache::PrefixTree& tree = sched_->loop().tree();
      EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
      EXPECT_EQ(tree.Stats().live_sequences, 0);
      EXPECT_EQ(tree.Stats().chunks_live, 0);
    }
    sched_.reset();
  }
  Request Greedy(const std::string& text, int max_tokens = 40) {
    Request r;
    r.id = absl::StrCat("t", ++ids_);  // not '+': GCC 12's -Wrestrict misfires on it
    r.prompt = bundle_->tokenizer->Encode(text, true);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    return r;
  }
  Result Solo(const Request& r) {
    auto saved = std::move(sched_);
    Make(512);
    sched_->Start();
    auto s = sched_->Submit(r);
    EXPECT_TRUE(s.ok());
    Result res = Collect(**s, r.n);
    sched_.reset();
    sched_ = std::move(saved);
    return res;
  }

  static const model::ModelBundle* bundle_;
  std::unique_ptr<Scheduler> sched_;
  int ids_ = 0;
};
const model::ModelBundle* SchedulerTest::bundle_ = nullptr;

// The engine loop frees a finished or cancelled request's chunks on its own thread after the
// stream has ended, so a client can read its last event before the metrics say so. Waits for
// `done` (generous deadline: a loaded CI machine) and returns the metrics that satisfied it, or
// the last ones seen.
MetricsSnapshot WaitForMetrics(const Scheduler& sched,
                               const std::function<bool(const MetricsSnapshot&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  MetricsSnapshot m = sched.Metrics();
  while (!done(m) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    m = sched.Metrics();
  }
  return m;
}

const std::string kSystem =
    "Once upon a time, there was a little dog named Max. Max liked to run in the big green park "
    "with his friend, a small bird. The bird could sing very well and Max loved to listen.";

TEST_F(SchedulerTest, ConcurrentSharedPrefixRequestsEqualSoloRuns) {
  Make(512, 16, {.loop = {.prefill_token_budget = 64}});
  sched_->Start();
  const char* tails[] = {" One day",     " The bird", " Max was", " Then",
                         " In the park", " Suddenly", " The sun", " Lily"};
  std::vector<Request> reqs;
  for (const char* t : tails) reqs.push_back(Greedy(kSystem + t));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) streams.push_back(*sched_->Submit(r));
  std::vector<Result> got;
  for (auto& s : streams) got.push_back(Collect(*s, 1));
  // The engine loop's own high-water mark, not a sampling thread that a busy machine can starve.
  const int64_t max_saved = sched_->Metrics().kv_chunks_saved_by_sharing_peak;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result solo = Solo(reqs[i]);
    EXPECT_EQ(got[i].tokens, solo.tokens) << "request " << i;
    EXPECT_EQ(got[i].text, solo.text);
    EXPECT_TRUE(got[i].status.ok());
    EXPECT_FALSE(got[i].text[0].empty());
  }
  // The system prompt (> 40 tokens: >= 2 full chunks of 16) was stored once, not 8 times.
  EXPECT_GE(max_saved, 7 * 2);
  EXPECT_GT(sched_->Metrics().prefix_cache_hit_tokens_total, 0);
}

TEST_F(SchedulerTest, PreemptionByRecomputeKeepsOutputs) {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = Greedy("The little cat number " + std::to_string(i) + " went", 120);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<Result> solo;
  for (const Request& r : reqs) solo.push_back(Solo(r));
  Make(/*chunks=*/24, 16);  // far less than 6 x 8 chunks: forces preemption
  sched_->Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) streams.push_back(*sched_->Submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result got = Collect(*streams[i], 1);
    EXPECT_TRUE(got.status.ok()) << got.status;
    size_t diverge = 0;
    while (diverge < got.tokens[0].size() && diverge < solo[i].tokens[0].size() &&
           got.tokens[0][diverge] == solo[i].tokens[0][diverge]) {
      ++diverge;
    }
    EXPECT_EQ(got.tokens, solo[i].tokens) << "request " << i << " diverges at " << diverge;
    EXPECT_EQ(got.finish[0], FinishReason::kLength);
  }
  EXPECT_GT(sched_->Metrics().preemptions_total, 0);
}

TEST_F(SchedulerTest, CancelMidStreamFreesChunks) {
  Make(256);
  sched_->Start();
  Request r = Greedy(kSystem, 400);
  r.params.ignore_eos = true;
  r.n = 3;
  r.params.temperature = 0.8f;
  auto s = *sched_->Submit(r);
  Result res = Collect(*s, 3, [&](int events) {
    if (events == 10) s->Cancel();
  });
  for (FinishReason f : res.finish) EXPECT_EQ(f, FinishReason::kCancelled);
  EXPECT_LT(res.usage.completion_tokens, 3 * 400);
  const MetricsSnapshot m = WaitForMetrics(*sched_, [](const MetricsSnapshot& s) {
    return s.kv_chunks_live == 0 && s.requests_cancelled_total >= 1;
  });
  EXPECT_EQ(m.kv_chunks_live, 0);
  EXPECT_EQ(m.requests_cancelled_total, 1);
}

TEST_F(SchedulerTest, FullQueueRefusesAtOnce) {
  Make(256, 16, {.queue_limit = 2});
  auto a = sched_->Submit(Greedy("a", 5));
  auto b = sched_->Submit(Greedy("b", 5));
  auto c = sched_->Submit(Greedy("c", 5));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  sched_->Start();
  EXPECT_TRUE(Collect(**a, 1).status.ok());
  EXPECT_TRUE(Collect(**b, 1).status.ok());
  EXPECT_EQ(sched_->Metrics().requests_rejected_total, 1);
}

TEST_F(SchedulerTest, RejectsBadRequestsWithReasons) {
  Make(64);
  Request r = Greedy("hello", 10);
  r.params.max_tokens = 600;
  auto s = sched_->Submit(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("600"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("512"), std::string::npos) << s.status();
  r = Greedy("", 10);
  r.prompt.clear();
  EXPECT_EQ(sched_->Submit(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Greedy("x", 10);
  r.params.top_p = 2;
  EXPECT_NE(sched_->Submit(r).status().message().find("top_p"), std::string::npos);
  r = Greedy("x", 400);
  r.n = 8;  // 8 x 400 tokens cannot fit in 64 chunks of 16: never, so not "retry later"
  r.params.temperature = 0.8f;
  auto big = sched_->Submit(r);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("more than the whole cache"), std::string::npos);
  r.params.temperature = 0;  // greedy: one sequence runs for the 8 choices, and it fits
  auto greedy = sched_->Submit(r);
  EXPECT_TRUE(greedy.ok()) << greedy.status();
  if (greedy.ok()) (*greedy)->Cancel();
}

TEST_F(SchedulerTest, DeadlineCancels) {
  Make(256);
  sched_->Start();
  Request r = Greedy(kSystem, 400);
  r.params.ignore_eos = true;
  r.deadline = std::chrono::steady_clock::now() + 20ms;
  Result res = Collect(**sched_->Submit(r), 1);
  EXPECT_EQ(res.finish[0], FinishReason::kCancelled);
}

TEST_F(SchedulerTest, StopStringsSeedsAndSamples) {
  Make(256);
  sched_->Start();
  Request r = Greedy("", 60);
  r.stop = {"Lily"};
  Result res = Collect(**sched_->Submit(r), 1);
  EXPECT_EQ(res.text[0], "Once upon a time, there was a little girl named ");
  EXPECT_EQ(res.finish[0], FinishReason::kStop);

  Request s = Greedy("Once upon a time", 30);
  s.params.temperature = 1.0f;
  s.params.seed = 1234;
  s.params.has_seed = true;
  s.n = 4;
  Result x = Collect(**sched_->Submit(s), 4);
  Result y = Collect(**sched_->Submit(s), 4);
  EXPECT_EQ(x.tokens, y.tokens);  // seeded: reproducible
  EXPECT_NE(x.tokens[0], x.tokens[1]);
  EXPECT_EQ(y.usage.cached_prompt_tokens, static_cast<int32_t>(s.prompt.size()));
}

// logit_bias through the whole loop on the bundled model: -100 keeps the greedy choice's token
// out of the text, +100 forces a token, greedy and sampled alike; the raw log-probabilities are
// reported, not the biased ones.
TEST_F(SchedulerTest, LogitBiasSteersGeneration) {
  Make(256);
  sched_->Start();
  Request plain = Greedy("Once upon a time", 12);
  const Result base = Collect(**sched_->Submit(plain), 1);
  ASSERT_EQ(base.tokens[0].size(), 12u);
  const int32_t first = base.tokens[0][0];

  Request banned = plain;
  banned.params.logit_bias = {{first, -100.0f}};
  const Result b = Collect(**sched_->Submit(banned), 1);
  ASSERT_FALSE(b.tokens[0].empty());
  EXPECT_EQ(std::count(b.tokens[0].begin(), b.tokens[0].end(), first), 0) << b.text[0];

  const int32_t forced = bundle_->tokenizer->Encode(" big", false).front();
  ASSERT_NE(forced, first);
  Request push = plain;
  push.params.max_tokens = 6;
  push.params.logit_bias = {{forced, 100.0f}};
  push.params.logprobs = 1;
  const Result f = Collect(**sched_->Submit(push), 1);
  EXPECT_EQ(f.tokens[0], std::vector<int32_t>(6, forced)) << f.text[0];
  // The model's own log-probability of " big" right after the prompt (the biased one would be
  // about 0).
  ASSERT_FALSE(f.logprobs[0].empty());
  EXPECT_LT(f.logprobs[0][0], -1.0f);
  Request sampled = push;
  sampled.params.temperature = 1.0f;
  sampled.params.logprobs = 0;
  sampled.n = 3;
  const Result s = Collect(**sched_->Submit(sampled), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.tokens[i], std::vector<int32_t>(6, forced)) << i;
}

// vLLM's min_tokens on the bundled model: the end-of-sequence token, stop_token_ids and stop
// strings do not end a sample before min_tokens tokens.
TEST_F(SchedulerTest, MinTokensHoldsBackEveryStop) {
  Make(256);
  sched_->Start();
  // The end-of-sequence token, pushed by a +100 bias: at once without min_tokens; with it, held
  // back (the ban wins over the bias) until min_tokens, then at once.
  const int32_t eos = bundle_->weights.config.eos_id;
  Request to_eos = Greedy("Once upon a time", 12);
  to_eos.params.logit_bias = {{eos, 100.0f}};
  const Result at_once = Collect(**sched_->Submit(to_eos), 1);
  EXPECT_EQ(at_once.tokens[0], std::vector<int32_t>{eos});
  EXPECT_EQ(at_once.finish[0], FinishReason::kStop);
  to_eos.params.min_tokens = 5;
  const Result after = Collect(**sched_->Submit(to_eos), 1);
  ASSERT_EQ(after.tokens[0].size(), 6u);
  EXPECT_EQ(std::count(after.tokens[0].begin(), after.tokens[0].end(), eos), 1);
  EXPECT_EQ(after.tokens[0].back(), eos);
  EXPECT_EQ(after.finish[0], FinishReason::kStop);
  to_eos.params.ignore_eos = true;  // then the end-of-sequence id is not held back
  EXPECT_EQ(Collect(**sched_->Submit(to_eos), 1).tokens[0].front(), eos);

  Request greedy = Greedy("Once upon a time", 12);
  const Result base = Collect(**sched_->Submit(greedy), 1);
  Request ids = greedy;
  const int32_t second = base.tokens[0][1];
  ids.params.stop_token_ids = {second};
  const Result early = Collect(**sched_->Submit(ids), 1);
  EXPECT_EQ(early.tokens[0].size(), 2u);
  ids.params.min_tokens = 4;
  const Result held = Collect(**sched_->Submit(ids), 1);
  ASSERT_GE(held.tokens[0].size(), 4u);
  EXPECT_EQ(std::count(held.tokens[0].begin(), held.tokens[0].begin() + 4, second), 0);
  if (held.finish[0] == FinishReason::kStop) {
    EXPECT_EQ(held.tokens[0].back(), second);
  }

  Request text = greedy;
  text.stop = {base.text[0].substr(0, 1)};  // the first character of the plain text
  const Result cut = Collect(**sched_->Submit(text), 1);
  EXPECT_EQ(cut.text[0], "");
  text.params.min_tokens = 3;
  const Result kept = Collect(**sched_->Submit(text), 1);
  EXPECT_GE(kept.tokens[0].size(), 3u);
  EXPECT_EQ(kept.text[0].substr(0, 1), text.stop[0]) << kept.text[0];
}

TEST_F(SchedulerTest, DrainFinishesThenRefuses) {
  Make(256);
  sched_->Start();
  auto a = *sched_->Submit(Greedy(kSystem, 30));
  sched_->Drain(10s);
  Result res = Collect(*a, 1);
  EXPECT_TRUE(res.finish[0] == FinishReason::kLength || res.finish[0] == FinishReason::kStop);
  EXPECT_EQ(sched_->Submit(Greedy("x")).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, DrainTimeoutCutsLongRequests) {
  Make(256);
  sched_->Start();
  // Four samples to the end of the context, EOS ignored: well over the 5 ms drain timeout even
  // on a fast idle machine (one 400-token sample once finished in time there, under ASan).
  Request r = Greedy(kSystem);
  r.params.max_tokens = bundle_->weights.config.max_seq_len - static_cast<int32_t>(r.prompt.size());
  r.params.ignore_eos = true;
  r.params.temperature = 1.0f;
  r.n = 4;
  auto a = *sched_->Submit(r);
  sched_->Drain(5ms);
  const Result res = Collect(*a, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(res.finish[i], FinishReason::kCancelled) << "sample " << i;
}

// A few hundred mixed requests from several threads: shared prefixes, n > 1, stops, cancels,
// bad requests. Nothing crashes and nothing leaks (checked in TearDown).
// Concurrent clients with random lengths, n, sampling, stop strings, invalid requests and
// cancellations on a small cache; `overlap`: the CPU a step ahead (engine_loop.h), which the CPU
// backend runs as well (its launch computes the step, so nothing overlaps, but every path of the
// pipelined loop is taken).
// `feed`: fed steps (LoopOptions::feed), on the CPU backend too (its launch computes the step
// with the fed tokens taken from the step before).
void RunSoak(SchedulerTest* test, int overlap, int feed = 0);

TEST_F(SchedulerTest, Soak) { RunSoak(this, 0); }
TEST_F(SchedulerTest, SoakWithOverlap) { RunSoak(this, 1); }
TEST_F(SchedulerTest, SoakWithFedSteps) { RunSoak(this, 1, 1); }

// Overlap on and off, and fed steps, give the same tokens, text, finish reasons and usage:
// greedy and seeded sampling, n > 1, stop strings, max_tokens and EOS, penalties (rows that
// cannot be fed), shared prefixes, and preemption by recompute on a cache too small for the
// batch. With fed steps every generated token ends up in the tree as it would without (the
// pending ones were all set).
TEST_F(SchedulerTest, OverlapGivesTheSameOutputsAsLockstep) {
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    Request r = Greedy(i % 2 ? kSystem : "Once upon a time", 20 + 9 * i);
    r.prompt.push_back(5 + 17 * i);
    if (i % 3 == 1) {
      r.params.temperature = 0.9f;
      r.params.seed = 100 + i;
      r.params.has_seed = true;
      r.n = 3;
    }
    if (i % 4 == 2) r.stop = {"the", "Max"};
    if (i == 7) r.params.ignore_eos = true;
    if (i == 4) r.params.frequency_penalty = 0.5f;
    reqs.push_back(r);
  }
  // Modes: lockstep, the CPU a step ahead, and fed steps.
  const struct Mode {
    int overlap, feed;
  } modes[] = {{0, 0}, {1, 0}, {1, 1}};
  std::vector<GenerationResult> out[3];
  for (int m = 0; m < 3; ++m) {
    for (int chunks : {512, 40}) {  // 40 chunks of 16: preemption
      auto backend = engine::CpuBackend::Create(&bundle_->weights,
                                                {.num_chunks = chunks, .chunk_size = 16});
      ASSERT_TRUE(backend.ok());
      EngineLoop loop(bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend),
                      {.max_running_sequences = 16, .prefill_token_budget = 64,
                       .overlap = modes[m].overlap, .feed = modes[m].feed});
      EXPECT_EQ(loop.overlap(), modes[m].overlap == 1);
      auto res = GenerateAll(loop, reqs);
      ASSERT_TRUE(res.ok()) << res.status();
      EXPECT_EQ(loop.tree().Stats().chunks_live, 0);
      EXPECT_TRUE(loop.tree().CheckInvariants().ok());
      if (chunks == 40) {
        EXPECT_GT(loop.metrics().preemptions_total, 0) << "mode " << m;
      }
      if (modes[m].feed == 1) {
        EXPECT_GT(loop.stats().fed_steps, loop.stats().decode_steps / 4)
            << "chunks " << chunks << ": most decode steps should be fed";
        // The metric counts the decode-only ones; fed steps may also place prompts.
        EXPECT_GT(loop.metrics().decode_fed_steps_total, 0);
        EXPECT_LE(loop.metrics().decode_fed_steps_total, loop.stats().fed_steps);
        std::printf("[ fed ] chunks %d: %lld of %lld steps fed (%lld decode-only), %lld fallbacks\n",
                    chunks, static_cast<long long>(loop.stats().fed_steps),
                    static_cast<long long>(loop.stats().steps),
                    static_cast<long long>(loop.metrics().decode_fed_steps_total),
                    static_cast<long long>(loop.stats().fed_fallbacks));
      } else {
        EXPECT_EQ(loop.stats().fed_steps, 0);
      }
      if (chunks == 512) {  // nothing evicted
        testing::ExpectGeneratedCached(loop, reqs, *res, absl::StrCat("mode ", m));
      }
      out[m].insert(out[m].end(), res->begin(), res->end());
    }
  }
  int stopped_by_string = 0;
  for (int m = 1; m < 3; ++m) {
    ASSERT_EQ(out[0].size(), out[m].size());
    for (size_t i = 0; i < out[0].size(); ++i) {
      ASSERT_EQ(out[0][i].samples.size(), out[m][i].samples.size());
      for (size_t k = 0; k < out[0][i].samples.size(); ++k) {
        const SampleOutput& a = out[0][i].samples[k];
        const SampleOutput& b = out[m][i].samples[k];
        EXPECT_EQ(a.tokens, b.tokens) << "mode " << m << " request " << i << " sample " << k;
        EXPECT_EQ(a.text, b.text) << "mode " << m << " request " << i << " sample " << k;
        EXPECT_EQ(a.finish, b.finish) << "mode " << m << " request " << i << " sample " << k;
        const auto& stop = reqs[i % reqs.size()].stop;
        if (m == 1 && !stop.empty() && a.finish == FinishReason::kStop &&
            a.tokens.size() < static_cast<size_t>(reqs[i % reqs.size()].params.max_tokens)) {
          ++stopped_by_string;
        }
      }
      EXPECT_EQ(out[0][i].usage.completion_tokens, out[m][i].usage.completion_tokens) << i;
      EXPECT_EQ(out[0][i].usage.prompt_tokens, out[m][i].usage.prompt_tokens) << i;
    }
  }
  EXPECT_GT(stopped_by_string, 0);
}

// Fed steps with requests arriving while others decode: prompts are placed in fed steps, a
// prompt's first token feeds its first decode row, and a prompt that continues a decoding
// sequence's whole path (its leaf becomes a parent) does not hold the step back: that
// sequence's next token takes a pending fork. Every request gets the tokens it gets alone (the
// CPU backend, row-invariant with paged attention, gives a row the same bits in any batch and
// any tree layout).
TEST_F(SchedulerTest, FedStepsWithArrivalsEqualSoloRuns) {
  auto make = [&](int overlap, int feed) {
    auto backend = engine::CpuBackend::Create(
        &bundle_->weights, {.num_chunks = 512, .chunk_size = 16,
                            .attention = engine::AttentionMode::kPaged, .row_invariant = true});
    EXPECT_TRUE(backend.ok());
    return std::make_unique<EngineLoop>(
        bundle_->weights.config, bundle_->tokenizer.get(), std::move(*backend),
        LoopOptions{.max_running_sequences = 16, .prefill_token_budget = 64,
                    .attention = engine::AttentionMode::kPaged, .overlap = overlap,
                    .feed = feed});
  };
  auto loop = make(1, 1);
  std::vector<Request> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto add = [&](Request r) {
    reqs.push_back(r);
    streams.push_back(std::make_shared<RequestStream>());
    loop->Add(std::move(r), streams.back(), std::chrono::steady_clock::now());
  };
  auto seeded = [](Request r, float temperature, uint64_t seed) {
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.has_seed = true;
    return r;
  };
  Request a = Greedy(kSystem + " One day", 80);
  a.params.ignore_eos = true;
  add(a);
  for (int s = 0; s < 6; ++s) loop->Step();
  add(Greedy(kSystem + " The bird", 30));
  add(seeded(Greedy("Once upon a time", 25), 0.8f, 11));
  loop->Step();
  loop->Step();
  Request d = seeded(Greedy(kSystem + " Max was", 20), 0.9f, 12);
  d.n = 2;
  add(d);
  for (int s = 0; s < 5; ++s) loop->Step();
  // e: a's sequence as the tree holds it now, and one more token.
  std::vector<int32_t> a_now;
  for (kvcache::SeqId s : loop->tree().DfsOrder()) {
    std::vector<int32_t> t = loop->tree().Tokens(s);
    if (t.size() > a.prompt.size() && std::equal(a.prompt.begin(), a.prompt.end(), t.begin())) {
      a_now = t;
    }
  }
  ASSERT_GT(a_now.size(), a.prompt.size() + 5);
  Request e = Greedy("", 15);
  e.prompt = a_now;
  e.prompt.push_back(9);
  add(e);
  while (!loop->idle()) loop->Step();
  const LoopStats& st = loop->stats();
  std::printf("[ fed ] %lld of %lld steps fed, %lld fallbacks\n",
              static_cast<long long>(st.fed_steps), static_cast<long long>(st.steps),
              static_cast<long long>(st.fed_fallbacks));
  EXPECT_EQ(st.fed_fallbacks, 0) << "e's prompt made a's leaf a parent: a pending fork, not a wait";
  EXPECT_GT(st.fed_steps, st.steps / 2);
  EXPECT_EQ(loop->tree().Stats().chunks_live, 0);
  EXPECT_TRUE(loop->tree().CheckInvariants().ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result got = Collect(*streams[i], reqs[i].n);
    ASSERT_TRUE(got.status.ok()) << got.status;
    auto solo_loop = make(0, 0);
    auto solo = GenerateAll(*solo_loop, std::span<const Request>(&reqs[i], 1));
    ASSERT_TRUE(solo.ok()) << solo.status();
    for (int k = 0; k < reqs[i].n; ++k) {
      EXPECT_EQ(got.tokens[k], (*solo)[0].samples[k].tokens) << "request " << i << " sample " << k;
    }
  }
}

void RunSoak(SchedulerTest* test, int overlap, int feed) {
  test->Make(160, 16, {.loop = {.max_running_sequences = 32, .prefill_token_budget = 128,
                                .overlap = overlap, .feed = feed},
                       .queue_limit = 64});
  auto& sched_ = test->sched_;
  sched_->Start();
  BANYAN_SEEDED_RNG(seed_rng);
  const uint64_t base = seed_rng();
  std::atomic<int> ok = 0, rejected = 0, cancelled = 0;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(base + t);
      for (int i = 0; i < 60; ++i) {
        Request r = test->Greedy(rng() % 2 ? kSystem : "The cat", 1 + rng() % 60);
        r.prompt.push_back(3 + rng() % 500);
        r.n = 1 + rng() % 3;
        r.params.temperature = (rng() % 2) ? 0.0f : 0.9f;
        if (rng() % 5 == 0) r.stop = {"the"};
        if (rng() % 10 == 0) r.params.top_p = 7;  // invalid
        auto s = sched_->Submit(r);
        if (!s.ok()) {
          ++rejected;
          continue;
        }
        const bool cancel = rng() % 4 == 0;
        Result res = Collect(**s, r.n, [&](int ev) {
          if (cancel && ev == 3) (*s)->Cancel();
        });
        if (!res.status.ok()) continue;
        bool any_cancel = false;
        for (auto f : res.finish) {
          EXPECT_NE(f, FinishReason::kNone);
          any_cancel |= f == FinishReason::kCancelled;
        }
        any_cancel ? ++cancelled : ++ok;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_GT(ok, 100);
  EXPECT_GT(rejected, 0);
  const MetricsSnapshot m = WaitForMetrics(*sched_, [](const MetricsSnapshot& s) {
    return s.requests_running == 0 && s.kv_chunks_live == 0 &&
           s.kv_chunks_free + s.kv_chunks_cached == s.kv_chunks_total;
  });
  EXPECT_EQ(m.requests_running, 0);
  EXPECT_EQ(m.kv_chunks_live, 0);
  EXPECT_EQ(m.kv_chunks_free + m.kv_chunks_cached, m.kv_chunks_total);
}

}  // namespace
}  // namespace banyan::scheduler

namespace banyan::scheduler {
namespace {

// Tenant KV budgets (issue 14): while tenant a's running request holds its budget, a's next
// request waits, and tenant b's request behind it is admitted and finishes meanwhile.
TEST_F(SchedulerTest, TenantKvBudgetHoldsOnlyThatTenant) {
  Make(512);
  sched_->Start();
  auto of = [](Request r, const char* tenant, int64_t budget) {
    r.tenant = tenant;
    r.cache_namespace = tenant;
    r.tenant_kv_chunks = budget;
    return r;
  };
  Request a1 = of(Greedy(kSystem, 400), "a", 3);
  a1.params.ignore_eos = true;
  auto s_a1 = sched_->Submit(a1);
  ASSERT_TRUE(s_a1.ok());
  for (int i = 0; i < 2000 && sched_->Metrics().requests_running == 0; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(sched_->Metrics().requests_running, 1);
  auto s_a2 = sched_->Submit(of(Greedy("Once upon a time", 5), "a", 3));
  auto s_b1 = sched_->Submit(of(Greedy("Once upon a time", 5), "b", 0));
  ASSERT_TRUE(s_a2.ok() && s_b1.ok());
  Result b1 = Collect(**s_b1, 1);
  EXPECT_TRUE(b1.status.ok()) << b1.status;
  EXPECT_FALSE((*s_a1)->finished()) << "a1 should still run when b1 is done";
  std::vector<TokenEvent> early;
  (*s_a2)->Read(&early, 0ms);
  EXPECT_TRUE(early.empty()) << "a2 ran while a's budget was held";
  Result a2 = Collect(**s_a2, 1);
  Result a1_result = Collect(**s_a1, 1);
  EXPECT_TRUE(a2.status.ok()) << a2.status;
  EXPECT_EQ(a1_result.usage.completion_tokens, 400);
  EXPECT_EQ(a2.tokens[0], b1.tokens[0]) << "the same greedy prompt in both tenants";
}

}  // namespace
}  // namespace banyan::scheduler
