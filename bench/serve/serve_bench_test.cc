// The bench's pure parts: SSE framing, percentiles, the /metrics parser, workload sharing.
#include <set>
#include <string>
#include <vector>

#include "bench/serve/options.h"
#include "bench/serve/runner.h"
#include "bench/serve/sse.h"
#include "bench/serve/stats.h"
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
  EXPECT_FALSE(ParseKvMetrics("banyan_kv_chunks_total 1\n", &s));
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

}  // namespace
}  // namespace banyan::bench::serve
