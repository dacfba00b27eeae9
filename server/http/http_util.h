// Small helpers shared by the HTTP handlers: JSON and error responses, request ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "httplib.h"
#include "server/http/openai_json.h"

namespace banyan::server::http {

void SendJson(httplib::Response& res, int http_status, const Json& body);
// The OpenAI error body with the error's HTTP status (and Retry-After on 429 / 503).
void SendError(httplib::Response& res, const ApiError& error);
void SendStatus(httplib::Response& res, const absl::Status& status);

// httplib enforces the body limit only for bodies with a Content-Length; a chunked request body
// is checked here. Sends 413 and returns true when `req.body` is over `max_body_bytes`.
bool RejectOversizedBody(const httplib::Request& req, int64_t max_body_bytes,
                         httplib::Response& res);
std::string BodyTooLargeMessage(int64_t max_body_bytes);

// `prefix` followed by 32 random hex digits (128 bits).
std::string MakeRequestId(std::string_view prefix);
int64_t UnixSeconds();

}  // namespace banyan::server::http
