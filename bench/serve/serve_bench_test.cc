// The bench's pure parts: SSE framing, percentiles, the /metrics parser, workload sharing.
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "bench/serve/client.h"
#include "bench/serve/options.h"
#include "bench/serve/runner.h"
#include "bench/serve/sse.h"
#include "bench/serve/stats.h"
#include "bench/serve/verify.h"
#include "bench/serve/workload.h"
#include "gtest/gtest.h"

namespace banyan::bench::serve {
namespace {

TEST(SseReaderTest, EventsSplitAcrossReadsAndJoinedInOneRead) {
  const std::string stream =
      ": keep-alive\n\ndata: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\nid: 7\ndata: x\ndata: y\n\n"
      "data: [DONE]\n\n";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
    SseReader r;
    std::vector<std::string> events;
    for (size_t i = 0; i < stream.size(); i += piece) r.Feed(stream.substr(i, piece), &events);
    EXPECT_EQ(events, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "x\ny", "[DONE]"}))
        << "piece " << piece;
    EXPECT_EQ(r.pending_bytes(), 0u);
  }
}

TEST(SseReaderTest, IncompleteEventIsHeldBack) {
  SseReader r;
  std::vector<std::string> events;
  r.Feed("data: {\"a\":1}\n", &events);
  EXPECT_TRUE(events.empty());
  r.Feed("\n", &events);
  EXPECT_EQ(events, std::vector<std::string>{"{\"a\":1}"});
}

TEST(StatsTest, PercentilesInterpolateLinearly) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 5.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 9.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 10);
  const Quantiles q = Summarize({3, 1, 2});
  EXPECT_EQ(q.count, 3);
  EXPECT_DOUBLE_EQ(q.mean, 2);
  EXPECT_DOUBLE_EQ(q.p50, 2);
  EXPECT_DOUBLE_EQ(q.max, 3);
  EXPECT_EQ(Summarize({}).count, 0);
}

TEST(RunnerTest, ParsesKvGauges) {
  const std::string page =
      "# HELP banyan_kv_chunks_total x\n# TYPE banyan_kv_chunks_total gauge\n"
      "banyan_kv_chunks_total 3276\nbanyan_kv_chunks_free 3000\nbanyan_kv_chunks_live 200\n"
      "banyan_kv_chunks_live_other 5\nbanyan_kv_chunk_size_tokens 64\n";
  KvSample s;
  ASSERT_TRUE(ParseKvMetrics(page, &s));
  EXPECT_EQ(s.total, 3276);
  EXPECT_EQ(s.free, 3000);
  EXPECT_EQ(s.live, 200);
  EXPECT_EQ(s.chunk_size, 64);
  EXPECT_EQ(s.live_peak, -1);  // not on the page
  EXPECT_EQ(s.saved_by_sharing_peak, -1);
  EXPECT_FALSE(ParseKvMetrics("banyan_kv_chunks_total 1\n", &s));
}

TEST(RunnerTest, ParsesKvHighWaterMarks) {
  const std::string page =
      "banyan_kv_chunks_total 100\nbanyan_kv_chunks_free 90\nbanyan_kv_chunks_live 0\n"
      "banyan_kv_chunk_size_tokens 16\nbanyan_kv_chunks_live_peak 42\n"
      "banyan_kv_chunks_saved_by_sharing_peak 7\n";
  KvSample s;
  ASSERT_TRUE(ParseKvMetrics(page, &s));
  EXPECT_EQ(s.live, 0);
  EXPECT_EQ(s.live_peak, 42);
  EXPECT_EQ(s.saved_by_sharing_peak, 7);
  // The marks alone are not a KV page.
  EXPECT_FALSE(ParseKvMetrics("banyan_kv_chunks_live_peak 1\nbanyan_kv_chunks_total 1\n"
                              "banyan_kv_chunks_saved_by_sharing_peak 1\n"
                              "banyan_kv_chunk_size_tokens 1\n", &s));
}

TEST(WorkloadTest, GeneratedSharedPrefixSharesExactlyTheSystemPrompt) {
  Options o;
  o.workload = "generated-shared-prefix";
  o.num_groups = 3;
  o.prompts_per_group = 4;
  o.prefix_tokens = 20;
  o.suffix_tokens = 5;
  o.output_tokens = 7;
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  ASSERT_EQ(w.requests.size(), 12u);
  std::set<std::vector<int32_t>> prefixes;
  for (const RequestSpec& r : w.requests) {
    ASSERT_EQ(r.prompt.size(), 25u);
    EXPECT_EQ(r.output_tokens, 7);
    for (int32_t t : r.prompt) {
      EXPECT_GE(t, o.min_token);
      EXPECT_LT(t, o.vocab);
    }
    prefixes.insert(std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + 20));
  }
  EXPECT_EQ(prefixes.size(), 3u);
  Workload again;
  ASSERT_EQ(BuildWorkload(o, &again), "");
  EXPECT_EQ(again.requests[5].prompt, w.requests[5].prompt) << "same seed, same prompts";
}

TEST(WorkloadTest, DefaultsAndOverrides) {
  Options o;
  o.workload = "n-way";
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  EXPECT_EQ(w.requests.size(), 16u);
  EXPECT_EQ(w.requests[0].n, 16);
  EXPECT_EQ(w.requests[0].prompt.size(), 1024u);
  o.workload = "multi-tenant";
  o.num_groups = 2;
  o.prompts_per_group = 3;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  std::set<std::string> users;
  for (const RequestSpec& r : w.requests) {
    users.insert(r.user);
    EXPECT_GE(r.prompt.size(), 1024u + 128u);
    EXPECT_LE(r.prompt.size(), 4096u + 128u);
  }
  EXPECT_EQ(users, (std::set<std::string>{"tenant-0", "tenant-1"}));
  o.workload = "nonsense";
  EXPECT_NE(BuildWorkload(o, &w), "");
}

TEST(WorkloadTest, SuffixPoolRepeatsWholePrompts) {
  Options o;
  o.workload = "shared-prefix";
  o.num_prompts = 40;
  o.prefix_tokens = 8;
  o.suffix_tokens = 6;
  o.suffix_pool = 3;
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  std::set<std::vector<int32_t>> prompts;
  for (const RequestSpec& r : w.requests) prompts.insert(r.prompt);
  EXPECT_EQ(prompts.size(), 3u);
  o.suffix_pool = 0;
  Workload fresh;
  ASSERT_EQ(BuildWorkload(o, &fresh), "");
  EXPECT_EQ(std::vector<int32_t>(fresh.requests[0].prompt.begin(),
                                 fresh.requests[0].prompt.begin() + 8),
            std::vector<int32_t>(w.requests[0].prompt.begin(), w.requests[0].prompt.begin() + 8))
      << "the pool is drawn after the shared prefix, which stays the same";
  o.suffix_pool = 2;
  o.workload = "no-sharing";
  EXPECT_NE(BuildWorkload(o, &w), "");
}

// --frequency-penalty with --penalised-share: that share of the requests, evenly spread, carry
// the penalty in their body; out-of-range values are refused.
TEST(WorkloadTest, PenalisedShareIsSpreadEvenly) {
  const char* argv[] = {"bench", "--workload", "shared-prefix", "--num-prompts", "40",
                        "--prefix-tokens", "8", "--frequency-penalty", "0.5",
                        "--penalised-share", "0.25"};
  Options o;
  bool help = false;
  ASSERT_EQ(ParseOptions(11, const_cast<char**>(argv), &o, &help), "");
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  int penalised = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    penalised += w.requests[i].penalised ? 1 : 0;
    if (i % 8 == 7) {
      EXPECT_EQ(penalised, static_cast<int>(i + 1) / 4) << "after " << i + 1;
    }
  }
  EXPECT_EQ(penalised, 10);
  Target t;
  EXPECT_NE(CompletionBody(t, o, w.requests[3], true).find("\"frequency_penalty\":0.5"),
            std::string::npos);
  EXPECT_EQ(CompletionBody(t, o, w.requests[0], true).find("frequency_penalty"), std::string::npos);
  const char* bad[] = {"bench", "--frequency-penalty", "2.5"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(bad), &o, &help), "");
  const char* share[] = {"bench", "--penalised-share", "1.5"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(share), &o, &help), "");
}

// --min-output-tokens staggers the requests' ends: max_tokens uniform in [M, O], not all the
// same, the same for one seed, and the prompts those of the seed without the flag.
TEST(WorkloadTest, MinOutputTokensStaggersTheEnds) {
  auto build = [](std::vector<const char*> extra, Workload* w) {
    std::vector<const char*> argv = {"bench", "--workload", "shared-prefix", "--num-prompts",
                                     "64", "--prefix-tokens", "8", "--output-tokens", "120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Options o;
    bool help = false;
    ASSERT_EQ(ParseOptions(static_cast<int>(argv.size()), const_cast<char**>(argv.data()), &o,
                           &help),
              "");
    ASSERT_EQ(BuildWorkload(o, w), "");
  };
  Workload plain, a, b;
  build({}, &plain);
  build({"--min-output-tokens", "60"}, &a);
  build({"--min-output-tokens", "60"}, &b);
  ASSERT_EQ(a.requests.size(), 64u);
  std::set<int> lengths;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_GE(a.requests[i].output_tokens, 60);
    EXPECT_LE(a.requests[i].output_tokens, 120);
    EXPECT_EQ(a.requests[i].output_tokens, b.requests[i].output_tokens);
    EXPECT_EQ(a.requests[i].prompt, plain.requests[i].prompt);
    EXPECT_EQ(plain.requests[i].output_tokens, 120);
    lengths.insert(a.requests[i].output_tokens);
  }
  EXPECT_GT(lengths.size(), 16u);
  Workload bad;
  Options o;
  bool help = false;
  const char* argv[] = {"bench", "--output-tokens", "50", "--min-output-tokens", "60"};
  ASSERT_EQ(ParseOptions(5, const_cast<char**>(argv), &o, &help), "");
  EXPECT_NE(BuildWorkload(o, &bad), "");
}

// --json-schema puts the file's schema into every request as structured_outputs.json; a file
// that is not JSON, or not there, is refused at parse time.
TEST(WorkloadTest, JsonSchemaConstrainsEveryRequest) {
  const std::string path = ::testing::TempDir() + "/bench_schema.json";
  {
    std::ofstream f(path);
    f << R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";
  }
  const char* argv[] = {"bench", "--workload", "shared-prefix", "--num-prompts", "4",
                        "--prefix-tokens", "8", "--output-tokens", "16", "--json-schema",
                        path.c_str()};
  Options o;
  bool help = false;
  ASSERT_EQ(ParseOptions(static_cast<int>(std::size(argv)), const_cast<char**>(argv), &o, &help),
            "");
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  ASSERT_EQ(w.requests.size(), 4u);
  Target t;
  for (const RequestSpec& r : w.requests) {
    const std::string raw = CompletionBody(t, o, r, true);
    const Json body = Json::parse(raw);
    ASSERT_TRUE(body.contains("structured_outputs")) << body.dump();
    EXPECT_EQ(body["structured_outputs"]["json"]["required"][0], "city");
    // The file's key order, not sorted ("type" before "properties"): the grammar, and so what a
    // constrained load costs, depends on it.
    const size_t at = raw.find("\"structured_outputs\"");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LT(raw.find("\"type\"", at), raw.find("\"properties\"", at)) << raw;
  }
  {
    std::ofstream f(path);
    f << "{not json";
  }
  Options bad;
  EXPECT_NE(ParseOptions(static_cast<int>(std::size(argv)), const_cast<char**>(argv), &bad, &help),
            "");
  const char* missing[] = {"bench", "--json-schema", "/nonexistent/schema.json"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(missing), &bad, &help), "");
}

// --logit-bias-tokens and --min-tokens ride on the same share: a body with K distinct biased
// ids and min_tokens capped at max_tokens; no frequency_penalty unless asked for.
TEST(WorkloadTest, LogitBiasAndMinTokensRideOnTheShare) {
  const char* argv[] = {"bench", "--workload", "shared-prefix", "--num-prompts", "8",
                        "--prefix-tokens", "8", "--output-tokens", "16",
                        "--logit-bias-tokens", "5", "--min-tokens", "40",
                        "--penalised-share", "0.5"};
  Options o;
  bool help = false;
  const int argc = static_cast<int>(std::size(argv));
  ASSERT_EQ(ParseOptions(argc, const_cast<char**>(argv), &o, &help), "");
  Workload w;
  ASSERT_EQ(BuildWorkload(o, &w), "");
  int penalised = 0;
  Target t;
  for (const RequestSpec& r : w.requests) {
    const Json body = Json::parse(CompletionBody(t, o, r, true));
    EXPECT_FALSE(body.contains("frequency_penalty"));
    if (!r.penalised) {
      EXPECT_FALSE(body.contains("logit_bias"));
      EXPECT_FALSE(body.contains("min_tokens"));
      continue;
    }
    ++penalised;
    ASSERT_TRUE(body.contains("logit_bias"));
    EXPECT_EQ(body["logit_bias"].size(), 5u);
    for (const auto& [id, bias] : body["logit_bias"].items()) {
      EXPECT_GE(std::stoi(id), o.min_token);
      EXPECT_LT(std::stoi(id), o.vocab);
      EXPECT_EQ(bias.get<double>(), 1.0);
    }
    EXPECT_EQ(body["min_tokens"].get<int>(), 16);  // capped at the request's max_tokens
  }
  EXPECT_EQ(penalised, 4);
  const char* bad[] = {"bench", "--logit-bias-tokens", "600"};  // above vocab - min_token
  Options o2;
  EXPECT_NE(ParseOptions(3, const_cast<char**>(bad), &o2, &help), "");
}

TEST(OptionsTest, ParsesRatesAndRejectsBadValues) {
  const char* argv[] = {"bench", "--request-rate", "inf", "--sweep-rates=1,2.5,8",
                        "--num-prompts", "9", "--probe"};
  Options o;
  bool help = false;
  ASSERT_EQ(ParseOptions(7, const_cast<char**>(argv), &o, &help), "");
  EXPECT_EQ(o.request_rate, 0.0);
  EXPECT_EQ(o.sweep_rates, (std::vector<double>{1, 2.5, 8}));
  EXPECT_EQ(o.num_prompts, 9);
  EXPECT_TRUE(o.probe);
  const char* bad[] = {"bench", "--concurrency", "-1"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(bad), &o, &help), "");
  const char* unknown[] = {"bench", "--nope", "1"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(unknown), &o, &help), "");
}

TEST(OptionsTest, ConnectFirstOnlyForOneLoadSentAllAtOnce) {
  Options o;
  bool help = false;
  const char* ok[] = {"bench", "--connect-first", "--num-prompts", "8", "--concurrency", "8"};
  ASSERT_EQ(ParseOptions(6, const_cast<char**>(ok), &o, &help), "");
  EXPECT_TRUE(o.connect_first);
  const char* capped[] = {"bench", "--connect-first", "--num-prompts", "8", "--concurrency", "4"};
  EXPECT_NE(ParseOptions(6, const_cast<char**>(capped), &o, &help).find("--connect-first"),
            std::string::npos);
  const char* rate[] = {"bench", "--connect-first", "--request-rate", "5"};
  EXPECT_NE(ParseOptions(4, const_cast<char**>(rate), &o, &help), "");
  const char* sweep[] = {"bench", "--connect-first", "--sweep-rates", "1,2"};
  EXPECT_NE(ParseOptions(4, const_cast<char**>(sweep), &o, &help), "");
  const char* valued[] = {"bench", "--connect-first=1"};
  EXPECT_NE(ParseOptions(2, const_cast<char**>(valued), &o, &help), "");
}

TEST(OptionsTest, VerifyGreedyNeedsTemperatureZeroAndOneRun) {
  Options o;
  bool help = false;
  const char* ok[] = {"bench", "--verify-greedy", "--verify-samples", "5"};
  ASSERT_EQ(ParseOptions(4, const_cast<char**>(ok), &o, &help), "");
  EXPECT_TRUE(o.verify_greedy);
  EXPECT_EQ(o.verify_samples, 5);
  const char* warm[] = {"bench", "--verify-greedy", "--temperature", "0.7"};
  EXPECT_NE(ParseOptions(4, const_cast<char**>(warm), &o, &help).find("--temperature 0"),
            std::string::npos);
  const char* sweep[] = {"bench", "--verify-greedy", "--sweep-rates", "1,2"};
  EXPECT_NE(ParseOptions(4, const_cast<char**>(sweep), &o, &help), "");
  const char* probe[] = {"bench", "--probe", "--verify-greedy"};
  EXPECT_NE(ParseOptions(3, const_cast<char**>(probe), &o, &help), "");
}

TEST(StatsTest, MaxStreamsOpenCountsOverlappingStreams) {
  std::vector<RequestResult> r(4);
  r[0].headers_s = 0, r[0].end_s = 10;
  r[1].headers_s = 1, r[1].end_s = 3;
  r[2].headers_s = 3, r[2].end_s = 4;  // starts as r[1] ends: no overlap with it
  r[3].headers_s = -1, r[3].end_s = 2; // never got a 200 header
  EXPECT_EQ(MaxStreamsOpen(r), 2);
  EXPECT_EQ(MaxStreamsOpen({}), 0);
}

// Three requests, two of them identical; each result's text per choice.
struct VerifyFixture {
  Workload w;
  std::vector<RequestResult> results;
  VerifyFixture(std::vector<std::vector<std::string>> texts) {
    for (std::vector<int32_t> p : {std::vector<int32_t>{5, 6}, {5, 7}, {5, 6}}) {
      RequestSpec s;
      s.prompt = p;
      s.output_tokens = 4;
      s.n = 2;
      w.requests.push_back(s);
    }
    for (auto& t : texts) {
      RequestResult r;
      r.ok = true;
      r.text = std::move(t);
      results.push_back(std::move(r));
    }
  }
};

TEST(VerifyTest, GroupsIdenticalRequestsAndComparesEveryChoice) {
  VerifyFixture f({{"a b", "a b"}, {"x", "y"}, {"a b", "a b"}});
  VerifyTally tally;
  auto groups = CheckGroups(f.w, f.results, &tally);
  EXPECT_EQ(groups, (std::vector<std::vector<size_t>>{{0, 2}, {1}}));
  EXPECT_EQ(tally.groups, 2);
  EXPECT_EQ(tally.compared, 1);
  EXPECT_EQ(tally.mismatches, 0);
  EXPECT_EQ(tally.distinct_texts, 2);
  EXPECT_TRUE(tally.first_mismatch.is_null());

  VerifyFixture bad({{"a b", "a b"}, {"x", "y"}, {"a b", "a c!"}});
  VerifyTally t2;
  CheckGroups(bad.w, bad.results, &t2);
  EXPECT_EQ(t2.mismatches, 1);
  const Json& m = t2.first_mismatch;
  EXPECT_EQ(m["kind"], "group");
  EXPECT_EQ(m["request"], 2);
  EXPECT_EQ(m["reference"], 0);
  EXPECT_EQ(m["choice"], 1);
  EXPECT_EQ(m["offset"], 2);
  EXPECT_EQ(m["want"], "a b");
  EXPECT_EQ(m["got"], "a c!");

  // A failed request is no member; a missing choice counts as empty text.
  VerifyFixture partial({{"a b", ""}, {"x", "y"}, {"a b"}});
  partial.results[1].ok = false;
  VerifyTally t3;
  EXPECT_EQ(CheckGroups(partial.w, partial.results, &t3).size(), 1u);
  EXPECT_EQ(t3.mismatches, 0);
}

TEST(VerifyTest, NonStreamingTextsAndExcerptsKeepUtf8Whole) {
  std::vector<std::string> texts;
  ASSERT_EQ(NonStreamingTexts(R"({"choices":[{"index":1,"text":"b"},{"index":0,"text":"a"}]})",
                              &texts),
            "");
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(NonStreamingTexts(R"({"choices":[{"text":"a"}]})", &texts), "");
  EXPECT_NE(NonStreamingTexts("not json", &texts), "");

  // The difference starts inside a 3-byte character, and 16 bytes before it is the middle of
  // another: the excerpts keep both characters whole.
  const std::string want = "a\xe2\x82\xac" + std::string(13, 'x') + "\xe2\x82\xac";
  const std::string got = "a\xe2\x82\xac" + std::string(13, 'x') + "\xe2\x82\xad";
  VerifyTally tally;
  CompareChoices("non_streaming", 3, 3, {want}, {got}, &tally);
  EXPECT_EQ(tally.mismatches, 1);
  EXPECT_EQ(tally.first_mismatch["offset"], 19);
  EXPECT_EQ(tally.first_mismatch["want"], want.substr(1));
  EXPECT_EQ(tally.first_mismatch["got"], got.substr(1));
  EXPECT_NO_THROW(tally.ToJson().dump());
}

TEST(VerifyTest, SpreadSampleIsEvenAndDeterministic) {
  EXPECT_EQ(SpreadSample(3, 64), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(SpreadSample(10, 4), (std::vector<size_t>{0, 2, 5, 7}));
  EXPECT_TRUE(SpreadSample(10, 0).empty());
  const std::vector<size_t> s = SpreadSample(4096, 64);
  EXPECT_EQ(s.size(), 64u);
  EXPECT_EQ(std::set<size_t>(s.begin(), s.end()).size(), 64u);
  EXPECT_EQ(s.back(), 63u * 4096 / 64);
}

}  // namespace
}  // namespace banyan::bench::serve
