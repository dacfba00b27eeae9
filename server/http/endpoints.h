// The routes of the OpenAI HTTP API and the checks every request passes first.
//
// Every route is one line of the route table (kRoutes in endpoints.cc, read through Routes()):
// its path, the methods it takes, whether it needs an API key, whether it is a probe, and its
// handler, whose comment says what it answers. The 404, the 405 and its Allow header, the auth
// exemption, the probes answered on the I/O thread, the quiet access lines and the refusal
// counters are all read from that table; nothing else lists paths. "GET" always means GET and
// HEAD.
//
// Checks, in order (docs/security.md says why):
//  1. Host: with no API keys configured and a loopback listen address, the Host header must name
//     a loopback host (localhost, 127.0.0.1, [::1], with any port), so that a web page the user
//     visits cannot reach the daemon through DNS rebinding (403 otherwise).
//  2. Auth: with API keys, every path except the probes (/health, /ready) needs
//     "Authorization: Bearer <key>" (401 invalid_api_key otherwise); unknown paths too.
//  3. Unknown path 404, known path with another method 405 (with Allow).
//  4. POST bodies must be declared "Content-Type: application/json" (415 otherwise): a browser
//     can send text/plain or form bodies across origins without asking, never JSON.
//
// Every request gets an id (cmpl-/chatcmpl- for generation, req- otherwise), returned in the
// X-Request-Id header, and one info line in the "http" log when it completes.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "server/http/generation.h"
#include "server/http/http_log.h"
#include "server/http/http_types.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

// What a handler gets: the request, the response to fill, the access-log record and the
// authenticated tenant (null only on routes that need no key).
struct Route;
struct RouteCall {
  const Route& route;
  ServerContext* ctx;
  const HttpRequest& req;
  HttpResponse* res;
  const std::shared_ptr<AccessRecord>& record;
  const Tenant* tenant;
  std::shared_ptr<GenerationJob>* job;  // generation sets it; the answer then comes from the job
};

// Fills *call.res, or sets *call.job to the generation job that will produce the answer.
using RouteHandler = void (*)(const RouteCall& call);

struct Route {
  std::string_view path;   // exact; with a trailing '/', also every path below it
  std::string_view allow;  // the methods, as the Allow header lists them: "POST" or "GET, HEAD"
  bool needs_key;          // with API keys configured, only a valid key gets past check 2
  // A liveness / readiness probe: answered on the I/O thread (GET, HEAD), its access line at
  // debug level, never counted as a refusal.
  bool probe;
  bool quiet;  // a successful answer's access line is at debug level (probes, scrapes)
  RouteHandler handler;
};

// The route table, in match order.
std::span<const Route> Routes();
// The route of `path`; null for an unknown path.
const Route* FindRoute(std::string_view path);
// Whether `route` takes `method` (one of those in route.allow).
bool AllowsMethod(const Route& route, std::string_view method);

// Handles one request. Fills *res and returns nullptr, or returns the generation job that will
// produce the answer. `record` is filled for the access log; the caller logs it unless
// record->deferred (a job logs its own).
std::shared_ptr<GenerationJob> Dispatch(ServerContext* ctx, const HttpRequest& req,
                                        HttpResponse* res,
                                        const std::shared_ptr<AccessRecord>& record);

// The access-log line of a request that has no job (quiet paths at debug level).
void LogRequest(const AccessRecord& record);

// Counts `res` in ctx->rejections when it refuses the request (an error status on anything but
// the probes /health and /ready), under record.tenant.
void CountRefusal(ServerContext* ctx, const AccessRecord& record, const HttpResponse& res);

// GET / HEAD on a probe route: answered on the I/O thread, before any body is read.
bool IsProbeRequest(const HttpRequest& req);

// True when `host_header` names a loopback host ("localhost", "127.0.0.1", "[::1]", any port).
bool IsLoopbackHostHeader(std::string_view host_header);

}  // namespace banyan::server::http
