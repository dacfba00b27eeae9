// The stats stage of the engine loop: what a collected step adds to the loop's accounting
// (LoopStats) and to the metrics (MetricsSnapshot), and the gauges of the cache and the lists.
// Pure functions of their inputs: no clocks, no backend.
#pragma once

#include <cstdint>

#include "kvcache/prefix_tree.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/in_flight.h"
#include "scheduler/metrics.h"

namespace banyan::scheduler {

// One collected step, as the accounting sees it.
struct CollectedStep {
  double step_seconds = 0;     // its wall time: its host work's beginning to its tokens
  double forward_seconds = 0;  // of which in the backend's forward pass (StepOutput)
  // Device busy time of a decode-only step (the backend's device seconds since its launch).
  double device_seconds = 0;
  int64_t plan_builds = 0;  // the runner's full plan rebuilds so far
};

// A step with no prefill counts as a decode step (its times split by phase, from f.times);
// one with prefill adds its wall time to prefill_seconds.
void RecordStep(const InFlightStep& f, const CollectedStep& step, LoopStats* stats,
                MetricsSnapshot* metrics);

// The gauges: the cache's chunks, the running sequences and requests; the peaks (LoopStats::
// peak at the step with the most live chunks).
void RecordGauges(const kvcache::MemoryStats& kv, int32_t requests_running,
                  int32_t requests_waiting, LoopStats* stats, MetricsSnapshot* metrics);

}  // namespace banyan::scheduler
