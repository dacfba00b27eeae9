// RenderPrometheus: every documented name is present, histograms are cumulative and well
// formed, labels are escaped, and the text parses line by line as exposition format 0.0.4.
#include "server/common/metrics_text.h"

#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/common/rejections.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

scheduler::MetricsSnapshot Sample() {
  scheduler::MetricsSnapshot m;
  m.requests_running = 3;
  m.requests_waiting = 2;
  m.sequences_running = 5;
  m.kv_chunks_total = 100;
  m.kv_chunks_free = 60;
  m.kv_chunks_live = 25;
  m.kv_chunks_cached = 15;
  m.kv_chunks_saved_by_sharing = 7;
  m.kv_chunks_live_peak = 31;
  m.kv_chunks_saved_by_sharing_peak = 9;
  m.chunk_size = 16;
  m.prompt_tokens_total = 1000;
  m.prefix_cache_hit_tokens_total = 400;
  m.generation_tokens_total = 5000;
  m.preemptions_total = 1;
  m.requests_finished_total = 10;
  m.batch_invariant = true;
  m.prefill_steps_total = 4;
  m.prefill_tokens_total = 600;
  m.prefill_step_seconds_total = 0.5;
  m.time_to_first_token_seconds = scheduler::Histogram({0.1, 1.0});
  m.time_to_first_token_seconds.counts = {2, 3, 1};
  m.time_to_first_token_seconds.count = 6;
  m.time_to_first_token_seconds.sum = 4.5;
  m.inter_token_latency_seconds = scheduler::Histogram({0.01});
  m.e2e_request_latency_seconds = scheduler::Histogram(std::vector<double>{});
  return m;
}

// name{labels} -> value, for every sample line.
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, sample)) {
      out[m[1].str() + m[2].str()] = m[3].str();
    } else {
      EXPECT_TRUE(std::regex_match(line, comment)) << "bad line: " << line;
    }
  }
  return out;
}

TEST(MetricsTextTest, AllNamesAndValues) {
  const std::string text = RenderPrometheus(Sample(), "stories260K");
  auto s = Samples(text);
  EXPECT_EQ(s["banyan_requests_running"], "3");
  EXPECT_EQ(s["banyan_requests_waiting"], "2");
  EXPECT_EQ(s["banyan_sequences_running"], "5");
  EXPECT_EQ(s["banyan_kv_chunks_total"], "100");
  EXPECT_EQ(s["banyan_kv_chunks_free"], "60");
  EXPECT_EQ(s["banyan_kv_chunks_live"], "25");
  EXPECT_EQ(s["banyan_kv_chunks_cached"], "15");
  EXPECT_EQ(s["banyan_kv_chunks_saved_by_sharing"], "7");
  EXPECT_EQ(s["banyan_kv_chunks_live_peak"], "31");
  EXPECT_EQ(s["banyan_kv_chunks_saved_by_sharing_peak"], "9");
  EXPECT_EQ(s["banyan_kv_chunk_size_tokens"], "16");
  EXPECT_EQ(s["banyan_kv_usage_ratio"], "0.25");
  EXPECT_EQ(s["banyan_prompt_tokens_total"], "1000");
  EXPECT_EQ(s["banyan_prefix_cache_hit_tokens_total"], "400");
  EXPECT_EQ(s["banyan_generation_tokens_total"], "5000");
  EXPECT_EQ(s["banyan_preemptions_total"], "1");
  EXPECT_EQ(s["banyan_requests_finished_total"], "10");
  EXPECT_EQ(s["banyan_prefill_steps_total"], "4");
  EXPECT_EQ(s["banyan_deterministic"], "1");
  scheduler::MetricsSnapshot off = Sample();
  off.batch_invariant = false;
  EXPECT_EQ(Samples(RenderPrometheus(off, "m"))["banyan_deterministic"], "0");
  EXPECT_EQ(s["banyan_prefill_tokens_total"], "600");
  EXPECT_EQ(s["banyan_prefill_step_seconds_total"], "0.5");
  for (const char* name : {"banyan_requests_cancelled_total", "banyan_requests_failed_total",
                           "banyan_iterations_total"}) {
    EXPECT_EQ(s[name], "0") << name;
  }
  const std::string l = "{model_name=\"stories260K\"}";
  EXPECT_EQ(s["vllm:num_requests_running" + l], "3");
  EXPECT_EQ(s["vllm:num_requests_waiting" + l], "2");
  EXPECT_EQ(s["vllm:gpu_cache_usage_perc" + l], "0.25");
  EXPECT_EQ(s["vllm:kv_cache_usage_perc" + l], "0.25");
  EXPECT_EQ(s["vllm:prompt_tokens_total" + l], "1000");
  EXPECT_EQ(s["vllm:generation_tokens_total" + l], "5000");
  EXPECT_EQ(s["vllm:num_preemptions_total" + l], "1");
  EXPECT_EQ(s["vllm:prefix_cache_queries_total" + l], "1000");
  EXPECT_EQ(s["vllm:prefix_cache_hits_total" + l], "400");
  // vLLM's cache_config_info: an info gauge (1) whose labels carry the configuration.
  EXPECT_EQ(s["vllm:cache_config_info{model_name=\"stories260K\",block_size=\"16\","
              "cache_dtype=\"auto\",enable_prefix_caching=\"True\","
              "kv_cache_size_tokens=\"1600\",num_gpu_blocks=\"100\","
              "prefix_caching_hash_algo=\"banyan_chain64\",sliding_window=\"None\"}"],
            "1");
  // An FP8 KV cache is vLLM's cache_dtype "fp8".
  scheduler::MetricsSnapshot fp8 = Sample();
  fp8.kv_fp8 = true;
  EXPECT_EQ(Samples(RenderPrometheus(fp8, "stories260K"))
                ["vllm:cache_config_info{model_name=\"stories260K\",block_size=\"16\","
                 "cache_dtype=\"fp8\",enable_prefix_caching=\"True\","
                 "kv_cache_size_tokens=\"1600\",num_gpu_blocks=\"100\","
                 "prefix_caching_hash_algo=\"banyan_chain64\",sliding_window=\"None\"}"],
            "1");
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                        "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"}) {
    EXPECT_TRUE(s.count(std::string(h) + "_count" + l)) << h;
  }
}

TEST(MetricsTextTest, HistogramsAreCumulative) {
  auto s = Samples(RenderPrometheus(Sample(), "m"));
  EXPECT_EQ(s["banyan_time_to_first_token_seconds_bucket{le=\"0.1\"}"], "2");
  EXPECT_EQ(s["banyan_time_to_first_token_seconds_bucket{le=\"1\"}"], "5");
  EXPECT_EQ(s["banyan_time_to_first_token_seconds_bucket{le=\"+Inf\"}"], "6");
  EXPECT_EQ(s["banyan_time_to_first_token_seconds_sum"], "4.5");
  EXPECT_EQ(s["banyan_time_to_first_token_seconds_count"], "6");
  EXPECT_EQ(s["vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"1\"}"], "5");
  // An empty histogram still has its +Inf bucket, sum and count.
  EXPECT_EQ(s["banyan_e2e_request_latency_seconds_bucket{le=\"+Inf\"}"], "0");
  EXPECT_EQ(s["banyan_e2e_request_latency_seconds_count"], "0");
}

TEST(MetricsTextTest, TypesDeclaredOncePerFamily) {
  const std::string text = RenderPrometheus(Sample(), "m");
  std::map<std::string, int> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) ++types[line.substr(7, line.find(' ', 7) - 7)];
  }
  for (const auto& [name, count] : types) EXPECT_EQ(count, 1) << name;
  EXPECT_NE(text.find("# TYPE banyan_generation_tokens_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE banyan_requests_running gauge"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
}

TEST(MetricsTextTest, EscapesLabelsAndHandlesEmptyPool) {
  scheduler::MetricsSnapshot m;  // all zero, kv_chunks_total 0: usage 0, not NaN
  const std::string text = RenderPrometheus(m, "we\"ird\\name\n");
  EXPECT_NE(text.find("model_name=\"we\\\"ird\\\\name\\n\""), std::string::npos) << text;
  EXPECT_NE(text.find("banyan_kv_usage_ratio 0\n"), std::string::npos);
  EXPECT_EQ(text.find("NaN"), std::string::npos);
}

// The front ends' refusals: one series per (reason, tenant), none before the first; the
// family is declared either way.
TEST(MetricsTextTest, RejectionsByReasonAndTenant) {
  const std::string none = RenderPrometheus(Sample(), "m");
  EXPECT_NE(none.find("# TYPE banyan_requests_rejected_total counter"), std::string::npos);
  EXPECT_EQ(none.find("\nbanyan_requests_rejected_total{"), std::string::npos);
  EXPECT_EQ(none.find("\nbanyan_requests_rejected_total "), std::string::npos);

  RejectionCounters counters;
  counters.Add(RejectReason::kTenantConcurrency, "bob");
  counters.Add(RejectReason::kTenantConcurrency, "bob");
  counters.Add(RejectReason::kUnauthorized, "");
  counters.Add(RejectReason::kQueueFull, "default");
  auto s = Samples(RenderPrometheus(Sample(), "m", counters.Snapshot()));
  EXPECT_EQ(
      s["banyan_requests_rejected_total{reason=\"tenant_concurrency\",tenant=\"bob\"}"], "2");
  EXPECT_EQ(s["banyan_requests_rejected_total{reason=\"unauthorized\",tenant=\"\"}"], "1");
  EXPECT_EQ(s["banyan_requests_rejected_total{reason=\"queue_full\",tenant=\"default\"}"], "1");
  EXPECT_EQ(counters.Count(RejectReason::kTenantConcurrency, "bob"), 2);
  EXPECT_EQ(counters.Count(RejectReason::kTenantConcurrency, "alice"), 0);
}

TEST(MetricsTextTest, RejectReasonsFromStatuses) {
  EXPECT_EQ(RejectReasonForHttp(400, "context_length_exceeded"), RejectReason::kPromptTooLong);
  EXPECT_EQ(RejectReasonForHttp(400, "prompt_too_long"), RejectReason::kPromptTooLong);
  EXPECT_EQ(RejectReasonForHttp(400, "invalid_value"), RejectReason::kBadRequest);
  EXPECT_EQ(RejectReasonForHttp(413, ""), RejectReason::kBodyTooLarge);
  EXPECT_EQ(RejectReasonForHttp(429, ""), RejectReason::kQueueFull);
  EXPECT_EQ(RejectReasonForHttp(503, ""), RejectReason::kDraining);
  EXPECT_EQ(RejectReasonForHttp(500, ""), RejectReason::kInternalError);
  EXPECT_EQ(RejectReasonForStatus(absl::UnauthenticatedError("x")), RejectReason::kUnauthorized);
  EXPECT_EQ(RejectReasonForStatus(absl::ResourceExhaustedError("x")), RejectReason::kQueueFull);
  EXPECT_EQ(RejectReasonForStatus(absl::UnavailableError("x")), RejectReason::kDraining);
  EXPECT_EQ(RejectReasonForStatus(absl::NotFoundError("x")), RejectReason::kNotFound);
  EXPECT_EQ(RejectReasonForStatus(absl::InvalidArgumentError("x")), RejectReason::kBadRequest);
  absl::Status long_prompt = absl::InvalidArgumentError("x");
  SetStatusCode(&long_prompt, "context_length_exceeded");
  EXPECT_EQ(RejectReasonForStatus(long_prompt), RejectReason::kPromptTooLong);
  EXPECT_EQ(RejectReasonName(RejectReason::kHeadTimeout), "head_timeout");
}

TEST(MetricsTextTest, Numbers) {
  EXPECT_EQ(PrometheusNumber(0.005), "0.005");
  EXPECT_EQ(PrometheusNumber(1.0), "1");
  EXPECT_EQ(PrometheusNumber(2.5e-7), "2.5e-07");
  EXPECT_EQ(PrometheusNumber(1.0 / 0.0), "+Inf");
  EXPECT_EQ(PrometheusNumber(-1.0 / 0.0), "-Inf");
}

}  // namespace
}  // namespace banyan::server
