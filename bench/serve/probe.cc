#include "bench/serve/probe.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/read.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"

namespace banyan::bench::serve {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

class Probe {
 public:
  Probe(const Options& o, const Target& t) : o_(o), t_(t), rng_(o.seed) {}

  Json Go() {
    net::co_spawn(ioc_, Main(), net::detached);
    ioc_.run();
    return report_;
  }

 private:
  std::string SmallBody() {
    RequestSpec spec;
    std::uniform_int_distribution<int32_t> id(o_.min_token, o_.vocab - 1);
    for (int i = 0; i < o_.probe_prompt_tokens; ++i) spec.prompt.push_back(id(rng_));
    spec.output_tokens = o_.probe_output_tokens;
    return CompletionBody(t_, o_, spec, /*stream=*/false);
  }

  // The whole bytes of a valid completions request, for trickling.
  std::string TrickleRequest() {
    const std::string body = SmallBody();
    std::string r = "POST /v1/completions HTTP/1.1\r\nHost: " + t_.host_header +
                    "\r\nContent-Type: application/json\r\n";
    if (!t_.api_key.empty()) r += "Authorization: Bearer " + t_.api_key + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    return r;
  }

  // `count` sequential small requests; latencies in ms, failures appended to failures_.
  net::awaitable<std::vector<double>> Sequential(int count) {
    std::vector<double> ms;
    net::steady_timer gap(co_await net::this_coro::executor);
    error_code ec;
    for (int i = 0; i < count; ++i) {
      if (i > 0 && o_.probe_gap_ms > 0) {
        gap.expires_after(std::chrono::milliseconds(o_.probe_gap_ms));
        co_await gap.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      std::string method = "POST", path = "/v1/completions", body = SmallBody();
      HttpReply reply = co_await SimpleRequest(t_, method, path, body);
      if (reply.status != 200) {
        failures_.push_back(reply.status == 0 ? reply.error
                                              : "HTTP " + std::to_string(reply.status) + ": " +
                                                    reply.body.substr(0, 200));
        continue;
      }
      ms.push_back(reply.latency_s * 1e3);
    }
    co_return ms;
  }

  net::awaitable<void> Idle(std::shared_ptr<tcp::socket> s) {
    error_code ec;
    const tcp::endpoint ep = t_.endpoint;
    co_await s->async_connect(ep, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      ++connect_failures_;
      co_return;
    }
    ++idle_established_;
    char byte;
    auto buf = net::buffer(&byte, 1);
    co_await s->async_read_some(buf, net::redirect_error(net::use_awaitable, ec));
    if (!stopping_) ++idle_closed_;
  }

  net::awaitable<void> Trickle(std::shared_ptr<tcp::socket> s) {
    error_code ec;
    const tcp::endpoint ep = t_.endpoint;
    co_await s->async_connect(ep, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      ++connect_failures_;
      co_return;
    }
    ++trickle_established_;
    const std::string bytes = TrickleRequest();
    net::steady_timer timer(s->get_executor());
    for (size_t i = 0; i < bytes.size() && !stopping_; ++i) {
      auto buf = net::buffer(bytes.data() + i, 1);
      co_await net::async_write(*s, buf, net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      ++trickle_bytes_;
      timer.expires_after(std::chrono::milliseconds(o_.trickle_interval_ms));
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    if (!stopping_ && ec) ++trickle_closed_;
  }

  net::awaitable<void> Main() {
    auto ex = co_await net::this_coro::executor;
    const int k = o_.probe_requests;
    std::vector<double> baseline = co_await Sequential(k);

    std::vector<std::shared_ptr<tcp::socket>> sockets;
    for (int i = 0; i < o_.idle_connections + o_.trickle_connections; ++i) {
      auto s = std::make_shared<tcp::socket>(ex);
      sockets.push_back(s);
      if (i < o_.idle_connections) {
        net::co_spawn(ex, Idle(s), net::detached);
      } else {
        net::co_spawn(ex, Trickle(s), net::detached);
      }
    }
    net::steady_timer timer(ex);
    error_code ec;
    const Clock::time_point open_start = Clock::now();
    const int want = o_.idle_connections + o_.trickle_connections;
    while (idle_established_ + trickle_established_ + connect_failures_ < want &&
           Clock::now() - open_start < std::chrono::seconds(30)) {
      timer.expires_after(std::chrono::milliseconds(10));
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    const double open_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - open_start).count();
    timer.expires_after(std::chrono::milliseconds(o_.probe_settle_ms));
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));

    std::vector<double> probed = co_await Sequential(k);
    const int idle_closed = idle_closed_, trickle_closed = trickle_closed_;
    stopping_ = true;
    for (auto& s : sockets) s->close(ec);
    Report(baseline, probed, open_ms, idle_closed, trickle_closed);
  }

  void Report(std::vector<double> baseline, const std::vector<double>& probed, double open_ms,
              int idle_closed, int trickle_closed) {
    const Quantiles b = Summarize(baseline), p = Summarize(probed);
    Json j;
    j["type"] = "probe";
    if (!o_.label.empty()) j["label"] = o_.label;
    j["idle_connections"] = o_.idle_connections;
    j["trickle_connections"] = o_.trickle_connections;
    j["trickle_interval_ms"] = o_.trickle_interval_ms;
    j["settle_ms"] = o_.probe_settle_ms;
    j["gap_ms"] = o_.probe_gap_ms;
    j["idle_established"] = idle_established_;
    j["trickle_established"] = trickle_established_;
    j["connect_failures"] = connect_failures_;
    j["open_ms"] = open_ms;
    j["idle_closed_by_server"] = idle_closed;
    j["trickle_closed_by_server"] = trickle_closed;
    j["trickle_bytes_sent"] = trickle_bytes_;
    j["probe_prompt_tokens"] = o_.probe_prompt_tokens;
    j["probe_output_tokens"] = o_.probe_output_tokens;
    j["baseline_ms"] = baseline;
    j["probe_ms"] = probed;
    j["baseline_p50_ms"] = b.p50;
    j["baseline_max_ms"] = b.max;
    j["probe_p50_ms"] = p.p50;
    j["probe_max_ms"] = p.max;
    j["max_delay_ms"] = p.count > 0 && b.count > 0 ? Json(p.max - b.p50) : Json(nullptr);
    j["failures"] = failures_;
    report_ = std::move(j);
  }

  const Options& o_;
  const Target& t_;
  std::mt19937_64 rng_;
  net::io_context ioc_{1};
  int idle_established_ = 0, trickle_established_ = 0, connect_failures_ = 0;
  int idle_closed_ = 0, trickle_closed_ = 0;
  int64_t trickle_bytes_ = 0;
  bool stopping_ = false;
  std::vector<std::string> failures_;
  Json report_;
};

}  // namespace

Json RunProbe(const Options& o, const Target& t) { return Probe(o, t).Go(); }

std::string ReadableProbeSummary(const Json& r) {
  char buf[1024];
  auto num = [](const Json& x) { return x.is_number() ? x.get<double>() : -1.0; };
  std::snprintf(buf, sizeof(buf),
                "==== probe: %d idle + %d trickle connections (%d + %d open in %.0f ms) ====\n"
                "baseline ms: p50 %.2f max %.2f   probe ms: p50 %.2f max %.2f   "
                "max delay %.2f ms\nclosed by the server: %d idle, %d trickle; "
                "%lld trickled bytes; %zu failures\n",
                r["idle_connections"].get<int>(), r["trickle_connections"].get<int>(),
                r["idle_established"].get<int>(), r["trickle_established"].get<int>(),
                r["open_ms"].get<double>(), num(r["baseline_p50_ms"]), num(r["baseline_max_ms"]),
                num(r["probe_p50_ms"]), num(r["probe_max_ms"]), num(r["max_delay_ms"]),
                r["idle_closed_by_server"].get<int>(), r["trickle_closed_by_server"].get<int>(),
                static_cast<long long>(r["trickle_bytes_sent"].get<int64_t>()),
                r["failures"].size());
  std::string out = buf;
  for (const Json& f : r["failures"]) out += "  failure: " + f.get<std::string>() + "\n";
  return out;
}

}  // namespace banyan::bench::serve
