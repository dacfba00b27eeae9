// Prometheus text exposition (format 0.0.4) of the scheduler's MetricsSnapshot, served by
// GET /metrics. Every name is documented in docs/metrics.md.
//
// Two families of names describe the same numbers:
//  - banyan_*: everything in MetricsSnapshot, unlabelled;
//  - vllm:*: the subset that Kubernetes inference routers (Gateway API Inference Extension,
//    llm-d, vLLM production-stack) scrape, with vLLM's names, units and a model_name label.
// KV usage for routers is live chunks / total chunks: chunks held only by the prefix cache are
// evictable on demand, so (as in vLLM, whose free-block queue includes cached blocks) they count
// as free.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "scheduler/metrics.h"
#include "server/common/rejections.h"

namespace banyan::server {

// The full /metrics body. Pure: no clocks, no I/O. `rejections`: the front ends' refusals
// (RejectionCounters::Snapshot), banyan_requests_rejected_total{reason,tenant}; the scheduler's
// own unlabelled count (queue full, draining) is not rendered, the front ends count those too.
std::string RenderPrometheus(const scheduler::MetricsSnapshot& m, std::string_view model_name,
                             std::span<const RejectionSample> rejections = {});

// Prometheus' spelling of a sample value or bucket bound: shortest round-trip decimal,
// "+Inf", "-Inf", "NaN".
std::string PrometheusNumber(double v);

}  // namespace banyan::server
