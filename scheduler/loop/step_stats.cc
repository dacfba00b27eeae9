#include "scheduler/loop/step_stats.h"

#include <algorithm>

namespace banyan::scheduler {
namespace {

void RecordDecodeStep(const InFlightStep& f, const CollectedStep& step, LoopStats* stats,
                      MetricsSnapshot* metrics) {
  const StepTimes& t = f.times;
  ++stats->decode_steps;
  stats->decode_seconds += step.step_seconds;
  stats->decode_device_seconds += step.device_seconds;
  stats->decode_launch_seconds += t.launch_seconds;
  stats->decode_backend_launch_seconds += t.backend_launch_seconds;
  stats->decode_take_seconds += t.take_seconds;
  stats->decode_schedule_seconds += t.schedule_seconds;
  stats->decode_place_seconds += t.place_seconds;
  stats->decode_launch_cpu_seconds += t.launch_cpu_seconds;
  stats->decode_launch_context_switches += t.launch_context_switches;
  MetricsSnapshot& m = *metrics;
  ++m.decode_steps_total;
  if (f.fed) ++m.decode_fed_steps_total;
  m.decode_rows_total += f.decode_rows;
  m.decode_step_seconds_total += step.step_seconds;
  m.decode_forward_seconds_total += step.forward_seconds;
  m.decode_launch_seconds_total += t.launch_seconds;
  m.decode_device_seconds_total += step.device_seconds;
}

}  // namespace

void RecordStep(const InFlightStep& f, const CollectedStep& step, LoopStats* stats,
                MetricsSnapshot* metrics) {
  ++stats->steps;
  stats->host_seconds += step.step_seconds - step.forward_seconds;
  if (f.prefill_tokens == 0) {
    RecordDecodeStep(f, step, stats, metrics);
  } else {
    stats->prefill_seconds += step.step_seconds;
    ++metrics->prefill_steps_total;
    metrics->prefill_tokens_total += f.prefill_tokens;
    metrics->prefill_step_seconds_total += step.step_seconds;
  }
  stats->decode_tokens += f.decode_rows;
  stats->prefill_tokens += f.prefill_tokens;
  stats->plan_builds = step.plan_builds;
}

void RecordGauges(const kvcache::MemoryStats& kv, int32_t requests_running,
                  int32_t requests_waiting, LoopStats* stats, MetricsSnapshot* metrics) {
  MetricsSnapshot& m = *metrics;
  m.kv_chunks_total = kv.chunks_total;
  m.kv_chunks_free = kv.chunks_free;
  m.kv_chunks_live = kv.chunks_live;
  m.kv_chunks_cached = kv.chunks_cached;
  m.kv_chunks_saved_by_sharing = kv.chunks_saved_by_sharing;
  m.kv_chunks_live_peak = std::max(m.kv_chunks_live_peak, kv.chunks_live);
  m.kv_chunks_saved_by_sharing_peak =
      std::max(m.kv_chunks_saved_by_sharing_peak, kv.chunks_saved_by_sharing);
  m.sequences_running = kv.live_sequences;
  m.requests_running = requests_running;
  m.requests_waiting = requests_waiting;
  if (kv.chunks_live >= stats->peak.chunks_live) stats->peak = kv;
}

}  // namespace banyan::scheduler
