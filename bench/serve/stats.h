// What one benchmark run measured, and its reduction to the reported numbers.
//
// Definitions (docs/serve_bench.md says more):
//   TTFT  request sent -> first SSE event carrying generated text
//   ITL   every gap between two consecutive text events of the same choice
//   TPOT  (e2e - TTFT) / (output tokens per choice - 1), over requests with > 1 token
//   e2e   request sent -> `data: [DONE]`
// Output tokens come from the final usage chunk (stream_options.include_usage) when the server
// sends one, else from the number of text events. Percentiles interpolate linearly between
// order statistics (numpy's default).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/serve/options.h"
#include "bench/serve/workload.h"
#include "nlohmann/json.hpp"

namespace banyan::bench::serve {

using Json = nlohmann::json;

struct RequestResult {
  bool done = false;   // finished, successfully or not
  bool ok = false;
  std::string error;   // why it failed (empty when ok)
  int n = 1;
  int64_t prompt_tokens = 0;      // what was sent
  int64_t max_tokens = 0;         // per choice
  int64_t output_tokens = 0;      // all choices: usage.completion_tokens, else text events
  int64_t cached_tokens = -1;     // usage.prompt_tokens_details.cached_tokens; -1: not sent
  int64_t text_events = 0;        // events with non-empty text, all choices
  bool usage_seen = false;
  double start_s = 0;             // since the run's start
  double ttft_s = -1;             // -1: no token arrived
  double e2e_s = -1;
  double headers_s = -1;          // a 200 response header arrived, since the run's start; -1: never
  double end_s = -1;              // the exchange ended (any outcome), since the run's start
  std::vector<double> itl_s;
  // --verify-greedy only: per choice index, its `text` fields concatenated in arrival order.
  bool keep_text = false;
  std::vector<std::string> text;
};

// The daemon's KV high-water marks since its start-up (-1: not read).
struct KvPeaks {
  int64_t chunks_live = -1;
  int64_t chunks_saved_by_sharing = -1;
};

// The KV figures polled from GET /metrics during a run.
struct KvObservation {
  int polls = 0;              // successful polls
  int64_t chunk_size = 0;     // tokens per chunk (banyan_kv_chunk_size_tokens)
  int64_t chunks_total = 0;   // pool size
  int64_t peak_live = 0;      // max banyan_kv_chunks_live: chunks held by running sequences
  int64_t peak_used = 0;      // max of total - free: live plus prefix-cache-only chunks
  // Max over polls of the chunks the requests in flight would hold without any sharing:
  // sum of n * ceil((prompt + tokens so far per choice) / chunk_size).
  int64_t peak_unshared_in_flight = 0;
  // Read once before the first request and once after the last one ended. A mark that rose
  // during the run is the run's own peak; one that did not says only that the run stayed at or
  // below an earlier load's.
  KvPeaks daemon_before, daemon_after;
};

struct Quantiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t count = 0;
};

// q in [0, 1]; `sorted` ascending and non-empty.
double Percentile(const std::vector<double>& sorted, double q);
Quantiles Summarize(std::vector<double> values);

struct RunConfig {
  double request_rate = 0;  // 0: all at once
  double burstiness = 1;
  int concurrency = 0;
};

// Most streams open at once: responses whose header had arrived and whose exchange had not yet
// ended (intervals [headers_s, end_s]; an end and a header at the same instant do not overlap).
int MaxStreamsOpen(const std::vector<RequestResult>& results);

// The JSON object of one run ("type": "run").
Json RunReport(const Options& o, const Workload& w, const RunConfig& rc,
               const std::vector<RequestResult>& results, double duration_s,
               const KvObservation& kv, int max_in_flight);

// True when p99 TTFT and p99 TPOT are within the SLO and nothing failed.
bool MeetsSlo(const Json& report);

// A few readable lines for stderr.
std::string ReadableSummary(const Json& report);

}  // namespace banyan::bench::serve
