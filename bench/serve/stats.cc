#include "bench/serve/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

namespace banyan::bench::serve {
namespace {

Json QuantilesMs(const Quantiles& q) {
  auto ms = [](double s) { return std::round(s * 1e6) / 1e3; };  // microsecond resolution
  return Json{{"mean", ms(q.mean)}, {"p50", ms(q.p50)}, {"p90", ms(q.p90)},
              {"p99", ms(q.p99)},   {"max", ms(q.max)}, {"count", q.count}};
}

int64_t CeilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

// null when the daemon did not report its high-water marks.
Json PeaksJson(const KvPeaks& p) {
  if (p.chunks_live < 0 || p.chunks_saved_by_sharing < 0) return nullptr;
  return {{"chunks_live", p.chunks_live}, {"chunks_saved_by_sharing", p.chunks_saved_by_sharing}};
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Quantiles Summarize(std::vector<double> values) {
  Quantiles q;
  if (values.empty()) return q;
  std::sort(values.begin(), values.end());
  q.count = static_cast<int64_t>(values.size());
  q.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(q.count);
  q.p50 = Percentile(values, 0.50);
  q.p90 = Percentile(values, 0.90);
  q.p99 = Percentile(values, 0.99);
  q.max = values.back();
  return q;
}

int MaxStreamsOpen(const std::vector<RequestResult>& results) {
  std::vector<std::pair<double, int>> edges;  // (time, +1 header / -1 end); ends sort first
  for (const RequestResult& r : results) {
    if (r.headers_s < 0 || r.end_s < 0) continue;
    edges.emplace_back(r.headers_s, 1);
    edges.emplace_back(r.end_s, -1);
  }
  std::sort(edges.begin(), edges.end());
  int open = 0, most = 0;
  for (const auto& [at, step] : edges) {
    open += step;
    most = std::max(most, open);
  }
  return most;
}

Json RunReport(const Options& o, const Workload& w, const RunConfig& rc,
               const std::vector<RequestResult>& results, double duration_s,
               const KvObservation& kv, int max_in_flight) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, failed = 0, good = 0;
  int64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0, unshared_chunks = 0;
  int64_t short_outputs = 0;  // completed with fewer tokens than max_tokens (with ignore_eos)
  bool all_usage = true;
  Json reasons = Json::array();
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++failed;
      if (static_cast<int>(reasons.size()) < o.max_failure_reasons) reasons.push_back(r.error);
      continue;
    }
    ++completed;
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    all_usage = all_usage && r.usage_seen;
    if (r.cached_tokens > 0) cached_tokens += r.cached_tokens;
    const int64_t per_choice = r.output_tokens / std::max(1, r.n);
    if (r.output_tokens < r.max_tokens * r.n) ++short_outputs;
    unshared_chunks += r.n * CeilDiv(r.prompt_tokens + per_choice, kv.chunk_size);
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    double req_tpot = 0;
    if (per_choice > 1) {
      req_tpot = (r.e2e_s - r.ttft_s) / static_cast<double>(per_choice - 1);
      tpot.push_back(req_tpot);
    }
    if (r.ttft_s * 1e3 <= o.slo_ttft_ms && req_tpot * 1e3 <= o.slo_tpot_ms) ++good;
  }
  const double dur = std::max(duration_s, 1e-9);
  const Quantiles qttft = Summarize(ttft), qtpot = Summarize(tpot), qitl = Summarize(itl),
                  qe2e = Summarize(e2e);
  Json j;
  j["type"] = "run";
  if (!o.label.empty()) j["label"] = o.label;
  j["workload"] = {{"name", w.name},
                   {"num_prompts", w.num_prompts},
                   {"prefix_tokens", w.prefix_tokens},
                   {"suffix_tokens", w.suffix_tokens},
                   {"output_tokens", w.output_tokens},
                   {"num_groups", w.num_groups},
                   {"prompts_per_group", w.prompts_per_group},
                   {"n", w.n},
                   {"seed", o.seed},
                   {"vocab", o.vocab},
                   {"min_token", o.min_token}};
  j["arrivals"] = {{"request_rate", rc.request_rate > 0 ? Json(rc.request_rate) : Json("inf")},
                   {"burstiness", rc.burstiness},
                   {"concurrency", rc.concurrency},
                   {"max_in_flight", max_in_flight},
                   {"max_streams_open", MaxStreamsOpen(results)}};
  j["num_requests"] = results.size();
  j["completed"] = completed;
  j["failed"] = failed;
  j["failure_reasons"] = reasons;
  j["duration_s"] = duration_s;
  j["request_throughput"] = static_cast<double>(completed) / dur;
  j["output_throughput"] = static_cast<double>(output_tokens) / dur;
  j["total_token_throughput"] = static_cast<double>(input_tokens + output_tokens) / dur;
  j["total_input_tokens"] = input_tokens;
  j["total_output_tokens"] = output_tokens;
  j["total_tokens"] = input_tokens + output_tokens;
  j["cached_prompt_tokens"] = cached_tokens;
  j["output_tokens_from_usage"] = all_usage;
  j["short_outputs"] = short_outputs;
  j["ttft_ms"] = QuantilesMs(qttft);
  j["tpot_ms"] = QuantilesMs(qtpot);
  j["itl_ms"] = QuantilesMs(qitl);
  j["e2e_ms"] = QuantilesMs(qe2e);
  j["slo"] = {{"ttft_ms", o.slo_ttft_ms},
              {"tpot_ms", o.slo_tpot_ms},
              {"good_requests", good},
              {"goodput_rps", static_cast<double>(good) / dur},
              {"attainment", results.empty() ? 0.0
                                             : static_cast<double>(good) /
                                                   static_cast<double>(results.size())}};
  j["kv"] = {{"polls", kv.polls},
             {"chunk_size", kv.chunk_size},
             {"chunks_total", kv.chunks_total},
             {"peak_chunks_live", kv.peak_live},
             {"peak_chunks_used", kv.peak_used},
             {"peak_unshared_chunks_in_flight", kv.peak_unshared_in_flight},
             {"unshared_chunks_all_requests", unshared_chunks},
             {"daemon_peak_before", PeaksJson(kv.daemon_before)},
             {"daemon_peak_after", PeaksJson(kv.daemon_after)}};
  return j;
}

bool MeetsSlo(const Json& r) {
  return r["failed"].get<int64_t>() == 0 && r["completed"].get<int64_t>() > 0 &&
         r["ttft_ms"]["p99"].get<double>() <= r["slo"]["ttft_ms"].get<double>() &&
         r["tpot_ms"]["p99"].get<double>() <= r["slo"]["tpot_ms"].get<double>();
}

std::string ReadableSummary(const Json& r) {
  char buf[2048];
  auto q = [&](const char* key) {
    const Json& x = r[key];
    char b[160];
    std::snprintf(b, sizeof(b), "mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f",
                  x["mean"].get<double>(), x["p50"].get<double>(), x["p90"].get<double>(),
                  x["p99"].get<double>());
    return std::string(b);
  };
  const Json& a = r["arrivals"];
  const std::string rate = a["request_rate"].is_string() ? "inf" : a["request_rate"].dump();
  std::snprintf(buf, sizeof(buf),
                "==== %s: %lld requests (rate %s, concurrency %d) ====\n"
                "completed %lld  failed %lld  duration %.2f s  max in flight %d (streams open %d)\n"
                "requests/s %.2f  output tok/s %.1f  total tok/s %.1f  (in %lld, out %lld)\n"
                "goodput %.2f req/s (SLO TTFT <= %.0f ms, TPOT <= %.0f ms; attainment %.1f%%)\n"
                "TTFT ms  %s\nTPOT ms  %s\nITL ms   %s\nE2E ms   %s\n"
                "KV chunks (size %lld, pool %lld): peak live %lld, peak used %lld, "
                "unshared in flight at peak %lld, unshared all requests %lld (%d polls)\n",
                r["workload"]["name"].get<std::string>().c_str(),
                static_cast<long long>(r["num_requests"].get<int64_t>()), rate.c_str(),
                a["concurrency"].get<int>(), static_cast<long long>(r["completed"].get<int64_t>()),
                static_cast<long long>(r["failed"].get<int64_t>()), r["duration_s"].get<double>(),
                a["max_in_flight"].get<int>(), a["max_streams_open"].get<int>(),
                r["request_throughput"].get<double>(),
                r["output_throughput"].get<double>(), r["total_token_throughput"].get<double>(),
                static_cast<long long>(r["total_input_tokens"].get<int64_t>()),
                static_cast<long long>(r["total_output_tokens"].get<int64_t>()),
                r["slo"]["goodput_rps"].get<double>(), r["slo"]["ttft_ms"].get<double>(),
                r["slo"]["tpot_ms"].get<double>(), 100.0 * r["slo"]["attainment"].get<double>(),
                q("ttft_ms").c_str(), q("tpot_ms").c_str(), q("itl_ms").c_str(),
                q("e2e_ms").c_str(), static_cast<long long>(r["kv"]["chunk_size"].get<int64_t>()),
                static_cast<long long>(r["kv"]["chunks_total"].get<int64_t>()),
                static_cast<long long>(r["kv"]["peak_chunks_live"].get<int64_t>()),
                static_cast<long long>(r["kv"]["peak_chunks_used"].get<int64_t>()),
                static_cast<long long>(r["kv"]["peak_unshared_chunks_in_flight"].get<int64_t>()),
                static_cast<long long>(r["kv"]["unshared_chunks_all_requests"].get<int64_t>()),
                r["kv"]["polls"].get<int>());
  std::string out = buf;
  for (const Json& reason : r["failure_reasons"]) out += "  failure: " + reason.get<std::string>() + "\n";
  return out;
}

}  // namespace banyan::bench::serve
