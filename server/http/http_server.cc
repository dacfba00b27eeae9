#include "server/http/http_server.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "server/http/chat_template.h"
#include "server/http/generation.h"
#include "server/http/http_log.h"
#include "server/http/http_util.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "server/metrics_text.h"
#include "server/validation.h"

namespace banyan::server::http {
namespace {

using Handler = std::function<void(const httplib::Request&, httplib::Response&,
                                   const std::shared_ptr<AccessRecord>&)>;

// Probes and scrapes arrive every few seconds; their access lines go to debug level.
bool IsQuietPath(const std::string& path) {
  return path == "/health" || path == "/ready" || path == "/metrics";
}

void Log(const AccessRecord& r) {
  if (IsQuietPath(r.path) && r.status < 400) {
    if (HttpLog().should_log(spdlog::level::debug)) {
      HttpLog().debug("[http] {} {} {} {}", r.id, r.method, r.path, r.status);
    }
    return;
  }
  LogAccess(r);
}

std::shared_ptr<AccessRecord> NewRecord(const httplib::Request& req) {
  auto r = std::make_shared<AccessRecord>();
  r->method = req.method;
  r->path = req.path;
  return r;
}

// Runs `h`, gives the request an id when the handler did not, and logs it unless a stream took
// over the record.
httplib::Server::Handler Wrap(Handler h) {
  return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<AccessRecord> record = NewRecord(req);
    h(req, res, record);
    if (record->id.empty()) {
      record->id = MakeRequestId("req-");
      res.set_header("X-Request-Id", record->id);
    }
    if (record->status == 0) record->status = res.status < 0 ? 200 : res.status;
    if (!record->deferred) Log(*record);
  };
}

// Constant-time comparison, so response timing does not reveal how much of a key matched.
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool Authorized(const httplib::Request& req, const std::vector<std::string>& keys) {
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "bearer ";
  if (header.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(absl::string_view(header.data(), kBearer.size()),
                              absl::string_view(kBearer.data(), kBearer.size()))) {
    return false;
  }
  const std::string_view key = std::string_view(header).substr(kBearer.size());
  bool ok = false;
  for (const std::string& k : keys) ok |= SameKey(key, k);
  return ok;
}

// The methods each known path accepts; "" for unknown paths.
std::string AllowedMethods(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
      path == "/detokenize") {
    return "POST";
  }
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/") || path == "/health" ||
      path == "/ready" || path == "/metrics") {
    return "GET, HEAD";
  }
  return "";
}

void NotFoundOrNotAllowed(const httplib::Request& req, httplib::Response& res,
                          const std::shared_ptr<AccessRecord>&) {
  const std::string allowed = AllowedMethods(req.path);
  if (allowed.empty()) {
    SendError(res,
              ErrorForHttpStatus(404, absl::StrCat("Invalid URL (", req.method, " ", req.path, ")"),
                                 "not_found"));
    return;
  }
  res.set_header("Allow", allowed);
  SendError(res, ErrorForHttpStatus(405,
                                    absl::StrCat("Method ", req.method, " is not allowed on ",
                                                 req.path, "; use ", allowed),
                                    "method_not_allowed"));
}

Json ModelCard(const ServerContext& ctx, int64_t created) {
  return Json{{"id", ctx.model_name},
              {"object", "model"},
              {"created", created},
              {"owned_by", "banyan"},
              {"root", ctx.model_name},
              {"parent", nullptr},
              {"max_model_len", ctx.model_config->max_seq_len}};
}

void Tokenize(const ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (RejectOversizedBody(req, ctx.options.max_body_bytes, res)) return;
  absl::StatusOr<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status());
  if (absl::Status s = CheckModel(*body, ctx); !s.ok()) return SendStatus(res, s);
  FieldReader f(*body);
  bool add_special = true;
  f.Bool("add_special_tokens", &add_special);
  bool add_generation_prompt = true;
  f.Bool("add_generation_prompt", &add_generation_prompt);
  if (!f.status().ok()) return SendStatus(res, f.status());
  std::vector<int32_t> tokens;
  if (f.Has("messages")) {
    absl::StatusOr<std::vector<ChatMessage>> messages = ParseMessages(*body);
    if (!messages.ok()) return SendStatus(res, messages.status());
    absl::StatusOr<std::vector<ChatSegment>> segments =
        RenderChat(ctx.options.chat_template, *messages);
    if (!segments.ok()) return SendStatus(res, segments.status());
    tokens = EncodeChat(*segments, *ctx.tokenizer);
  } else {
    if (!f.Has("prompt")) {
      return SendStatus(res, InvalidParam("prompt", "send either prompt (a string) or messages"));
    }
    std::string prompt;
    f.String("prompt", &prompt);
    if (!f.status().ok()) return SendStatus(res, f.status());
    tokens = ctx.tokenizer->Encode(prompt, add_special);
  }
  SendJson(res, 200,
           Json{{"tokens", tokens},
                {"count", tokens.size()},
                {"max_model_len", ctx.model_config->max_seq_len}});
}

void Detokenize(const ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (RejectOversizedBody(req, ctx.options.max_body_bytes, res)) return;
  absl::StatusOr<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status());
  if (absl::Status s = CheckModel(*body, ctx); !s.ok()) return SendStatus(res, s);
  FieldReader f(*body);
  if (!f.Has("tokens")) {
    return SendStatus(res, InvalidParam("tokens", "tokens is required: an array of token ids"));
  }
  std::vector<int32_t> tokens;
  f.IntList("tokens", &tokens);
  if (!f.status().ok()) return SendStatus(res, f.status());
  for (int32_t id : tokens) {
    if (id < 0 || id >= ctx.tokenizer->vocab_size()) {
      return SendStatus(
          res,
          InvalidParam("tokens", absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                                              ctx.tokenizer->vocab_size(), ")")));
    }
  }
  SendJson(res, 200, Json{{"prompt", ctx.tokenizer->Decode(tokens)}});
}

}  // namespace

HttpFrontEnd::HttpFrontEnd(ServerContext* ctx, HttpFrontEndOptions options)
    : ctx_(ctx), options_(options) {}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

void HttpFrontEnd::RegisterRoutes() {
  httplib::Server& s = *server_;
  ServerContext* ctx = ctx_;
  const int64_t created = UnixSeconds();

  const std::atomic<bool>* stopping = &stopping_;
  s.Post("/v1/completions", Wrap([ctx, stopping](const auto& req, auto& res, const auto& record) {
           HandleGeneration(ctx, Api::kCompletions, req, res, record, stopping);
         }));
  s.Post("/v1/chat/completions",
         Wrap([ctx, stopping](const auto& req, auto& res, const auto& record) {
           HandleGeneration(ctx, Api::kChat, req, res, record, stopping);
         }));
  s.Get("/v1/models", Wrap([ctx, created](const auto&, auto& res, const auto&) {
          SendJson(res, 200,
                   Json{{"object", "list"}, {"data", Json::array({ModelCard(*ctx, created)})}});
        }));
  s.Get(
      "/v1/models/(.+)", Wrap([ctx, created](const auto& req, auto& res, const auto&) {
        const std::string id = req.matches[1];
        if (id != ctx->model_name) {
          absl::Status st = absl::NotFoundError(absl::StrCat(
              "The model `", id, "` does not exist. This server serves `", ctx->model_name, "`."));
          SetStatusParam(&st, "model");
          SetStatusCode(&st, "model_not_found");
          return SendStatus(res, st);
        }
        SendJson(res, 200, ModelCard(*ctx, created));
      }));
  s.Post("/tokenize",
         Wrap([ctx](const auto& req, auto& res, const auto&) { Tokenize(*ctx, req, res); }));
  s.Post("/detokenize",
         Wrap([ctx](const auto& req, auto& res, const auto&) { Detokenize(*ctx, req, res); }));
  s.Get("/health", Wrap([](const auto&, auto& res, const auto&) {
          SendJson(res, 200, Json{{"status", "ok"}});
        }));
  s.Get("/ready", Wrap([ctx](const auto&, auto& res, const auto&) {
          if (ctx->ready != nullptr && !ctx->ready->load()) {
            return SendError(res, ErrorForHttpStatus(503, "not ready: loading or draining",
                                                     "service_unavailable"));
          }
          SendJson(res, 200, Json{{"status", "ready"}});
        }));
  s.Get("/metrics", Wrap([ctx](const auto&, auto& res, const auto&) {
          res.status = 200;
          res.set_content(RenderPrometheus(ctx->scheduler->Metrics(), ctx->model_name),
                          "text/plain; version=0.0.4; charset=utf-8");
        }));

  // Anything else: 404 for unknown paths, 405 for known paths with another method.
  const auto fallback = Wrap(NotFoundOrNotAllowed);
  s.Get(".*", fallback);
  s.Post(".*", fallback);
  s.Put(".*", fallback);
  s.Patch(".*", fallback);
  s.Delete(".*", fallback);
  s.Options(".*", fallback);
}

absl::Status HttpFrontEnd::Start() {
  if (server_ != nullptr) return absl::FailedPreconditionError("HttpFrontEnd already started");
  stopping_ = false;
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  const int threads = std::max(1, options_.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(static_cast<size_t>(std::max<int64_t>(0, ctx_->options.max_body_bytes)));

  const std::vector<std::string>& keys = ctx_->options.api_keys;
  s.set_pre_routing_handler([&keys](const httplib::Request& req, httplib::Response& res) {
    if (keys.empty() || req.path == "/health" || req.path == "/ready" || Authorized(req, keys)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::shared_ptr<AccessRecord> record = NewRecord(req);
    record->id = MakeRequestId("req-");
    res.set_header("X-Request-Id", record->id);
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res, ErrorForHttpStatus(401,
                                      "Incorrect or missing API key. Send it as "
                                      "'Authorization: Bearer <key>'.",
                                      "invalid_api_key"));
    record->status = res.status;
    Log(*record);
    return httplib::Server::HandlerResponse::Handled;
  });

  // Errors httplib produces itself (413 body too large, 400 unparsable request, 414 ...): give
  // them an OpenAI body. Responses our handlers made already have one.
  const int64_t max_body = ctx_->options.max_body_bytes;
  s.set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::shared_ptr<AccessRecord> record = NewRecord(req);
    record->id = MakeRequestId("req-");
    if (res.status == 413) {
      SendError(res, ErrorForHttpStatus(413, BodyTooLargeMessage(max_body), "request_too_large"));
    } else {
      SendError(res, ErrorForHttpStatus(res.status, absl::StrCat("HTTP error ", res.status,
                                                                 " (malformed request)")));
    }
    record->status = res.status;
    Log(*record);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        HttpLog().error("[http] {} {}: internal error: {}", req.method, req.path, what);
        SendError(res, ErrorForHttpStatus(500, "internal server error"));
      });
  RegisterRoutes();

  const std::string& host = ctx_->options.host;
  int port = ctx_->options.http_port;
  if (port == 0) {
    port = s.bind_to_any_port(host);
  } else if (!s.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", host, ":",
                                               ctx_->options.http_port,
                                               " (address in use or not available)"));
  }
  port_ = port;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // Stop() only works on a running server: wait until the accept loop has started.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.is_running() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  HttpLog().info("[http] listening on {}:{} (model {}, chat template {}, auth {})", host, port_,
                 ctx_->model_name, ChatTemplateName(ctx_->options.chat_template),
                 keys.empty() ? "off" : "on");
  return absl::OkStatus();
}

void HttpFrontEnd::Stop() {
  if (server_ == nullptr) return;
  stopping_ = true;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
  port_ = -1;
}

}  // namespace banyan::server::http
