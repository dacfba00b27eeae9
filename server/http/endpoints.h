// The routes of the OpenAI HTTP API and the checks every request passes first.
//
//   POST /v1/completions, POST /v1/chat/completions   generation (generation.h), SSE streaming
//   GET  /v1/models, GET /v1/models/{id}              the one served model
//   POST /tokenize   {prompt | messages, add_special_tokens, add_generation_prompt, model}
//                    -> {tokens, count, max_model_len}
//   POST /detokenize {tokens, model} -> {prompt}
//   GET  /health     200 while the process runs
//   GET  /ready      200 when *ctx->ready, else 503 (loading or draining)
//   GET  /metrics    Prometheus text 0.0.4 (server/common/metrics_text.h, docs/metrics.md)
//
// Checks, in order (docs/security.md says why):
//  1. Host: with no API keys configured and a loopback listen address, the Host header must name
//     a loopback host (localhost, 127.0.0.1, [::1], with any port), so that a web page the user
//     visits cannot reach the daemon through DNS rebinding (403 otherwise).
//  2. Auth: with API keys, every endpoint except /health and /ready needs
//     "Authorization: Bearer <key>" (401 invalid_api_key otherwise).
//  3. Unknown path 404, known path with another method 405 (with Allow).
//  4. POST bodies must be declared "Content-Type: application/json" (415 otherwise): a browser
//     can send text/plain or form bodies across origins without asking, never JSON.
//
// Every request gets an id (cmpl-/chatcmpl- for generation, req- otherwise), returned in the
// X-Request-Id header, and one info line in the "http" log when it completes.
#pragma once

#include <memory>

#include "server/http/generation.h"
#include "server/http/http_log.h"
#include "server/http/http_types.h"
#include "server/common/server_context.h"

namespace banyan::server::http {

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

// True when `host_header` names a loopback host ("localhost", "127.0.0.1", "[::1]", any port).
bool IsLoopbackHostHeader(std::string_view host_header);

}  // namespace banyan::server::http
