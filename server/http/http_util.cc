#include "server/http/http_util.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace banyan::server::http {

void SendJson(HttpResponse& res, int http_status, const Json& body) {
  res.status = http_status;
  res.content_type = "application/json";
  res.body = Dump(body);
}

void SendError(HttpResponse& res, const ApiError& error) {
  if (error.http_status == 429 || error.http_status == 503) res.SetHeader("Retry-After", "1");
  SendJson(res, error.http_status, ErrorJson(error));
  res.error_code = error.code;
}

void SendStatus(HttpResponse& res, const absl::Status& status) {
  SendError(res, ErrorFromStatus(status));
}

std::string BodyTooLargeMessage(int64_t max_body_bytes) {
  return "The request body is larger than this server's limit of " +
         std::to_string(max_body_bytes) + " bytes.";
}

std::string MakeRequestId(std::string_view prefix) {
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return std::string(prefix) + buf;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace banyan::server::http
