// Command-line options of banyan_serve_bench (bench/serve), a load generator for banyand's
// OpenAI-compatible HTTP API. docs/serve_bench.md describes every flag and metric.
//
// The bench is a self-contained binary (it is carried to machines without the project's
// libraries), so it links neither absl nor spdlog: errors travel as strings, not absl::Status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace banyan::bench::serve {

struct Options {
  // --- target
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;  // empty: no Authorization header
  std::string model;    // empty: the first model /v1/models lists

  // --- workload: the name picks the defaults; each explicit flag overrides its default.
  std::string workload = "shared-prefix";
  std::optional<int> num_prompts;
  std::optional<int> prefix_tokens;  // system prompt / shared prefix / document length
  std::optional<int> suffix_tokens;  // question / private suffix length
  std::optional<int> output_tokens;  // max_tokens of each request
  int min_output_tokens = 0;         // > 0: each request's max_tokens uniform in [this, output]
  std::optional<int> num_groups;     // groups (generated-shared-prefix), prefixes, tenants
  std::optional<int> prompts_per_group;
  std::optional<int> n;              // samples per request (n-way)
  int suffix_pool = 0;               // > 0: private suffixes are picked from this many; 0: fresh
  int min_prefix_tokens = 1024;      // multi-tenant: system prompt lengths, uniform
  int max_prefix_tokens = 4096;
  int min_token = 3;                 // token ids are drawn from [min_token, vocab)
  int vocab = 512;
  uint64_t seed = 0;

  // --- request body
  double temperature = 0.0;
  bool ignore_eos = true;
  // Sampling adjustments, sent by a penalised_share of the requests (evenly spread):
  double frequency_penalty = 0.0;  // 0: none
  int logit_bias_tokens = 0;       // > 0: a logit_bias of +1 on this many token ids
  int min_tokens = 0;              // > 0: vLLM's min_tokens (at most the request's max_tokens)
  // Non-empty: the text of a JSON Schema (--json-schema FILE) that constrains every request's
  // output (vLLM's structured_outputs.json, accepted by banyand's completions API).
  std::string json_schema;
  double penalised_share = 1.0;

  // --- greedy verification (temperature 0 only; one run, not a sweep or the probe)
  bool verify_greedy = false;
  int verify_samples = 64;           // distinct prompts re-sent without streaming, at most

  // --- arrivals
  int concurrency = 0;               // 0: no cap on requests in flight
  double request_rate = 0.0;         // requests/s; 0 (or "inf"): all at once
  double burstiness = 1.0;           // gamma shape of inter-arrival times; 1: Poisson
  std::vector<double> sweep_rates;   // non-empty: run each rate until the SLO breaks
  double sweep_seconds = 0;          // > 0: each sweep step sends rate x this many requests
  double request_timeout_s = 0.0;    // 0: none
  // Every stream connects before any sends its request (all at once, no cap below the load): a
  // storm of connects beside a busy daemon can leave some in the kernel's queues, and then which
  // streams run together depends on the host, not on the server.
  bool connect_first = false;

  // --- SLO and metrics
  double slo_ttft_ms = 2000.0;
  double slo_tpot_ms = 40.0;
  int metrics_interval_ms = 100;     // 0: do not poll /metrics
  int max_failure_reasons = 5;

  // --- output
  std::string output_file;           // empty: stdout; else JSON lines appended
  std::string label;                 // copied into each JSON object

  // --- probe mode (fairness check)
  bool probe = false;
  int idle_connections = 200;
  int trickle_connections = 0;
  int probe_requests = 10;
  int trickle_interval_ms = 100;
  int probe_settle_ms = 1000;        // wait after the connections are open, before probing
  int probe_gap_ms = 100;            // pause between two probe requests
  int probe_prompt_tokens = 16;
  int probe_output_tokens = 8;
};

// Parses argv. Returns an empty string on success, else a message for the user. Sets *help when
// --help was given (and *out is not to be used).
std::string ParseOptions(int argc, char** argv, Options* out, bool* help);

// The --help text.
const char* UsageText();

}  // namespace banyan::bench::serve
