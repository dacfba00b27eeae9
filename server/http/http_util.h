// Small helpers shared by the HTTP handlers: JSON and error responses, request ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/http/http_types.h"
#include "server/http/openai_json.h"

namespace banyan::server::http {

void SendJson(HttpResponse& res, int http_status, const Json& body);
// The OpenAI error body with the error's HTTP status (and Retry-After on 429 / 503).
void SendError(HttpResponse& res, const ApiError& error);
void SendStatus(HttpResponse& res, const absl::Status& status);

std::string BodyTooLargeMessage(int64_t max_body_bytes);

// `prefix` followed by 32 random hex digits (128 bits).
std::string MakeRequestId(std::string_view prefix);
int64_t UnixSeconds();

}  // namespace banyan::server::http
