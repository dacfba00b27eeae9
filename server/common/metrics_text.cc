#include "server/common/metrics_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>

#include "absl/strings/str_cat.h"

namespace banyan::server {
namespace {

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string_view model_name)
      : model_label_(absl::StrCat("model_name=\"", EscapeLabel(model_name), "\"")) {}

  // A gauge or counter. `labelled`: carries the model_name label (the vllm: family).
  void Scalar(std::string_view name, std::string_view type, std::string_view help, double value,
              bool labelled = false) {
    Header(name, type, help);
    absl::StrAppend(&out_, Sv(name), labelled ? absl::StrCat("{", model_label_, "}") : "", " ",
                    PrometheusNumber(value), "\n");
  }

  // An info gauge: one series of value 1 whose labels carry the facts (vLLM's *_info style);
  // `labels` are name="value" pairs, joined with commas, after the model_name label.
  void Info(std::string_view name, std::string_view help, std::string_view labels) {
    Header(name, "gauge", help);
    absl::StrAppend(&out_, Sv(name), "{", model_label_, ",", Sv(labels), "} 1\n");
  }

  // A counter with one series per position label (0-based).
  void PerPosition(std::string_view name, std::string_view help, std::span<const int64_t> values,
                   bool labelled = false) {
    Header(name, "counter", help);
    for (size_t i = 0; i < values.size(); ++i) {
      absl::StrAppend(&out_, Sv(name), "{", labelled ? absl::StrCat(model_label_, ",") : "",
                      "position=\"", i, "\"} ", values[i], "\n");
    }
  }

  void Hist(std::string_view name, std::string_view help, const scheduler::Histogram& h,
            bool labelled = false) {
    Header(name, "histogram", help);
    const std::string extra = labelled ? absl::StrCat(model_label_, ",") : "";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      if (i < h.counts.size()) cumulative += h.counts[i];
      absl::StrAppend(&out_, Sv(name), "_bucket{", extra, "le=\"", PrometheusNumber(h.bounds[i]),
                      "\"} ", cumulative, "\n");
    }
    // +Inf holds everything observed: the total count, whatever the per-bucket counts say.
    absl::StrAppend(&out_, Sv(name), "_bucket{", extra, "le=\"+Inf\"} ", h.count, "\n");
    const std::string plain = labelled ? absl::StrCat("{", model_label_, "}") : "";
    absl::StrAppend(&out_, Sv(name), "_sum", plain, " ", PrometheusNumber(h.sum), "\n");
    absl::StrAppend(&out_, Sv(name), "_count", plain, " ", h.count, "\n");
  }

  // banyan_requests_rejected_total: one series per (reason, tenant) counted so far.
  void Rejections(std::span<const RejectionSample> samples) {
    constexpr std::string_view kName = "banyan_requests_rejected_total";
    Header(kName, "counter",
           "Requests turned away before admission, by reason and tenant (\"\": not "
           "authenticated).");
    for (const RejectionSample& r : samples) {
      absl::StrAppend(&out_, Sv(kName), "{reason=\"", Sv(r.reason), "\",tenant=\"",
                      EscapeLabel(r.tenant), "\"} ", r.count, "\n");
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  static absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

  void Header(std::string_view name, std::string_view type, std::string_view help) {
    absl::StrAppend(&out_, "# HELP ", Sv(name), " ", Sv(help), "\n# TYPE ", Sv(name), " ", Sv(type),
                    "\n");
  }

  std::string model_label_;
  std::string out_;
};

}  // namespace

std::string PrometheusNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

std::string RenderPrometheus(const scheduler::MetricsSnapshot& m, std::string_view model_name,
                             std::span<const RejectionSample> rejections) {
  Writer w(model_name);
  const double kv_total = m.kv_chunks_total;
  // Routers' notion of KV load: live / total (cached-only chunks are evictable, hence free).
  const double kv_usage = kv_total > 0 ? m.kv_chunks_live / kv_total : 0.0;

  // --- banyan_* gauges
  w.Scalar("banyan_requests_running", "gauge",
           "Requests admitted and not finished (prefilling or decoding).", m.requests_running);
  w.Scalar("banyan_requests_waiting", "gauge", "Requests queued and not yet admitted.",
           m.requests_waiting);
  w.Scalar("banyan_sequences_running", "gauge",
           "Sequences (samples) running; a request with n > 1 runs n of them.",
           m.sequences_running);
  w.Scalar("banyan_kv_chunks_total", "gauge", "KV cache chunks in the pool.", m.kv_chunks_total);
  w.Scalar("banyan_kv_chunks_free", "gauge", "KV cache chunks on the free list.", m.kv_chunks_free);
  w.Scalar("banyan_kv_chunks_live", "gauge", "KV cache chunks used by running sequences.",
           m.kv_chunks_live);
  w.Scalar("banyan_kv_chunks_cached", "gauge",
           "KV cache chunks held only by the prefix cache (evictable).", m.kv_chunks_cached);
  w.Scalar("banyan_kv_chunks_saved_by_sharing", "gauge",
           "KV cache chunks stored once but used by several running sequences, counted once per "
           "extra sequence: the copies prefix sharing saves now.",
           static_cast<double>(m.kv_chunks_saved_by_sharing));
  w.Scalar("banyan_kv_chunks_live_peak", "gauge",
           "Most KV cache chunks live at once since start-up (high-water mark).",
           m.kv_chunks_live_peak);
  w.Scalar("banyan_kv_chunks_saved_by_sharing_peak", "gauge",
           "Most KV cache chunks saved by sharing at once since start-up (high-water mark).",
           static_cast<double>(m.kv_chunks_saved_by_sharing_peak));
  w.Scalar("banyan_deterministic", "gauge",
           "1 when a request's tokens and logprobs do not depend on the batch it runs in "
           "(--deterministic on).",
           m.batch_invariant ? 1.0 : 0.0);
  w.Scalar("banyan_kv_chunk_size_tokens", "gauge", "Token slots per KV cache chunk.", m.chunk_size);
  w.Scalar("banyan_kv_usage_ratio", "gauge",
           "Fraction of KV cache chunks used by running sequences: live / total.", kv_usage);

  // --- banyan_* counters
  w.Scalar("banyan_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
           static_cast<double>(m.prompt_tokens_total));
  w.Scalar("banyan_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens found in the prefix cache (no prefill, no new memory).",
           static_cast<double>(m.prefix_cache_hit_tokens_total));
  w.Scalar("banyan_generation_tokens_total", "counter", "Tokens generated, over all samples.",
           static_cast<double>(m.generation_tokens_total));
  w.Scalar("banyan_spec_decode_drafts_total", "counter",
           "Speculative candidate chains verified (one per speculating sample and step).",
           static_cast<double>(m.spec_drafts_total));
  w.Scalar("banyan_spec_decode_draft_tokens_total", "counter",
           "Speculative candidate tokens verified through the prefix tree.",
           static_cast<double>(m.spec_draft_tokens_total));
  w.Scalar("banyan_spec_decode_accepted_tokens_total", "counter",
           "Speculative candidate tokens accepted (the output is the same as without them).",
           static_cast<double>(m.spec_accepted_tokens_total));
  w.PerPosition("banyan_spec_decode_accepted_tokens_per_position",
                "Accepted candidates by position in their chain (0: the first candidate).",
                m.spec_accepted_per_position);
  w.Scalar("banyan_preemptions_total", "counter",
           "Sequences preempted (recomputed later) because the KV cache ran out.",
           static_cast<double>(m.preemptions_total));
  w.Scalar("banyan_requests_finished_total", "counter", "Requests finished, for any reason.",
           static_cast<double>(m.requests_finished_total));
  w.Rejections(rejections);
  w.Scalar("banyan_requests_cancelled_total", "counter",
           "Requests cancelled (client disconnect, deadline, shutdown).",
           static_cast<double>(m.requests_cancelled_total));
  w.Scalar("banyan_requests_failed_total", "counter", "Requests that failed with an error.",
           static_cast<double>(m.requests_failed_total));
  w.Scalar("banyan_iterations_total", "counter", "Engine iterations run.",
           static_cast<double>(m.iterations_total));
  w.Scalar("banyan_decode_steps_total", "counter",
           "Engine steps with decode rows and no prefill.",
           static_cast<double>(m.decode_steps_total));
  w.Scalar("banyan_decode_rows_total", "counter", "Decode rows run in those steps.",
           static_cast<double>(m.decode_rows_total));
  w.Scalar("banyan_decode_step_seconds_total", "counter",
           "Wall time of those steps, host work included, seconds.",
           m.decode_step_seconds_total);
  w.Scalar("banyan_decode_forward_seconds_total", "counter",
           "Of that, in the backend's calls: the step's launch and the wait for its sampled "
           "tokens (host work included), seconds.",
           m.decode_forward_seconds_total);
  w.Scalar("banyan_decode_launch_seconds_total", "counter",
           "Of that, the host work from the previous step's tokens to this step's launch, which "
           "the device waits for, seconds.",
           m.decode_launch_seconds_total);
  w.Scalar("banyan_decode_device_seconds_total", "counter",
           "Device busy time within those steps (0 on the CPU backend), seconds.",
           m.decode_device_seconds_total);
  w.Scalar("banyan_decode_fed_steps_total", "counter",
           "Of those steps, the ones launched before the step before was collected (their rows' "
           "tokens read on the device; no launch seconds).",
           static_cast<double>(m.decode_fed_steps_total));
  w.Scalar("banyan_prefill_steps_total", "counter",
           "Engine steps that computed prompt tokens (decode rows may ride along).",
           static_cast<double>(m.prefill_steps_total));
  w.Scalar("banyan_prefill_tokens_total", "counter",
           "Prompt tokens computed in those steps (prefix-cache hits excluded).",
           static_cast<double>(m.prefill_tokens_total));
  w.Scalar("banyan_prefill_step_seconds_total", "counter",
           "Wall time of those steps, host work included, seconds.",
           m.prefill_step_seconds_total);

  // --- banyan_* histograms
  w.Hist("banyan_time_to_first_token_seconds", "Arrival to first generated token, seconds.",
         m.time_to_first_token_seconds);
  w.Hist("banyan_inter_token_latency_seconds",
         "Time between consecutive generated tokens of a sample, seconds.",
         m.inter_token_latency_seconds);
  w.Hist("banyan_e2e_request_latency_seconds", "Arrival to finish of a request, seconds.",
         m.e2e_request_latency_seconds);

  // --- vllm:* names read by Kubernetes inference routers (same numbers, vLLM semantics)
  w.Scalar("vllm:num_requests_running", "gauge", "Requests running (vLLM name).",
           m.requests_running, true);
  w.Scalar("vllm:num_requests_waiting", "gauge", "Requests waiting (vLLM name).",
           m.requests_waiting, true);
  w.Scalar("vllm:gpu_cache_usage_perc", "gauge",
           "KV cache usage as a fraction in [0, 1]: live / total chunks (vLLM name).", kv_usage,
           true);
  w.Scalar("vllm:kv_cache_usage_perc", "gauge",
           "KV cache usage as a fraction in [0, 1]: live / total chunks (vLLM name).", kv_usage,
           true);
  // vLLM's CacheConfig as labels (the labels routers read: block_size for their prefix-hash
  // block alignment, num_gpu_blocks and kv_cache_size_tokens for capacity), values spelled as
  // vLLM spells them (Python's True / None).
  w.Info("vllm:cache_config_info", "KV cache configuration (vLLM name): chunks are the blocks.",
         absl::StrCat("block_size=\"", m.chunk_size, "\",cache_dtype=\"",
                      m.kv_fp8 ? "fp8" : "auto", "\",enable_prefix_caching=\"True\",kv_cache_size_tokens=\"",
                      int64_t{m.kv_chunks_total} * m.chunk_size, "\",num_gpu_blocks=\"",
                      m.kv_chunks_total, "\",prefix_caching_hash_algo=\"banyan_chain64\","
                      "sliding_window=\"None\""));
  w.Scalar("vllm:prompt_tokens_total", "counter", "Prompt tokens processed (vLLM name).",
           static_cast<double>(m.prompt_tokens_total), true);
  w.Scalar("vllm:generation_tokens_total", "counter", "Tokens generated (vLLM name).",
           static_cast<double>(m.generation_tokens_total), true);
  w.Scalar("vllm:spec_decode_num_drafts_total", "counter",
           "Speculative candidate chains verified (vLLM name).",
           static_cast<double>(m.spec_drafts_total), true);
  w.Scalar("vllm:spec_decode_num_draft_tokens_total", "counter",
           "Speculative candidate tokens verified (vLLM name).",
           static_cast<double>(m.spec_draft_tokens_total), true);
  w.Scalar("vllm:spec_decode_num_accepted_tokens_total", "counter",
           "Speculative candidate tokens accepted (vLLM name).",
           static_cast<double>(m.spec_accepted_tokens_total), true);
  w.PerPosition("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted candidates by "
                "position in their chain (vLLM name).", m.spec_accepted_per_position, true);
  w.Scalar("vllm:num_preemptions_total", "counter", "Preemptions (vLLM name).",
           static_cast<double>(m.preemptions_total), true);
  w.Scalar("vllm:prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache (vLLM name).",
           static_cast<double>(m.prompt_tokens_total), true);
  w.Scalar("vllm:prefix_cache_hits_total", "counter",
           "Prompt tokens found in the prefix cache (vLLM name).",
           static_cast<double>(m.prefix_cache_hit_tokens_total), true);
  w.Hist("vllm:time_to_first_token_seconds", "Time to first token, seconds (vLLM name).",
         m.time_to_first_token_seconds, true);
  w.Hist("vllm:inter_token_latency_seconds", "Inter-token latency, seconds (vLLM name).",
         m.inter_token_latency_seconds, true);
  w.Hist("vllm:time_per_output_token_seconds",
         "Inter-token latency, seconds (older vLLM name of the same histogram).",
         m.inter_token_latency_seconds, true);
  w.Hist("vllm:e2e_request_latency_seconds", "End-to-end request latency, seconds (vLLM name).",
         m.e2e_request_latency_seconds, true);
  return w.Take();
}

}  // namespace banyan::server
