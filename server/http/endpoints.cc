#include "server/http/endpoints.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "server/common/auth.h"
#include "server/common/header_value.h"
#include "text/chat_template.h"
#include "server/http/http_util.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "server/http/prompt.h"
#include "server/common/metrics_text.h"
#include "server/common/validation.h"

namespace banyan::server::http {
namespace {

bool IsJsonContentType(std::string_view value) {
  const size_t semi = value.find(';');
  return EqualsIgnoreCase(StripOptionalWhitespace(value.substr(0, semi)), "application/json");
}

// "localhost", an IPv4 address in 127.0.0.0/8 or the IPv6 loopback ::1.
bool IsLoopbackAddress(std::string_view host) {
  if (EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
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

// POST /tokenize {prompt | messages, add_special_tokens, add_generation_prompt, model}
//   -> {tokens, count, max_model_len}
void Tokenize(const RouteCall& c) {
  const ServerContext& ctx = *c.ctx;
  const HttpRequest& req = c.req;
  HttpResponse& res = *c.res;
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
    absl::StatusOr<std::vector<int32_t>> ids = ChatPromptIds(*body, req.body, ctx);
    if (!ids.ok()) return SendStatus(res, ids.status());
    tokens = *std::move(ids);
  } else {
    if (!f.Has("prompt")) {
      return SendStatus(res, InvalidParam("prompt", "send either prompt (a string) or messages"));
    }
    std::string prompt;
    f.String("prompt", &prompt);
    if (!f.status().ok()) return SendStatus(res, f.status());
    if (absl::Status s = CheckPromptBytes(prompt, ctx.options); !s.ok()) {
      return SendStatus(res, s);
    }
    tokens = ctx.tokenizer->Encode(prompt, add_special);
  }
  SendJson(res, 200,
           Json{{"tokens", tokens},
                {"count", tokens.size()},
                {"max_model_len", ctx.model_config->max_seq_len}});
}

// POST /detokenize {tokens, model} -> {prompt}
void Detokenize(const RouteCall& c) {
  const ServerContext& ctx = *c.ctx;
  HttpResponse& res = *c.res;
  absl::StatusOr<Json> body = ParseBody(c.req.body);
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

int64_t ServerStartSeconds() {
  static const int64_t created = UnixSeconds();
  return created;
}

// GET /v1/models: the one served model.
void ListModels(const RouteCall& c) {
  SendJson(
      *c.res, 200,
      Json{{"object", "list"}, {"data", Json::array({ModelCard(*c.ctx, ServerStartSeconds())})}});
}

// GET /v1/models/{id}: the served model's card, or 404 model_not_found. The id is the rest of
// the path after the route's.
void GetModel(const RouteCall& c) {
  const ServerContext& ctx = *c.ctx;
  const std::string id = c.req.path.substr(c.route.path.size());
  if (id != ctx.model_name) {
    absl::Status st = absl::NotFoundError(absl::StrCat(
        "The model `", id, "` does not exist. This server serves `", ctx.model_name, "`."));
    SetStatusParam(&st, "model");
    SetStatusCode(&st, "model_not_found");
    return SendStatus(*c.res, st);
  }
  SendJson(*c.res, 200, ModelCard(ctx, ServerStartSeconds()));
}

// GET /debug/kv_blocks (ServerOptions::debug_kv_blocks): the prefix cache's full blocks as the
// engine sees them between two steps, hashes only (as the KV events name them), for checking an
// event stream against the daemon. Off: 404, as for an unknown path.
void KvBlocks(const RouteCall& c) {
  const ServerContext& ctx = *c.ctx;
  HttpResponse& res = *c.res;
  if (!ctx.options.debug_kv_blocks) {
    return SendError(res, ErrorForHttpStatus(404, "Invalid URL (/debug/kv_blocks is off; start "
                                                  "banyand with --debug-kv-blocks on)",
                                             "not_found"));
  }
  auto blocks = ctx.scheduler->KvBlocks(absl::Seconds(10));
  if (!blocks.ok()) return SendStatus(res, blocks.status());
  Json hashes = Json::array();
  std::vector<uint64_t> sorted;
  for (const kvcache::FullBlock& b : *blocks) sorted.push_back(b.hash);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (uint64_t h : sorted) hashes.push_back(h);
  SendJson(res, 200, Json{{"block_size", ctx.scheduler->Metrics().chunk_size},
                          {"holders", blocks->size()},
                          {"blocks", std::move(hashes)}});
}

// GET /health: 200 while the process runs.
void Health(const RouteCall& c) { SendJson(*c.res, 200, Json{{"status", "ok"}}); }

// GET /ready: 200 when *ctx->ready, else 503 (loading or draining).
void Ready(const RouteCall& c) {
  if (c.ctx->ready != nullptr && !c.ctx->ready->load()) {
    SendError(*c.res,
              ErrorForHttpStatus(503, "not ready: loading or draining", "service_unavailable"));
  } else {
    SendJson(*c.res, 200, Json{{"status", "ready"}});
  }
}

// GET /metrics: Prometheus text 0.0.4 (server/common/metrics_text.h, docs/metrics.md).
void Metrics(const RouteCall& c) {
  c.res->status = 200;
  c.res->content_type = "text/plain; version=0.0.4; charset=utf-8";
  c.res->body = RenderPrometheus(c.ctx->scheduler->Metrics(), c.ctx->model_name,
                                 c.ctx->rejections->Snapshot());
  if (c.ctx->extra_metrics) c.res->body += c.ctx->extra_metrics();
}

// POST /v1/completions and /v1/chat/completions: generation (generation.h), SSE streaming.
void Generate(const RouteCall& c, Api api) {
  BANYAN_CHECK(c.tenant != nullptr) << c.route.path << ": a generation route needs a key";
  *c.job = StartGeneration(c.ctx, api, *c.tenant, c.req, c.res, c.record);
}
void Completions(const RouteCall& c) { Generate(c, Api::kCompletions); }
void ChatCompletions(const RouteCall& c) { Generate(c, Api::kChat); }

constexpr std::string_view kPost = "POST";
constexpr std::string_view kGet = "GET, HEAD";

// The route table: the only place paths are written.
// clang-format off
constexpr Route kRoutes[] = {
    // path                   allow  needs_key probe  quiet  handler
    {"/v1/completions",       kPost, true,     false, false, Completions},
    {"/v1/chat/completions",  kPost, true,     false, false, ChatCompletions},
    {"/v1/models",            kGet,  true,     false, false, ListModels},
    {"/v1/models/",           kGet,  true,     false, false, GetModel},
    {"/tokenize",             kPost, true,     false, false, Tokenize},
    {"/detokenize",           kPost, true,     false, false, Detokenize},
    {"/health",               kGet,  false,    true,  true,  Health},
    {"/ready",                kGet,  false,    true,  true,  Ready},
    {"/metrics",              kGet,  true,     false, true,  Metrics},
    {"/debug/kv_blocks",      kGet,  true,     false, false, KvBlocks},
};
// clang-format on

}  // namespace

bool IsLoopbackHostHeader(std::string_view host) {
  std::string_view name = host;
  if (name.substr(0, 1) == "[") {
    const size_t close = name.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return false;
    name = name.substr(1, close - 1);
  } else if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
    name = name.substr(0, colon);
  }
  return IsLoopbackAddress(name);
}

std::span<const Route> Routes() { return kRoutes; }

const Route* FindRoute(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (r.path.ends_with('/') ? path.starts_with(r.path) : path == r.path) return &r;
  }
  return nullptr;
}

bool AllowsMethod(const Route& route, std::string_view method) {
  if (method.empty()) return false;
  for (std::string_view rest = route.allow; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (StripOptionalWhitespace(rest.substr(0, comma)) == method) return true;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return false;
}

bool IsProbeRequest(const HttpRequest& req) {
  const Route* route = FindRoute(req.path);
  return route != nullptr && route->probe && AllowsMethod(*route, req.method);
}

void LogRequest(const AccessRecord& r) {
  const Route* route = FindRoute(r.path);
  if (route != nullptr && route->quiet && r.status < 400) {
    if (HttpLog().should_log(spdlog::level::debug)) {
      HttpLog().debug("[http] {} {} {} {}", r.id, r.method, r.path, r.status);
    }
    return;
  }
  LogAccess(r);
}

void CountRefusal(ServerContext* ctx, const AccessRecord& record, const HttpResponse& res) {
  if (res.status < 400) return;
  if (const Route* route = FindRoute(record.path); route != nullptr && route->probe) return;
  const RejectReason reason =
      record.reject_reason.value_or(RejectReasonForHttp(res.status, res.error_code));
  ctx->rejections->Add(reason, record.tenant);
}

std::shared_ptr<GenerationJob> Dispatch(ServerContext* ctx, const HttpRequest& req,
                                        HttpResponse* res,
                                        const std::shared_ptr<AccessRecord>& record) {
  const ServerOptions& opts = ctx->options;
  auto finish = [&]() -> std::shared_ptr<GenerationJob> {
    if (record->id.empty()) {
      record->id = MakeRequestId("req-");
      res->SetHeader("X-Request-Id", record->id);
    }
    record->status = res->status;
    return nullptr;
  };
  if (!ctx->auth.keys_required() && IsLoopbackAddress(opts.host) &&
      !IsLoopbackHostHeader(req.Header("Host"))) {
    SendError(*res, ErrorForHttpStatus(403,
                                       "This server listens on a loopback address without API "
                                       "keys and only answers requests whose Host header names "
                                       "a loopback host (localhost, 127.0.0.1, [::1]).",
                                       "forbidden_host"));
    return finish();
  }
  const Route* route = FindRoute(req.path);
  // The caller's tenant (server/common/auth.h): from the raw Authorization bytes, never from the body.
  const Tenant* tenant = nullptr;
  if (route == nullptr || route->needs_key) {
    std::optional<std::string_view> authorization;
    if (req.HasHeader("Authorization")) authorization = req.Header("Authorization");
    absl::StatusOr<const Tenant*> t = ctx->auth.Authenticate(authorization);
    if (!t.ok()) {
      res->SetHeader("WWW-Authenticate", "Bearer");
      SendError(*res, ErrorForHttpStatus(401, std::string(t.status().message()),
                                         "invalid_api_key"));
      return finish();
    }
    tenant = *t;
    record->tenant = tenant->name();
  }
  if (route == nullptr) {
    SendError(*res, ErrorForHttpStatus(
                        404, absl::StrCat("Invalid URL (", req.method, " ", req.path, ")"),
                        "not_found"));
    return finish();
  }
  if (!AllowsMethod(*route, req.method)) {
    const std::string allow(route->allow);
    res->SetHeader("Allow", allow);
    SendError(*res, ErrorForHttpStatus(405,
                                       absl::StrCat("Method ", req.method, " is not allowed on ",
                                                    req.path, "; use ", allow),
                                       "method_not_allowed"));
    return finish();
  }
  if (req.method == "POST" && !IsJsonContentType(req.Header("Content-Type"))) {
    SendError(*res, ErrorForHttpStatus(
                        415, "Send the request body as JSON with 'Content-Type: application/json'.",
                        "unsupported_media_type"));
    return finish();
  }
  std::shared_ptr<GenerationJob> job;
  route->handler({*route, ctx, req, res, record, tenant, &job});
  if (job == nullptr) return finish();
  return job;
}

}  // namespace banyan::server::http
