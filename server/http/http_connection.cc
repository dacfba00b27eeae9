#include "server/http/http_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/ip/address.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http.hpp"
#include "server/http/body_decoding.h"
#include "text/chat_template.h"
#include "server/http/endpoints.h"
#include "server/http/http_log.h"
#include "server/http/http_util.h"

namespace banyan::server::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kHeadLimitBytes = 16 << 10;
// After a refusal, at most max(this, 2 x max_body_bytes) bytes of the rest of the request are
// read and discarded before the connection closes (DrainAndClose).
constexpr int64_t kDrainMinBytes = 16 << 20;

// One client connection. Its coroutine (Serve) runs on the socket's strand; Wake and Close may
// be called from any thread and post to that strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpFrontEnd::Impl* server)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), server_(server) {}

  // The connection's coroutine; its frame owns the connection.
  static net::awaitable<void> Run(std::shared_ptr<Connection> c) { co_await c->Serve(); }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // New output may be ready for the job in progress (engine thread).
  void Wake() {
    if (wake_pending_.exchange(true)) return;
    absl::MutexLock lock(&wake_mu_);
    if (closed_) return;
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
  }
  // Stop, after the grace period: end the connection whatever it is doing.
  void ForceClose() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      error_code ec;
      self->dead_ = true;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.close();
      self->timer_.cancel();
    });
  }
  // The io_context is about to be destroyed: Wake must no longer post to it.
  void Close() {
    absl::MutexLock lock(&wake_mu_);
    closed_ = true;
  }
  // Stop: cut the job in progress, or close an idle connection.
  void Interrupt() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->in_job_) {
        self->wake_pending_ = true;
        self->timer_.cancel();
      } else {
        error_code ec;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        self->stream_.cancel();
      }
    });
  }

 private:
  // Reads one request into *req. Returns false when the connection ends: quietly (closed,
  // timed out) or after an error response written here (*res) for a malformed request.
  net::awaitable<void> Serve();
  net::awaitable<bool> ReadRequest(HttpRequest* req, unsigned* version, bool* keep_alive);
  net::awaitable<bool> WriteResponse(const HttpResponse& res, const HttpRequest& req,
                                     unsigned version, bool keep_alive);
  net::awaitable<bool> RunJob(GenerationJob& job, const HttpResponse& head, unsigned version,
                              bool keep_alive);
  // While a job runs nothing reads the socket: notice a peer that closes it (a readable socket
  // with nothing to read), so that its request is cancelled instead of running to its end.
  // Data that arrives (a pipelined request) stays queued for the next read.
  void WatchPeer() {
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
          if (ec || !self->in_job_) return;
          char byte;
          const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1,
                                   MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            self->client_gone_ = true;
            self->timer_.cancel();
          }
        });
  }
  // Sleeps until Wake, Interrupt or `d` passes.
  net::awaitable<void> Sleep(std::chrono::milliseconds d);
  net::awaitable<bool> Write(net::const_buffer b, bool chunk);
  void ArmWriteTimeout() {
    stream_.expires_after(server_->cutting ? server_->options.stop_write_timeout
                                           : server_->options.write_timeout);
  }
  // Writes an error the connection layer produced itself (malformed request, body limits),
  // counts it, and marks the connection for DrainAndClose.
  net::awaitable<void> Refuse(int status, std::string message, std::string code, unsigned version);
  // Ends the connection after a refusal so that the client can read the answer. Closing a
  // socket with unread input makes the kernel send a reset, which discards the answer on the
  // client's side before a sequential client (one that writes its whole body before reading,
  // like Python's http.client) reads it. So: shut down our sending side (the client sees the
  // end of the answer), read and discard what the client still sends until it closes, up to a
  // byte bound and the body timeout, then close.
  net::awaitable<void> DrainAndClose();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer timer_;
  HttpFrontEnd::Impl* server_;  // outlives every connection (Stop destroys them)
  std::atomic<bool> wake_pending_{false};
  absl::Mutex wake_mu_;
  bool closed_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool in_job_ = false;      // strand only
  bool dead_ = false;        // strand only: ForceClose ran
  bool client_gone_ = false;  // strand only: the peer closed while its answer was pending
  bool drain_ = false;        // strand only: a request was refused; close with DrainAndClose
};

net::awaitable<void> Connection::Sleep(std::chrono::milliseconds d) {
  if (wake_pending_.load()) co_return;
  timer_.expires_after(d);
  error_code ec;
  co_await timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<bool> Connection::Write(net::const_buffer b, bool chunk) {
  error_code ec;
  ArmWriteTimeout();
  if (chunk) {
    auto chunk = bhttp::make_chunk(b);
    co_await net::async_write(stream_, chunk, net::redirect_error(net::use_awaitable, ec));
  } else {
    co_await net::async_write(stream_, b, net::redirect_error(net::use_awaitable, ec));
  }
  co_return !ec;
}

net::awaitable<void> Connection::Refuse(int status, std::string message, std::string code,
                                        unsigned version) {
  // (Arguments by value: the frame owns them.)
  AccessRecord record;
  record.id = MakeRequestId("req-");
  record.method = "-";
  record.path = "-";
  HttpResponse res;
  res.SetHeader("X-Request-Id", record.id);
  SendError(res, ErrorForHttpStatus(status, std::move(message), std::move(code)));
  record.status = status;
  LogRequest(record);
  CountRefusal(server_->ctx, record, res);
  drain_ = true;
  HttpRequest none;
  co_await WriteResponse(res, none, version, /*keep_alive=*/false);
}

net::awaitable<void> Connection::DrainAndClose() {
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!ec && !dead_ && !server_->cutting) {
    int64_t left = std::max<int64_t>(kDrainMinBytes, 2 * server_->ctx->options.max_body_bytes);
    left -= static_cast<int64_t>(buffer_.size());
    buffer_.clear();
    std::string scratch(64 << 10, '\0');
    // One deadline for the whole drain (tcp_stream's timeout stays armed across reads).
    stream_.expires_after(server_->options.body_timeout);
    while (left > 0) {
      const size_t n = co_await stream_.async_read_some(
          net::buffer(scratch), net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      left -= static_cast<int64_t>(n);
    }
  }
  stream_.close();
}

net::awaitable<bool> Connection::ReadRequest(HttpRequest* req, unsigned* version,
                                             bool* keep_alive) {
  const int64_t max_body = server_->ctx->options.max_body_bytes;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(kHeadLimitBytes);
  parser.body_limit(static_cast<uint64_t>(std::max<int64_t>(0, max_body)));
  error_code ec;
  stream_.expires_after(server_->options.head_timeout);
  co_await bhttp::async_read_header(stream_, buffer_, parser,
                                    net::redirect_error(net::use_awaitable, ec));
  // GCC 12 mishandles temporaries with destructors inside co_await expressions (they can be
  // destroyed twice): every argument of an awaited call below is a named local.
  if (ec == bhttp::error::header_limit) {
    std::string message = "The request head is larger than 16 KiB.";
    std::string code = "request_header_too_large";
    co_await Refuse(431, std::move(message), std::move(code), 11);
    co_return false;
  }
  if (ec == bhttp::error::body_limit) {
    std::string message = BodyTooLargeMessage(max_body);
    std::string code = "request_too_large";
    co_await Refuse(413, std::move(message), std::move(code), 11);
    co_return false;
  }
  if (ec == beast::error::timeout) {
    // An idle keep-alive connection timing out is normal; a head left unfinished is refused.
    // No answer: the stream closed the socket when the timer fired.
    if (buffer_.size() > 0) server_->ctx->rejections->Add(RejectReason::kHeadTimeout, "");
    co_return false;
  }
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset ||
      (ec && buffer_.size() == 0)) {
    co_return false;
  }
  if (ec) {
    std::string message = absl::StrCat("Malformed HTTP request: ", ec.message(), ".");
    std::string code = "bad_request";
    co_await Refuse(400, std::move(message), std::move(code), 11);
    co_return false;
  }
  const auto& head = parser.get();
  *version = head.version();
  if (EqualsIgnoreCase(std::string_view(head[bhttp::field::expect]), "100-continue")) {
    bhttp::response<bhttp::empty_body> cont{bhttp::status::continue_, head.version()};
    ArmWriteTimeout();
    co_await bhttp::async_write(stream_, cont, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return false;
  }
  stream_.expires_after(server_->options.body_timeout);
  co_await bhttp::async_read(stream_, buffer_, parser,
                             net::redirect_error(net::use_awaitable, ec));
  if (ec == bhttp::error::body_limit) {
    std::string message = BodyTooLargeMessage(max_body);
    std::string code = "request_too_large";
    co_await Refuse(413, std::move(message), std::move(code), *version);
    co_return false;
  }
  if (ec == beast::error::timeout) {
    // The stream closed the socket when the timer fired: nobody to answer.
    server_->ctx->rejections->Add(RejectReason::kBodyTimeout, "");
    co_return false;
  }
  if (ec == bhttp::error::partial_message) {
    // The client half-closed (or closed) its side before the body was complete: it can still
    // read, so tell it, instead of waiting for a body that cannot come.
    const boost::optional<uint64_t> length = parser.content_length();
    std::string message =
        length ? absl::StrCat("The request body ended before its Content-Length of ", *length,
                              " bytes was received.")
               : std::string("The request body ended before its last chunk was received.");
    std::string code = "incomplete_body";
    co_await Refuse(400, std::move(message), std::move(code), *version);
    co_return false;
  }
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset) {
    co_return false;  // the client went away: nobody to answer
  }
  if (ec) {
    // Malformed framing: a bad chunk size or chunk extension, a body that does not parse.
    std::string message = absl::StrCat("Malformed HTTP request body: ", ec.message(), ".");
    std::string code = "bad_request";
    co_await Refuse(400, std::move(message), std::move(code), *version);
    co_return false;
  }
  bhttp::request<bhttp::string_body> msg = parser.release();
  *keep_alive = msg.keep_alive();
  req->method = std::string(msg.method_string());
  const std::string_view target = msg.target();
  req->path = std::string(target.substr(0, target.find('?')));
  for (const auto& field : msg) {
    req->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  req->body = std::move(msg.body());
  co_return true;
}

// The status line and headers of `res` on a Beast response of any body type.
template <class Body>
void FillHead(const HttpResponse& res, unsigned version, bool keep_alive,
              bhttp::response<Body>* r) {
  r->version(version);
  r->result(static_cast<unsigned>(res.status));
  r->set(bhttp::field::server, "banyand");
  r->set(bhttp::field::content_type, res.content_type);
  for (const auto& [k, v] : res.headers) r->set(k, v);
  r->keep_alive(keep_alive);
}

net::awaitable<bool> Connection::WriteResponse(const HttpResponse& res, const HttpRequest& req,
                                               unsigned version, bool keep_alive) {
  error_code ec;
  ArmWriteTimeout();
  if (req.method == "HEAD") {
    bhttp::response<bhttp::empty_body> r;
    FillHead(res, version, keep_alive, &r);
    r.content_length(res.body.size());
    co_await bhttp::async_write(stream_, r, net::redirect_error(net::use_awaitable, ec));
  } else {
    bhttp::response<bhttp::string_body> r;
    FillHead(res, version, keep_alive, &r);
    r.body() = res.body;
    r.prepare_payload();
    co_await bhttp::async_write(stream_, r, net::redirect_error(net::use_awaitable, ec));
  }
  co_return !ec;
}

net::awaitable<bool> Connection::RunJob(GenerationJob& job, const HttpResponse& head,
                                        unsigned version, bool keep_alive) {
  in_job_ = true;
  client_gone_ = false;
  if (buffer_.size() == 0) WatchPeer();
  std::weak_ptr<Connection> weak = weak_from_this();
  job.SetWaker([weak] {
    if (auto c = weak.lock()) c->Wake();
  });
  const auto keep_alive_interval = server_->options.keep_alive_interval;
  const char* const kCutMessage =
      "the server is shutting down and cut this request (drain timeout)";
  bool ok = true;
  if (!job.streaming()) {
    HttpResponse res = head;
    bool done = false;
    while (!done && !dead_ && !client_gone_) {
      wake_pending_ = false;
      if (server_->cutting) job.Cut(kCutMessage);
      done = job.PumpWhole(&res);
      if (!done) co_await Sleep(keep_alive_interval);
    }
    ok = done;
    if (ok) {
      for (const auto& [k, v] : head.headers) res.SetHeader(k, v);
      const HttpRequest not_head;
      ok = co_await WriteResponse(res, not_head, version, keep_alive);
    }
    if (ok) job.Delivered();
  } else {
    const bool chunked = version >= 11;
    bhttp::response<bhttp::empty_body> r{bhttp::status::ok, version};
    r.set(bhttp::field::server, "banyand");
    r.set(bhttp::field::content_type, "text/event-stream");
    r.set(bhttp::field::cache_control, "no-cache");
    r.set("X-Accel-Buffering", "no");
    for (const auto& [k, v] : head.headers) r.set(k, v);
    r.keep_alive(keep_alive && chunked);
    if (chunked) r.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> sr{r};
    error_code ec;
    ArmWriteTimeout();
    co_await bhttp::async_write_header(stream_, sr, net::redirect_error(net::use_awaitable, ec));
    ok = !ec;
    auto last_write = Clock::now();
    while (ok) {
      wake_pending_ = false;
      if (server_->cutting) job.Cut(kCutMessage);
      std::string out;
      const bool done = job.PumpStream(&out);
      if (out.empty() && !done && Clock::now() - last_write >= keep_alive_interval) {
        out = ": keep-alive\n\n";
      }
      if (!out.empty()) {
        ok = co_await Write(net::buffer(out), chunked);
        last_write = Clock::now();
      }
      if (ok && done) {
        if (chunked) {
          ArmWriteTimeout();
          auto last = bhttp::make_chunk_last();
          co_await net::async_write(stream_, last, net::redirect_error(net::use_awaitable, ec));
          ok = !ec;
        }
        if (ok) job.Delivered();
        break;
      }
      if (dead_ || client_gone_) ok = false;
      if (ok) co_await Sleep(keep_alive_interval);
    }
    if (!chunked) ok = false;  // HTTP/1.0: the end of the body is the end of the connection
  }
  if (!ok) job.ClientGone();
  job.SetWaker({});
  in_job_ = false;
  co_return ok;
}

namespace {

// Decodes the body (Content-Encoding) and routes the request. An undecodable body is answered
// here and sets *body_refused (the connection then closes). Nothing below is meant to throw; a
// bug must not take the daemon down.
std::shared_ptr<GenerationJob> Handle(ServerContext* ctx, HttpRequest& req, HttpResponse* res,
                                      const std::shared_ptr<AccessRecord>& record,
                                      bool decode_body, bool* body_refused) {
  try {
    if (decode_body) {
      const int64_t max_body = std::max<int64_t>(0, ctx->options.max_body_bytes);
      if (absl::Status s = DecodeBody(req.Header("Content-Encoding"), max_body, &req.body);
          !s.ok()) {
        const int status =
            absl::IsResourceExhausted(s) ? 413 : absl::IsUnimplemented(s) ? 415 : 400;
        const char* code = status == 413   ? "request_too_large"
                           : status == 415 ? "unsupported_media_type"
                                           : "invalid_body";
        record->id = MakeRequestId("req-");
        res->SetHeader("X-Request-Id", record->id);
        SendError(*res, ErrorForHttpStatus(status, std::string(s.message()), code));
        record->status = status;
        *body_refused = true;
        return nullptr;
      }
    }
    return Dispatch(ctx, req, res, record);
  } catch (const std::exception& e) {
    HttpLog().error("[http] {} {}: internal error: {}", req.method, req.path, e.what());
    *res = HttpResponse{};
    SendError(*res, ErrorForHttpStatus(500, "internal server error"));
    record->status = 500;
    return nullptr;
  }
}

}  // namespace

net::awaitable<void> Connection::Serve() {
  ServerContext* ctx = server_->ctx;
  for (;;) {
    if (server_->cutting) break;
    HttpRequest req;
    unsigned version = 11;
    bool keep_alive = true;
    if (!co_await ReadRequest(&req, &version, &keep_alive)) break;
    // While draining or stopping, every answer closes its connection.
    if (server_->cutting || (ctx->ready != nullptr && !ctx->ready->load())) keep_alive = false;

    auto record = std::make_shared<AccessRecord>();
    record->method = req.method;
    record->path = req.path;
    HttpResponse res;
    std::shared_ptr<GenerationJob> job;
    if (IsProbeRequest(req)) {  // answered on the I/O thread (http_server.h)
      job = Handle(ctx, req, &res, record, /*decode_body=*/false, nullptr);
    } else {
      bool body_refused = false;
      auto work = [&]() -> net::awaitable<std::shared_ptr<GenerationJob>> {
        if (server_->options.on_worker) server_->options.on_worker();
        co_return Handle(ctx, req, &res, record, /*decode_body=*/true, &body_refused);
      };
      auto worker = server_->workers->get_executor();
      job = co_await net::co_spawn(worker, std::move(work), net::use_awaitable);
      if (body_refused) {  // as for every body the connection layer refuses
        keep_alive = false;
        drain_ = true;
      }
    }
    bool ok = false;
    if (job == nullptr) {
      if (!record->deferred) LogRequest(*record);
      CountRefusal(ctx, *record, res);
      ok = co_await WriteResponse(res, req, version, keep_alive);
    } else {
      server_->JobStarted();
      ok = co_await RunJob(*job, res, version, keep_alive);
      job.reset();  // logs the request
      server_->JobEnded();
    }
    if (!ok || !keep_alive) break;
  }
  if (drain_) {
    co_await DrainAndClose();
  } else {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }
  server_->Unregister(shared_from_this());
}

HttpFrontEnd::Impl::Impl(ServerContext* c, HttpFrontEndOptions o)
    : ctx(c), options(o) {}

HttpFrontEnd::Impl::~Impl() { Stop(); }

int64_t HttpFrontEnd::Impl::jobs_in_flight() const {
  absl::MutexLock lock(&mu_);
  return jobs_;
}

bool HttpFrontEnd::Impl::WaitJobs(Clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_ == 0; };
  const auto left = deadline - Clock::now();
  if (left > Clock::duration::zero()) {
    mu_.AwaitWithTimeout(absl::Condition(&idle), absl::FromChrono(left));
  }
  return jobs_ == 0;
}

void HttpFrontEnd::Impl::Register(const std::shared_ptr<Connection>& c) {
  absl::MutexLock lock(&mu_);
  connections_.insert(c);
}

void HttpFrontEnd::Impl::Unregister(const std::shared_ptr<Connection>& c) {
  absl::MutexLock lock(&mu_);
  connections_.erase(c);
}

void HttpFrontEnd::Impl::JobStarted() {
  absl::MutexLock lock(&mu_);
  ++jobs_;
}

void HttpFrontEnd::Impl::JobEnded() {
  absl::MutexLock lock(&mu_);
  --jobs_;
}

void HttpFrontEnd::Impl::AcceptLoop() {
  acceptor->async_accept(
      net::make_strand(*ioc), [self = this](error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !self->acceptor->is_open()) return;
        if (ec) {
          // Out of file descriptors or similar: back off a little instead of spinning.
          HttpLog().warn("[http] accept: {}", ec.message());
          auto t = std::make_shared<net::steady_timer>(*self->ioc, std::chrono::milliseconds(50));
          t->async_wait([self, t](error_code) { self->AcceptLoop(); });
          return;
        }
        if (self->cutting) return;
        error_code opt;
        socket.set_option(tcp::no_delay(true), opt);
        auto c = std::make_shared<Connection>(std::move(socket), self);
        self->Register(c);
        net::co_spawn(c->executor(), Connection::Run(c), net::detached);
        self->AcceptLoop();
      });
}

absl::Status HttpFrontEnd::Impl::Start() {
  const ServerOptions& o = ctx->options;
  error_code ec;
  ioc = std::make_unique<net::io_context>();
  acceptor = std::make_unique<tcp::acceptor>(*ioc);
  tcp::resolver resolver(*ioc);
  auto results = resolver.resolve(o.host, std::to_string(o.http_port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP: cannot resolve listen address '", o.host, "': ", ec.message()));
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor->open(endpoint.protocol(), ec);
  // SO_REUSEADDR lets a restarted daemon bind while old connections sit in TIME_WAIT; without
  // SO_REUSEPORT a port another process listens on still refuses the bind.
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(std::max(1, o.listen_backlog), ec);
  if (ec) {
    acceptor.reset();
    ioc.reset();
    return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", o.host, ":",
                                               o.http_port, ": ", ec.message()));
  }
  port = acceptor->local_endpoint().port();
  started = true;
  AcceptLoop();
  int n = options.threads;
  if (n <= 0) n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2, 4);
  const int w = options.workers > 0 ? options.workers : n;
  workers = std::make_unique<net::thread_pool>(w);
  for (int i = 0; i < n; ++i) threads.emplace_back([this] { ioc->run(); });
  HttpLog().info("[http] listening on {}:{} (model {}, chat template {}, auth {}, {} I/O threads, "
                 "{} request workers)",
                 o.host, port.load(), ctx->model_name,
                 ctx->jinja_chat != nullptr ? "jinja " + ctx->jinja_chat->source
                 : o.chat_template == text::ChatTemplate::kModel
                     ? std::string("plain (the model has none)")
                     : std::string(text::ChatTemplateName(o.chat_template)),
                 ctx->auth.keys_required() ? "on" : "off", n, w);
  return absl::OkStatus();
}

void HttpFrontEnd::Impl::Stop() {
  if (!started) return;
  started = false;
  cutting = true;
  net::post(*ioc, [this] {
    error_code ec;
    acceptor->close(ec);
  });
  std::vector<std::shared_ptr<Connection>> open;
  {
    absl::MutexLock lock(&mu_);
    open.assign(connections_.begin(), connections_.end());
  }
  for (const auto& c : open) c->Interrupt();
  // Cut answers need the scheduler to end their streams and a last write each; give them a
  // bounded time. When every connection has ended, the io_context runs out of work and its
  // threads return by themselves, so nothing is left queued when it is destroyed; only a
  // connection that outlives the grace period (a write stuck in the kernel) makes us stop the
  // io_context with work still queued.
  auto wait_closed = [this](absl::Duration d) {
    absl::MutexLock lock(&mu_);
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return connections_.empty(); };
    return mu_.AwaitWithTimeout(absl::Condition(&closed), d);
  };
  if (!wait_closed(absl::FromChrono(options.stop_write_timeout + std::chrono::seconds(3)))) {
    {
      absl::MutexLock lock(&mu_);
      open.assign(connections_.begin(), connections_.end());
    }
    for (const auto& c : open) c->ForceClose();
    if (!wait_closed(absl::Seconds(2))) {
      HttpLog().warn("[http] {} connections did not close; stopping anyway", open.size());
      ioc->stop();
    }
  }
  for (std::thread& t : threads) t.join();
  threads.clear();
  workers->join();
  workers.reset();
  open.clear();  // no connection may outlive the io_context (their sockets and strands use it)
  {
    absl::MutexLock lock(&mu_);
    for (const auto& c : connections_) c->Close();
    connections_.clear();
  }
  acceptor.reset();
  ioc.reset();
  port = -1;
}

}  // namespace banyan::server::http
