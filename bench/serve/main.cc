// banyan_serve_bench: a serving load generator for banyand (see docs/serve_bench.md).
// Exit status: 0 when every request of the run(s) completed (a sweep: always 0 once it ran),
// 1 when requests failed, --verify-greedy found a wrong text or the server could not be reached,
// 2 on a usage error.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "bench/serve/client.h"
#include "bench/serve/options.h"
#include "bench/serve/probe.h"
#include "bench/serve/runner.h"
#include "bench/serve/stats.h"
#include "bench/serve/verify.h"
#include "bench/serve/workload.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"

namespace banyan::bench::serve {
namespace {

namespace net = boost::asio;

// Thousands of streams need thousands of descriptors: take the hard limit.
void RaiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) std::perror("setrlimit(RLIMIT_NOFILE)");
  }
}

HttpReply Fetch(const Target& t, const std::string& path) {
  net::io_context ioc;
  std::string method = "GET", p = path, body;
  auto fut = net::co_spawn(ioc, SimpleRequest(t, method, p, body), net::use_future);
  ioc.run();
  return fut.get();
}

// Fills t->model from /v1/models unless given. Returns the served context length (0: unknown).
int64_t DiscoverModel(Target* t, std::string* error) {
  HttpReply r = Fetch(*t, "/v1/models");
  if (r.status != 200) {
    *error = r.status == 0 ? r.error : "GET /v1/models: HTTP " + std::to_string(r.status);
    return 0;
  }
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) {
    return 0;
  }
  for (const Json& m : j["data"]) {
    if (t->model.empty() || m.value("id", "") == t->model) {
      if (t->model.empty()) t->model = m.value("id", "");
      return m.value("max_model_len", int64_t{0});
    }
  }
  return 0;
}

void Emit(const Options& o, const Json& j) {
  const std::string line = j.dump() + "\n";
  if (o.output_file.empty()) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream f(o.output_file, std::ios::app);
  f << line;
  if (!f) std::fprintf(stderr, "cannot append to %s\n", o.output_file.c_str());
}

std::string Build(const Options& o, const Target& t, Workload* w, std::vector<std::string>* bodies) {
  if (std::string err = BuildWorkload(o, w); !err.empty()) return err;
  bodies->clear();
  bodies->reserve(w->requests.size());
  for (const RequestSpec& r : w->requests) bodies->push_back(CompletionBody(t, o, r, true));
  return "";
}

int Main(int argc, char** argv) {
  Options o;
  bool help = false;
  if (std::string err = ParseOptions(argc, argv, &o, &help); !err.empty()) {
    std::fprintf(stderr, "banyan_serve_bench: %s\n", err.c_str());
    return 2;
  }
  if (help) {
    std::fputs(UsageText(), stdout);
    return 0;
  }
  RaiseFileLimit();
  std::signal(SIGPIPE, SIG_IGN);
  Target t;
  if (std::string err = ResolveTarget(o.host, o.port, &t); !err.empty()) {
    std::fprintf(stderr, "banyan_serve_bench: %s\n", err.c_str());
    return 1;
  }
  t.api_key = o.api_key;
  t.model = o.model;
  std::string err;
  const int64_t max_model_len = DiscoverModel(&t, &err);
  if (!err.empty()) {
    std::fprintf(stderr, "banyan_serve_bench: server at %s: %s\n", t.host_header.c_str(),
                 err.c_str());
    return 1;
  }
  t.timeout_s = o.request_timeout_s;

  if (o.probe) {
    Json report = RunProbe(o, t);
    Emit(o, report);
    std::fputs(ReadableProbeSummary(report).c_str(), stderr);
    return report["failures"].empty() ? 0 : 1;
  }

  Workload w;
  std::vector<std::string> bodies;
  if (err = Build(o, t, &w, &bodies); !err.empty()) {
    std::fprintf(stderr, "banyan_serve_bench: %s\n", err.c_str());
    return 2;
  }
  size_t longest = 0;
  for (const RequestSpec& r : w.requests) {
    longest = std::max(longest, r.prompt.size() + static_cast<size_t>(r.output_tokens));
  }
  if (max_model_len > 0 && static_cast<int64_t>(longest) > max_model_len) {
    std::fprintf(stderr,
                 "banyan_serve_bench: warning: prompts + output reach %zu tokens, beyond the "
                 "model's %lld: expect failures\n",
                 longest, static_cast<long long>(max_model_len));
  }

  if (o.sweep_rates.empty()) {
    RunConfig rc{o.request_rate, o.burstiness, o.concurrency};
    std::vector<RequestResult> results;
    Json report = RunOnce(o, t, w, bodies, rc, o.verify_greedy ? &results : nullptr);
    bool ok = report["failed"].get<int64_t>() == 0;
    if (o.verify_greedy) {
      Json v = VerifyGreedy(o, t, w, results);
      ok = ok && v["mismatches"].get<int64_t>() == 0 && v["errors"].get<int64_t>() == 0;
      report["verify"] = std::move(v);
    }
    Emit(o, report);
    std::fputs(ReadableSummary(report).c_str(), stderr);
    if (o.verify_greedy) std::fputs(ReadableVerifySummary(report["verify"]).c_str(), stderr);
    return ok ? 0 : 1;
  }

  // Each rate runs fresh prompts (the seed advances), so a later rate does not find the
  // earlier rates' prompts in the prefix cache.
  Json sweep = {{"type", "sweep"}, {"workload", w.name}, {"rates", Json::array()}};
  if (!o.label.empty()) sweep["label"] = o.label;
  Json best = nullptr, broke = nullptr;
  Options step = o;
  for (size_t i = 0; i < o.sweep_rates.size(); ++i) {
    step.seed = o.seed + i;
    if (o.sweep_seconds > 0) {
      // As many requests as the rate sends in sweep_seconds: a fixed count would be over before
      // a high rate filled the server (its requests outlive the arrivals).
      step.num_prompts =
          std::max(1, static_cast<int>(std::ceil(o.sweep_rates[i] * o.sweep_seconds)));
      Build(step, t, &w, &bodies);
    } else if (i > 0) {
      Build(step, t, &w, &bodies);
    }
    RunConfig rc{o.sweep_rates[i], o.burstiness, o.concurrency};
    Json report = RunOnce(step, t, w, bodies, rc);
    const bool ok = MeetsSlo(report);
    report["sweep_step"] = i;
    report["meets_slo"] = ok;
    Emit(o, report);
    std::fputs(ReadableSummary(report).c_str(), stderr);
    sweep["rates"].push_back({{"rate", o.sweep_rates[i]},
                              {"meets_slo", ok},
                              {"p99_ttft_ms", report["ttft_ms"]["p99"]},
                              {"p99_tpot_ms", report["tpot_ms"]["p99"]},
                              {"failed", report["failed"]},
                              {"goodput_rps", report["slo"]["goodput_rps"]}});
    if (!ok) {
      broke = o.sweep_rates[i];
      break;
    }
    best = o.sweep_rates[i];
  }
  sweep["max_sustainable_rate"] = best;
  sweep["first_failing_rate"] = broke;
  sweep["slo"] = {{"ttft_ms", o.slo_ttft_ms}, {"tpot_ms", o.slo_tpot_ms}};
  Emit(o, sweep);
  std::fprintf(stderr, "==== sweep: max sustainable rate %s req/s (first failing: %s) ====\n",
               best.dump().c_str(), broke.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace banyan::bench::serve

int main(int argc, char** argv) { return banyan::bench::serve::Main(argc, argv); }
