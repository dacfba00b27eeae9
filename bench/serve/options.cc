#include "bench/serve/options.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <string_view>

#include "nlohmann/json.hpp"

namespace banyan::bench::serve {
namespace {

std::string ParseInt(std::string_view name, const std::string& v, int64_t lo, int64_t hi,
                     int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
    return std::string("--") + std::string(name) + ": expected an integer in [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'";
  }
  *out = x;
  return "";
}

// Accepts "inf" as +infinity.
std::string ParseDouble(std::string_view name, const std::string& v, double lo, double* out) {
  if (v == "inf" || v == "Inf" || v == "INF") {
    *out = std::numeric_limits<double>::infinity();
    return "";
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !(x >= lo)) {
    return std::string("--") + std::string(name) + ": expected a number >= " + std::to_string(lo) +
           ", got '" + v + "'";
  }
  *out = x;
  return "";
}

using Setter = std::function<std::string(Options&, const std::string&)>;

Setter Int(int Options::*field, int64_t lo, int64_t hi, std::string_view name) {
  return [=](Options& o, const std::string& v) {
    int64_t x = 0;
    std::string err = ParseInt(name, v, lo, hi, &x);
    if (err.empty()) o.*field = static_cast<int>(x);
    return err;
  };
}

Setter OptInt(std::optional<int> Options::*field, int64_t lo, int64_t hi, std::string_view name) {
  return [=](Options& o, const std::string& v) {
    int64_t x = 0;
    std::string err = ParseInt(name, v, lo, hi, &x);
    if (err.empty()) o.*field = static_cast<int>(x);
    return err;
  };
}

Setter Double(double Options::*field, double lo, std::string_view name) {
  return [=](Options& o, const std::string& v) { return ParseDouble(name, v, lo, &(o.*field)); };
}

Setter String(std::string Options::*field) {
  return [=](Options& o, const std::string& v) {
    o.*field = v;
    return std::string();
  };
}

const std::map<std::string, Setter, std::less<>>& Setters() {
  static const auto* s = new std::map<std::string, Setter, std::less<>>{
      {"host", String(&Options::host)},
      {"port", Int(&Options::port, 1, 65535, "port")},
      {"api-key", String(&Options::api_key)},
      {"model", String(&Options::model)},
      {"workload", String(&Options::workload)},
      {"num-prompts", OptInt(&Options::num_prompts, 1, 1 << 24, "num-prompts")},
      {"prefix-tokens", OptInt(&Options::prefix_tokens, 0, 1 << 24, "prefix-tokens")},
      {"suffix-tokens", OptInt(&Options::suffix_tokens, 0, 1 << 24, "suffix-tokens")},
      {"output-tokens", OptInt(&Options::output_tokens, 1, 1 << 24, "output-tokens")},
      {"min-output-tokens", Int(&Options::min_output_tokens, 1, 1 << 24, "min-output-tokens")},
      {"num-groups", OptInt(&Options::num_groups, 1, 1 << 20, "num-groups")},
      {"prompts-per-group", OptInt(&Options::prompts_per_group, 1, 1 << 20, "prompts-per-group")},
      {"n", OptInt(&Options::n, 1, 1024, "n")},
      {"suffix-pool", Int(&Options::suffix_pool, 0, 1 << 24, "suffix-pool")},
      {"min-prefix-tokens", Int(&Options::min_prefix_tokens, 1, 1 << 24, "min-prefix-tokens")},
      {"max-prefix-tokens", Int(&Options::max_prefix_tokens, 1, 1 << 24, "max-prefix-tokens")},
      {"min-token", Int(&Options::min_token, 0, 1 << 30, "min-token")},
      {"vocab", Int(&Options::vocab, 1, 1 << 30, "vocab")},
      {"seed",
       [](Options& o, const std::string& v) {
         int64_t x = 0;
         std::string err = ParseInt("seed", v, 0, std::numeric_limits<int64_t>::max(), &x);
         if (err.empty()) o.seed = static_cast<uint64_t>(x);
         return err;
       }},
      {"temperature", Double(&Options::temperature, 0.0, "temperature")},
      {"frequency-penalty", Double(&Options::frequency_penalty, -2.0, "frequency-penalty")},
      {"logit-bias-tokens", Int(&Options::logit_bias_tokens, 0, 1024, "logit-bias-tokens")},
      {"min-tokens", Int(&Options::min_tokens, 0, 1 << 24, "min-tokens")},
      {"json-schema",
       [](Options& o, const std::string& v) {
         std::ifstream in(v, std::ios::binary);
         if (!in) return "--json-schema: cannot read " + v;
         std::ostringstream text;
         text << in.rdbuf();
         if (!nlohmann::json::accept(text.str())) return "--json-schema: " + v + " is not JSON";
         o.json_schema = text.str();
         return std::string();
       }},
      {"penalised-share", Double(&Options::penalised_share, 0.0, "penalised-share")},
      {"verify-samples", Int(&Options::verify_samples, 0, 1 << 24, "verify-samples")},
      {"concurrency", Int(&Options::concurrency, 0, 1 << 24, "concurrency")},
      {"request-rate", Double(&Options::request_rate, 0.0, "request-rate")},
      {"burstiness", Double(&Options::burstiness, 1e-6, "burstiness")},
      {"sweep-rates",
       [](Options& o, const std::string& v) {
         o.sweep_rates.clear();
         size_t start = 0;
         while (start <= v.size()) {
           size_t comma = v.find(',', start);
           if (comma == std::string::npos) comma = v.size();
           double r = 0;
           std::string err = ParseDouble("sweep-rates", v.substr(start, comma - start), 1e-9, &r);
           if (!err.empty()) return err;
           o.sweep_rates.push_back(r);
           start = comma + 1;
         }
         return std::string();
       }},
      {"sweep-seconds", Double(&Options::sweep_seconds, 0.0, "sweep-seconds")},
      {"request-timeout-s", Double(&Options::request_timeout_s, 0.0, "request-timeout-s")},
      {"slo-ttft-ms", Double(&Options::slo_ttft_ms, 0.0, "slo-ttft-ms")},
      {"slo-tpot-ms", Double(&Options::slo_tpot_ms, 0.0, "slo-tpot-ms")},
      {"metrics-interval-ms", Int(&Options::metrics_interval_ms, 0, 60000, "metrics-interval-ms")},
      {"max-failure-reasons", Int(&Options::max_failure_reasons, 0, 1000, "max-failure-reasons")},
      {"output", String(&Options::output_file)},
      {"label", String(&Options::label)},
      {"idle-connections", Int(&Options::idle_connections, 0, 1 << 20, "idle-connections")},
      {"trickle-connections",
       Int(&Options::trickle_connections, 0, 1 << 20, "trickle-connections")},
      {"probe-requests", Int(&Options::probe_requests, 1, 1 << 20, "probe-requests")},
      {"trickle-interval-ms", Int(&Options::trickle_interval_ms, 1, 60000, "trickle-interval-ms")},
      {"probe-settle-ms", Int(&Options::probe_settle_ms, 0, 3600000, "probe-settle-ms")},
      {"probe-gap-ms", Int(&Options::probe_gap_ms, 0, 3600000, "probe-gap-ms")},
      {"probe-prompt-tokens", Int(&Options::probe_prompt_tokens, 1, 1 << 20, "probe-prompt-tokens")},
      {"probe-output-tokens", Int(&Options::probe_output_tokens, 1, 1 << 20, "probe-output-tokens")},
  };
  return *s;
}

}  // namespace

std::string ParseOptions(int argc, char** argv, Options* out, bool* help) {
  *help = false;
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return "";
    }
    if (arg.rfind("--", 0) != 0) return "unexpected argument '" + arg + "' (flags start with --)";
    std::string key = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has_value = true;
    }
    if (key == "probe" || key == "no-ignore-eos" || key == "verify-greedy" ||
        key == "connect-first") {
      if (has_value) return "--" + key + " takes no value";
      if (key == "probe") o.probe = true;
      if (key == "no-ignore-eos") o.ignore_eos = false;
      if (key == "verify-greedy") o.verify_greedy = true;
      if (key == "connect-first") o.connect_first = true;
      continue;
    }
    auto it = Setters().find(key);
    if (it == Setters().end()) return "unknown flag --" + key + " (see --help)";
    if (!has_value) {
      if (i + 1 >= argc) return "--" + key + " needs a value";
      value = argv[++i];
    }
    if (std::string err = it->second(o, value); !err.empty()) return err;
  }
  if (o.min_token >= o.vocab) {
    return "--min-token (" + std::to_string(o.min_token) + ") must be below --vocab (" +
           std::to_string(o.vocab) + ")";
  }
  if (o.min_prefix_tokens > o.max_prefix_tokens) {
    return "--min-prefix-tokens must not exceed --max-prefix-tokens";
  }
  if (!(o.frequency_penalty <= 2.0)) {
    return "--frequency-penalty must lie in [-2, 2] (the API's range)";
  }
  if (!(o.penalised_share <= 1.0)) return "--penalised-share must lie in [0, 1]";
  if (o.logit_bias_tokens > o.vocab - o.min_token) {
    return "--logit-bias-tokens must not exceed the token ids in [--min-token, --vocab)";
  }
  if (o.verify_greedy && o.temperature != 0.0) {
    return "--verify-greedy compares texts that only greedy decoding makes reproducible: it "
           "needs --temperature 0, got " + std::to_string(o.temperature);
  }
  if (o.verify_greedy && (o.probe || !o.sweep_rates.empty())) {
    return "--verify-greedy checks one load run: it does not combine with --probe or "
           "--sweep-rates";
  }
  if (std::isinf(o.request_rate)) o.request_rate = 0.0;
  if (o.connect_first &&
      (o.probe || !o.sweep_rates.empty() || o.request_rate > 0 ||
       (o.concurrency > 0 && o.num_prompts && o.concurrency < *o.num_prompts))) {
    return "--connect-first holds every request until all are connected: it needs one run of "
           "requests sent all at once (no --request-rate, --sweep-rates or --probe, and "
           "--concurrency 0 or at least --num-prompts)";
  }
  *out = std::move(o);
  return "";
}

const char* UsageText() {
  return R"(banyan_serve_bench: a serving load generator for banyand's POST /v1/completions (SSE).

  banyan_serve_bench [--host H] [--port P] [--workload W] [workload flags] [arrival flags]
  banyan_serve_bench --probe [--idle-connections N] [--trickle-connections M] [--probe-requests K]

Target:     --host 127.0.0.1  --port 8000  --api-key KEY  --model NAME (default: from /v1/models)
Workloads:  --workload generated-shared-prefix | prefix-repetition | multi-tenant |
                       long-document | n-way | no-sharing | shared-prefix
            --num-prompts K --prefix-tokens P --suffix-tokens S --output-tokens O
            --min-output-tokens M: each request's max_tokens uniform in [M, O] (staggered ends)
            --num-groups G --prompts-per-group Q --n N
            --suffix-pool K: each private suffix is one of K drawn once, so prompts repeat
            --min-prefix-tokens/--max-prefix-tokens (multi-tenant system prompts, 1024..4096)
            --vocab V (512) --min-token T (3): token ids are drawn from [T, V)  --seed S
Requests:   --temperature 0  --no-ignore-eos  --request-timeout-s 0 (none)
            --frequency-penalty X (0: none), --logit-bias-tokens K (0: none; +1 on K ids),
            --min-tokens M (0: none): sent by --penalised-share F (1) of the requests
            --json-schema FILE: every request's output constrained by this JSON Schema
              (structured_outputs.json; a model with a real tokenizer for meaningful masks)
Verify:     --verify-greedy (temperature 0 only): requests with the same prompt must stream
            the same text, and up to --verify-samples K (64) distinct prompts are sent again
            alone without streaming after the load, their text compared with the streamed
            one; the report gets "verify", and any mismatch exits 1
Arrivals:   --concurrency N (cap on requests in flight; 0: none)
            --request-rate R (requests/s, Poisson; inf or 0: all at once) --burstiness G (1)
            --connect-first: every request's connection is made before any request is sent
              (all at once only), so the host's connection queues do not stagger the streams
            --sweep-rates r1,r2,...: run each rate in turn, stop after the first that breaks
            the SLO (p99 TTFT or p99 TPOT above it); reports the highest that held
            --sweep-seconds S: each step sends rate x S requests (instead of --num-prompts),
            so that every rate reaches its steady state for about S seconds
SLO:        --slo-ttft-ms 2000 --slo-tpot-ms 40
Metrics:    --metrics-interval-ms 100 (poll GET /metrics for peak KV chunks; 0: off)
Output:     --output FILE (JSON lines appended; default stdout) --label TEXT
            a readable summary goes to stderr
Probe:      --probe --idle-connections 200 --trickle-connections 0 --probe-requests 10
            --trickle-interval-ms 100 --probe-settle-ms 1000 --probe-gap-ms 100
            --probe-prompt-tokens 16 --probe-output-tokens 8
See docs/serve_bench.md for the workloads' defaults and the metrics' definitions.
)";
}

}  // namespace banyan::bench::serve
