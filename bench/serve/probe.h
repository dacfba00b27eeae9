// --probe: does a crowd of idle and slow connections delay a normal request?
//
//  1. baseline: `probe_requests` small non-streaming completions, one after another, each on a
//     fresh connection; their latencies are the baseline.
//  2. opens `idle_connections` sockets that send nothing, and `trickle_connections` that send a
//     valid completions request one byte every `trickle_interval_ms`; waits until all are
//     connected, then `probe_settle_ms` more.
//  3. sends `probe_requests` more of the same small requests one after another while the idle
//     and trickling sockets stay open (in both phases `probe_gap_ms` apart), reports each
//     latency, and max_delay_ms = max(probe latency) - median(baseline latency).
// Connections the server closes during the probe are counted (a head timeout may close them).
#pragma once

#include "bench/serve/client.h"
#include "bench/serve/options.h"
#include "bench/serve/stats.h"

namespace banyan::bench::serve {

// The JSON object of the probe ("type": "probe").
Json RunProbe(const Options& o, const Target& t);

std::string ReadableProbeSummary(const Json& report);

}  // namespace banyan::bench::serve
