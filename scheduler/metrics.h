// Counters and histograms the scheduler keeps, read by /metrics (Prometheus text) and the gRPC
// service. Snapshot() copies under the scheduler's lock; rendering is the server's job.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace banyan::scheduler {

// Cumulative histogram with fixed upper bounds (seconds), Prometheus style.
struct Histogram {
  std::vector<double> bounds;    // upper bounds, ascending; +Inf implied
  std::vector<uint64_t> counts;  // per bound (non-cumulative), plus one for +Inf
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1) {}
  void Observe(double v);
};

struct MetricsSnapshot {
  int32_t requests_running = 0;  // admitted, not finished (prefilling or decoding)
  int32_t requests_waiting = 0;  // queued, not admitted
  int32_t sequences_running = 0;
  int32_t kv_chunks_total = 0;
  int32_t kv_chunks_free = 0;
  int32_t kv_chunks_live = 0;    // used by running sequences
  int32_t kv_chunks_cached = 0;  // held by the prefix cache only (evictable)
  int64_t kv_chunks_saved_by_sharing = 0;
  // High-water marks of the two above since start-up, taken after every engine step that moved:
  // a load too short for any scrape to catch still leaves its mark here.
  int32_t kv_chunks_live_peak = 0;
  int64_t kv_chunks_saved_by_sharing_peak = 0;
  int32_t chunk_size = 0;
  bool kv_fp8 = false;  // K and V kept in FP8 (engine::Backend::kv_fp8)
  bool batch_invariant = false;  // engine::Backend::batch_invariant (--deterministic on)
  int64_t prompt_tokens_total = 0;
  int64_t prefix_cache_hit_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  // Speculative decoding (vLLM's spec_decode counters): verification chains run, candidate
  // tokens in them, candidates accepted, and accepted candidates by position in the chain.
  static constexpr int kSpecPositions = 8;
  int64_t spec_drafts_total = 0;
  int64_t spec_draft_tokens_total = 0;
  int64_t spec_accepted_tokens_total = 0;
  int64_t spec_accepted_per_position[kSpecPositions] = {};
  int64_t preemptions_total = 0;
  int64_t requests_finished_total = 0;  // by any reason
  int64_t requests_rejected_total = 0;  // queue full / draining
  int64_t requests_cancelled_total = 0;
  int64_t requests_failed_total = 0;
  int64_t iterations_total = 0;
  // Engine steps with decode rows and no prefill: their number, rows, wall time of the whole
  // step (host work included), and the device's busy time within them (0 on the CPU backend).
  int64_t decode_steps_total = 0;
  int64_t decode_rows_total = 0;
  double decode_step_seconds_total = 0;
  double decode_forward_seconds_total = 0;  // of which in the backend's calls (launch + wait)
  // Of the step's wall time, the host work before its launch returned (the device waits for
  // it; with the CPU a step ahead, the rest of the host work runs beside the device).
  double decode_launch_seconds_total = 0;
  double decode_device_seconds_total = 0;
  // Of those steps, the fed ones: launched before the step before was collected, their decode
  // rows reading their tokens on the device (LoopOptions::feed); their launch seconds are 0.
  int64_t decode_fed_steps_total = 0;
  // Engine steps that computed prompt tokens (decode rows may ride along): their number, the
  // prompt tokens they computed (prefix-cache hits excluded), and their wall time, host work
  // included. With only prompts in flight, tokens / seconds is the prefill rate.
  int64_t prefill_steps_total = 0;
  int64_t prefill_tokens_total = 0;
  double prefill_step_seconds_total = 0;
  Histogram time_to_first_token_seconds;
  Histogram inter_token_latency_seconds;
  Histogram e2e_request_latency_seconds;
};

// Default latency buckets, seconds.
std::vector<double> LatencyBuckets();

}  // namespace banyan::scheduler
