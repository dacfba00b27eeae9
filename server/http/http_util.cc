#include "server/http/http_util.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace banyan::server::http {

void SendJson(httplib::Response& res, int http_status, const Json& body) {
  res.status = http_status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& error) {
  if (error.http_status == 429 || error.http_status == 503) res.set_header("Retry-After", "1");
  SendJson(res, error.http_status, ErrorJson(error));
}

void SendStatus(httplib::Response& res, const absl::Status& status) {
  SendError(res, ErrorFromStatus(status));
}

std::string BodyTooLargeMessage(int64_t max_body_bytes) {
  return "The request body is larger than this server's limit of " +
         std::to_string(max_body_bytes) + " bytes.";
}

bool RejectOversizedBody(const httplib::Request& req, int64_t max_body_bytes,
                         httplib::Response& res) {
  if (max_body_bytes <= 0 || req.body.size() <= static_cast<size_t>(max_body_bytes)) return false;
  SendError(res, ErrorForHttpStatus(413, BodyTooLargeMessage(max_body_bytes), "request_too_large"));
  return true;
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
