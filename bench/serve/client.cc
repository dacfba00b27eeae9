#include "bench/serve/client.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "bench/serve/sse.h"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace banyan::bench::serve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void SetHeaders(const Target& t, bhttp::request<bhttp::string_body>* req) {
  req->set(bhttp::field::host, t.host_header);
  req->set(bhttp::field::user_agent, "banyan_serve_bench");
  req->set(bhttp::field::connection, "close");
  if (!t.api_key.empty()) req->set(bhttp::field::authorization, "Bearer " + t.api_key);
}

void ArmTimeout(const Target& t, beast::tcp_stream* s) {
  if (t.timeout_s > 0) {
    s->expires_after(std::chrono::microseconds(static_cast<int64_t>(t.timeout_s * 1e6)));
  }
}

std::string Truncate(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

// Folds one SSE event into *r. Returns false when the stream reported an error.
struct StreamState {
  std::vector<std::optional<double>> last_text_s;  // per choice: arrival of its last text event
  bool done_marker = false;                        // `data: [DONE]` seen
};

bool FoldEvent(const std::string& data, double now_s, StreamState* st, RequestResult* r) {
  if (data == "[DONE]") {
    st->done_marker = true;
    r->e2e_s = now_s - r->start_s;
    return true;
  }
  Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    r->error = "malformed event: " + Truncate(data, 120);
    return false;
  }
  if (auto e = j.find("error"); e != j.end()) {
    const Json* msg = e->is_object() && e->contains("message") ? &(*e)["message"] : &*e;
    r->error = "error event: " + Truncate(msg->is_string() ? msg->get<std::string>() : msg->dump(), 200);
    return false;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    r->usage_seen = true;
    r->output_tokens = u->value("completion_tokens", int64_t{0});
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
      r->cached_tokens = d->value("cached_tokens", int64_t{-1});
    }
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return true;
  for (const Json& c : *choices) {
    auto text = c.find("text");
    if (text == c.end() || !text->is_string() || text->get_ref<const std::string&>().empty()) {
      continue;
    }
    const size_t idx = c.value("index", size_t{0});
    if (idx >= st->last_text_s.size()) st->last_text_s.resize(idx + 1);
    if (r->ttft_s < 0) r->ttft_s = now_s - r->start_s;
    if (st->last_text_s[idx]) r->itl_s.push_back(now_s - *st->last_text_s[idx]);
    st->last_text_s[idx] = now_s;
    ++r->text_events;
    if (r->keep_text) {
      if (idx >= r->text.size()) r->text.resize(idx + 1);
      r->text[idx] += text->get_ref<const std::string&>();
    }
  }
  return true;
}

}  // namespace

std::string ResolveTarget(const std::string& host, int port, Target* out) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  error_code ec;
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) return "cannot resolve '" + host + "': " + ec.message();
  out->endpoint = results.begin()->endpoint();
  const bool v6 = out->endpoint.address().is_v6() && host.find(':') != std::string::npos;
  out->host_header = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  return "";
}

net::awaitable<HttpReply> SimpleRequest(const Target& t, std::string method, std::string path,
                                        std::string body) {
  HttpReply reply;
  const Clock::time_point start = Clock::now();
  beast::tcp_stream stream(co_await net::this_coro::executor);
  ArmTimeout(t, &stream);
  error_code ec;
  const tcp::endpoint ep = t.endpoint;
  co_await stream.async_connect(ep, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    reply.error = "connect: " + ec.message();
    co_return reply;
  }
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), path, 11};
  SetHeaders(t, &req);
  if (!body.empty()) {
    req.set(bhttp::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  co_await bhttp::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    reply.error = "write: " + ec.message();
    co_return reply;
  }
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  // Not boost::none: Beast 1.74 compares the length against an empty optional and fails.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await bhttp::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    reply.error = "read: " + ec.message();
    co_return reply;
  }
  reply.status = static_cast<int>(parser.get().result_int());
  reply.body = std::move(parser.get().body());
  reply.latency_s = Seconds(Clock::now() - start);
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return reply;
}

std::string CompletionBody(const Target& t, const Options& o, const RequestSpec& spec,
                           bool stream) {
  // Ordered, as clients send them: a schema's properties keep the file's order (the grammar,
  // and so the cost of its masks, depends on it).
  nlohmann::ordered_json j;
  if (!t.model.empty()) j["model"] = t.model;
  j["prompt"] = spec.prompt;
  j["max_tokens"] = spec.output_tokens;
  j["temperature"] = o.temperature;
  if (o.ignore_eos) j["ignore_eos"] = true;
  if (spec.penalised && o.frequency_penalty != 0.0) j["frequency_penalty"] = o.frequency_penalty;
  if (spec.penalised && o.logit_bias_tokens > 0) {
    // K ids spread evenly over [min_token, vocab): the same set for every request.
    nlohmann::ordered_json bias = nlohmann::ordered_json::object();
    const int64_t span = o.vocab - o.min_token;
    for (int k = 0; k < o.logit_bias_tokens; ++k) {
      bias[std::to_string(o.min_token + k * span / o.logit_bias_tokens)] = 1.0;
    }
    j["logit_bias"] = std::move(bias);
  }
  if (spec.penalised && o.min_tokens > 0) {
    j["min_tokens"] = std::min(o.min_tokens, spec.output_tokens);
  }
  if (!o.json_schema.empty()) {
    j["structured_outputs"] = {{"json", nlohmann::ordered_json::parse(o.json_schema)}};
  }
  if (spec.n > 1) j["n"] = spec.n;
  if (!spec.user.empty()) j["user"] = spec.user;
  if (stream) {
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
  }
  return j.dump();
}

ConnectGate::ConnectGate(const net::any_io_executor& ex, size_t expected)
    : open_(ex, net::steady_timer::time_point::max()), expected_(expected) {}

net::awaitable<void> ConnectGate::Arrive() {
  if (++arrived_ >= expected_) {
    open_.cancel();
    co_return;
  }
  error_code ec;
  while (arrived_ < expected_) {
    co_await open_.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

net::awaitable<void> RunStreaming(const Target& t, const std::string& body, Clock::time_point t0,
                                  RequestResult* r, ConnectGate* gate) {
  r->start_s = Seconds(Clock::now() - t0);
  beast::tcp_stream stream(co_await net::this_coro::executor);
  ArmTimeout(t, &stream);
  error_code ec;
  auto fail = [&](std::string what) {
    r->ok = false;
    r->error = std::move(what);
    r->end_s = Seconds(Clock::now() - t0);
    r->done = true;
  };
  const tcp::endpoint ep = t.endpoint;
  co_await stream.async_connect(ep, net::redirect_error(net::use_awaitable, ec));
  if (gate != nullptr) co_await gate->Arrive();  // a failed connect arrives too
  if (ec) co_return fail("connect: " + ec.message());

  bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v1/completions", 11};
  SetHeaders(t, &req);
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::accept, "text/event-stream");
  req.body() = body;
  req.prepare_payload();
  co_await bhttp::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return fail("write: " + ec.message());

  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  // Not boost::none: Beast 1.74 compares the length against an empty optional and fails.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await bhttp::async_read_header(stream, buffer, parser,
                                    net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return fail("read header: " + ec.message());
  const int status = static_cast<int>(parser.get().result_int());
  if (status == 200) r->headers_s = Seconds(Clock::now() - t0);

  SseReader sse;
  StreamState st;
  std::string error_body;  // a non-200 answer's body, for the failure reason
  std::vector<std::string> events;
  char piece[8192];
  bool stream_error = false;
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof(piece);
    co_await bhttp::async_read_some(stream, buffer, parser,
                                    net::redirect_error(net::use_awaitable, ec));
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = sizeof(piece) - parser.get().body().size;
    if (status != 200) {
      if (error_body.size() < 512) error_body.append(piece, got);
    } else if (got > 0) {
      const double now_s = Seconds(Clock::now() - t0);
      events.clear();
      sse.Feed(std::string_view(piece, got), &events);
      for (const std::string& e : events) {
        if (!FoldEvent(e, now_s, &st, r)) {
          stream_error = true;
          break;
        }
      }
      if (stream_error || st.done_marker) break;
    }
    if (ec) break;
  }
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream.socket().close(ignored);
  if (status != 200) {
    co_return fail("HTTP " + std::to_string(status) + ": " + Truncate(error_body, 200));
  }
  if (stream_error) co_return fail(r->error);
  if (!st.done_marker) {
    co_return fail(ec ? "truncated stream: " + ec.message() : "stream ended without [DONE]");
  }
  if (!r->usage_seen) r->output_tokens = r->text_events;
  if (r->ttft_s < 0) co_return fail("no token received");
  r->ok = true;
  r->end_s = Seconds(Clock::now() - t0);
  r->done = true;
}

}  // namespace banyan::bench::serve
