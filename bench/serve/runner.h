// One benchmark run: dispatches a workload's requests by the arrival process, follows their
// streams, polls GET /metrics for the KV gauges, and returns the run's JSON report.
// Polling samples: a load shorter than the interval can finish between two polls. The daemon's
// high-water marks (banyan_kv_chunks_live_peak, banyan_kv_chunks_saved_by_sharing_peak), read
// once before the run starts and once after its last request ends, cannot be missed.
//
// Arrivals: request i is released at t0 + sum of the first i inter-arrival gaps, gaps drawn from
// a gamma distribution of shape `burstiness` and mean 1 / rate (shape 1: Poisson arrivals; below
// 1: burstier; above 1: more even); rate 0 releases everything at t0. With a concurrency cap, a
// released request also waits for a free slot, so it may start after its arrival time (its
// latencies are measured from when it is sent). All on one io_context thread.
#pragma once

#include <vector>

#include "bench/serve/client.h"
#include "bench/serve/options.h"
#include "bench/serve/stats.h"
#include "bench/serve/workload.h"

namespace banyan::bench::serve {

// `bodies[i]` is the request body of w.requests[i] (CompletionBody, stream true). With
// `results_out`, the per-request results are moved there (with o.verify_greedy they hold the
// streamed texts).
Json RunOnce(const Options& o, const Target& t, const Workload& w,
             const std::vector<std::string>& bodies, const RunConfig& rc,
             std::vector<RequestResult>* results_out = nullptr);

// Parses a Prometheus text page for the KV gauges. Returns false when one of the four current
// gauges is missing; the two high-water marks stay -1 when absent (an older daemon).
struct KvSample {
  int64_t chunk_size = 0, total = 0, free = 0, live = 0;
  int64_t live_peak = -1, saved_by_sharing_peak = -1;
};
bool ParseKvMetrics(const std::string& page, KvSample* out);

}  // namespace banyan::bench::serve
