#include "bench/serve/runner.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string_view>
#include <utility>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace banyan::bench::serve {
namespace {

namespace net = boost::asio;
using boost::system::error_code;

// Arrival offsets from the run's start, seconds; all zero when rate is 0.
std::vector<double> ArrivalOffsets(size_t count, const RunConfig& rc, uint64_t seed) {
  std::vector<double> at(count, 0.0);
  if (rc.request_rate <= 0) return at;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  // Gamma(shape k, scale theta) has mean k * theta: theta = 1 / (rate * k) keeps the mean gap
  // at 1 / rate whatever the burstiness.
  std::gamma_distribution<double> gap(rc.burstiness, 1.0 / (rc.request_rate * rc.burstiness));
  double t = 0;
  for (size_t i = 0; i < count; ++i) {
    at[i] = t;
    t += gap(rng);
  }
  return at;
}

int64_t CeilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

class Run {
 public:
  Run(const Options& o, const Target& t, const Workload& w, const std::vector<std::string>& bodies,
      const RunConfig& rc)
      : o_(o),
        t_(t),
        bodies_(bodies),
        rc_(rc),
        results_(w.requests.size()),
        in_flight_flag_(w.requests.size(), 0),
        slot_timer_(ioc_),
        poll_timer_(ioc_) {
    for (size_t i = 0; i < results_.size(); ++i) {
      results_[i].n = w.requests[i].n;
      results_[i].prompt_tokens = static_cast<int64_t>(w.requests[i].prompt.size());
      results_[i].max_tokens = w.requests[i].output_tokens;
      results_[i].itl_s.reserve(static_cast<size_t>(w.requests[i].output_tokens));
      results_[i].keep_text = o.verify_greedy;
    }
    metrics_target_ = t;
    metrics_target_.timeout_s = 10;
  }

  void Go() {
    offsets_ = ArrivalOffsets(results_.size(), rc_, o_.seed);
    // The high-water marks are read outside the timed run, so the two scrapes cost it nothing.
    if (o_.metrics_interval_ms > 0) RunAlone(ReadPeaks(&kv_.daemon_before));
    // A run() that returned leaves the context stopped: without restart() the load would only
    // run inside the second scrape's RunAlone, and that scrape would read the marks first.
    ioc_.restart();
    gate_.reset();
    if (o_.connect_first) {
      // The streams dispatched at once (a workload may make more requests than --num-prompts
      // checked against --concurrency): any later one passes the open gate.
      const size_t at_once = rc_.concurrency > 0
                                 ? std::min(results_.size(), static_cast<size_t>(rc_.concurrency))
                                 : results_.size();
      gate_ = std::make_unique<ConnectGate>(ioc_.get_executor(), at_once);
    }
    t0_ = Clock::now();
    end_ = t0_;
    net::co_spawn(ioc_, Dispatch(), net::detached);
    if (o_.metrics_interval_ms > 0) net::co_spawn(ioc_, Poll(), net::detached);
    ioc_.run();
    if (o_.metrics_interval_ms > 0) RunAlone(ReadPeaks(&kv_.daemon_after));
  }

  double duration_s() const { return std::chrono::duration<double>(end_ - t0_).count(); }
  std::vector<RequestResult>& results() { return results_; }
  const KvObservation& kv() const { return kv_; }
  int max_in_flight() const { return max_in_flight_; }

 private:
  net::awaitable<void> Dispatch() {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer timer(ex);
    error_code ec;
    for (size_t i = 0; i < results_.size(); ++i) {
      if (offsets_[i] > 0) {
        timer.expires_at(t0_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(offsets_[i])));
        co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      while (rc_.concurrency > 0 && in_flight_ >= rc_.concurrency) {
        slot_timer_.expires_at(Clock::time_point::max());
        co_await slot_timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      in_flight_flag_[i] = 1;
      net::co_spawn(ex, One(i), net::detached);
    }
  }

  net::awaitable<void> One(size_t i) {
    const Target& t = t_;
    const std::string& body = bodies_[i];
    const Clock::time_point t0 = t0_;
    RequestResult* r = &results_[i];
    co_await RunStreaming(t, body, t0, r, gate_.get());
    --in_flight_;
    in_flight_flag_[i] = 0;
    if (++finished_ == results_.size()) {
      end_ = Clock::now();
      poll_timer_.cancel();
    }
    slot_timer_.cancel();
  }

  net::awaitable<void> Poll() {
    const auto interval = std::chrono::milliseconds(o_.metrics_interval_ms);
    Clock::time_point next = Clock::now();
    error_code ec;
    while (finished_ < results_.size()) {
      std::string method = "GET", path = "/metrics", body;
      HttpReply reply = co_await SimpleRequest(metrics_target_, method, path, body);
      KvSample s;
      if (reply.status == 200 && ParseKvMetrics(reply.body, &s)) Record(s);
      next += interval;
      if (finished_ >= results_.size()) break;
      poll_timer_.expires_at(std::max(next, Clock::now()));
      co_await poll_timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }

  void RunAlone(net::awaitable<void> work) {
    ioc_.restart();
    net::co_spawn(ioc_, std::move(work), net::detached);
    ioc_.run();
  }

  // One scrape; also fills the pool's size when no poll has (a load shorter than a poll).
  net::awaitable<void> ReadPeaks(KvPeaks* out) {
    std::string method = "GET", path = "/metrics", body;
    HttpReply reply = co_await SimpleRequest(metrics_target_, method, path, body);
    KvSample s;
    if (reply.status != 200 || !ParseKvMetrics(reply.body, &s)) co_return;
    out->chunks_live = s.live_peak;
    out->chunks_saved_by_sharing = s.saved_by_sharing_peak;
    if (kv_.chunk_size == 0) kv_.chunk_size = s.chunk_size;
    if (kv_.chunks_total == 0) kv_.chunks_total = s.total;
  }

  void Record(const KvSample& s) {
    ++kv_.polls;
    kv_.chunk_size = s.chunk_size;
    kv_.chunks_total = s.total;
    kv_.peak_live = std::max(kv_.peak_live, s.live);
    kv_.peak_used = std::max(kv_.peak_used, s.total - s.free);
    int64_t unshared = 0;
    for (size_t i = 0; i < results_.size(); ++i) {
      if (!in_flight_flag_[i]) continue;
      const RequestResult& r = results_[i];
      const int64_t per_choice = r.text_events / std::max(1, r.n);
      unshared += r.n * CeilDiv(r.prompt_tokens + per_choice, s.chunk_size);
    }
    kv_.peak_unshared_in_flight = std::max(kv_.peak_unshared_in_flight, unshared);
  }

  const Options& o_;
  const Target& t_;
  Target metrics_target_;
  const std::vector<std::string>& bodies_;
  const RunConfig rc_;
  net::io_context ioc_{1};
  std::vector<RequestResult> results_;
  std::vector<char> in_flight_flag_;  // 1 while request i is in flight
  std::vector<double> offsets_;
  net::steady_timer slot_timer_;  // cancelled when a request ends: wakes a waiting dispatcher
  net::steady_timer poll_timer_;  // cancelled when the last request ends
  std::unique_ptr<ConnectGate> gate_;  // --connect-first: the barrier of this run's streams
  Clock::time_point t0_, end_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  size_t finished_ = 0;
  KvObservation kv_;
};

}  // namespace

bool ParseKvMetrics(const std::string& page, KvSample* out) {
  KvSample s;
  int found = 0;
  size_t pos = 0;
  while (pos < page.size()) {
    size_t eol = page.find('\n', pos);
    if (eol == std::string::npos) eol = page.size();
    std::string_view line(page.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line.front() == '#') continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, sp);
    int64_t* field = name == "banyan_kv_chunk_size_tokens" ? &s.chunk_size
                     : name == "banyan_kv_chunks_total"    ? &s.total
                     : name == "banyan_kv_chunks_free"     ? &s.free
                     : name == "banyan_kv_chunks_live"     ? &s.live
                                                           : nullptr;
    const bool peak = field == nullptr;
    if (peak) {
      field = name == "banyan_kv_chunks_live_peak"               ? &s.live_peak
              : name == "banyan_kv_chunks_saved_by_sharing_peak" ? &s.saved_by_sharing_peak
                                                                 : nullptr;
    }
    if (field == nullptr) continue;
    const std::string value(line.substr(sp + 1));
    *field = static_cast<int64_t>(std::strtod(value.c_str(), nullptr));
    if (!peak) ++found;
  }
  if (found < 4) return false;
  *out = s;
  return true;
}

Json RunOnce(const Options& o, const Target& t, const Workload& w,
             const std::vector<std::string>& bodies, const RunConfig& rc,
             std::vector<RequestResult>* results_out) {
  Run run(o, t, w, bodies, rc);
  run.Go();
  Json report =
      RunReport(o, w, rc, run.results(), run.duration_s(), run.kv(), run.max_in_flight());
  if (results_out != nullptr) *results_out = std::move(run.results());
  return report;
}

}  // namespace banyan::bench::serve
