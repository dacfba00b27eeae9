// The HTTP front end's spdlog logger ("http"), created on first use, and its access log: one
// info line per request, carrying the request id.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "server/common/rejections.h"
#include "spdlog/spdlog.h"

namespace banyan::server::http {

spdlog::logger& HttpLog();

// What the access-log line of one request says. Filled in by the handler; written once, when
// the response is complete (for a stream: when the stream ends or the client goes away).
struct AccessRecord {
  std::string id;  // request id ("cmpl-…", "chatcmpl-…", or "req-…" for other endpoints)
  std::string method;
  std::string path;
  int status = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::string note;  // e.g. "client disconnected"
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool deferred = false;  // a stream owns the record and logs it when it ends
  // The authenticated tenant's configured name; "" before authentication.
  std::string tenant;
  // Why the request was refused, where its HTTP status alone does not tell (a 429 for the
  // tenant's limit); unset: RejectReasonForHttp.
  std::optional<RejectReason> reject_reason;
};

// "[http] cmpl-… POST /v1/completions 200 prompt=5 cached=0 completion=16 12.3ms".
void LogAccess(const AccessRecord& record);

}  // namespace banyan::server::http
