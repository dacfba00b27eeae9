#include "server/common/rejections.h"

#include "server/common/validation.h"

namespace banyan::server {

std::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBadRequest: return "bad_request";
    case RejectReason::kPromptTooLong: return "prompt_too_long";
    case RejectReason::kUnauthorized: return "unauthorized";
    case RejectReason::kForbiddenHost: return "forbidden_host";
    case RejectReason::kNotFound: return "not_found";
    case RejectReason::kMethodNotAllowed: return "method_not_allowed";
    case RejectReason::kBodyTooLarge: return "body_too_large";
    case RejectReason::kUnsupportedMediaType: return "unsupported_media_type";
    case RejectReason::kHeaderTooLarge: return "header_too_large";
    case RejectReason::kTenantConcurrency: return "tenant_concurrency";
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kDraining: return "draining";
    case RejectReason::kHeadTimeout: return "head_timeout";
    case RejectReason::kBodyTimeout: return "body_timeout";
    case RejectReason::kInternalError: return "internal_error";
  }
  return "internal_error";
}

namespace {

bool IsPromptTooLongCode(std::string_view code) {
  return code == "prompt_too_long" || code == "context_length_exceeded";
}

}  // namespace

RejectReason RejectReasonForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return IsPromptTooLongCode(StatusCode(status)) ? RejectReason::kPromptTooLong
                                                     : RejectReason::kBadRequest;
    case absl::StatusCode::kUnauthenticated: return RejectReason::kUnauthorized;
    case absl::StatusCode::kNotFound: return RejectReason::kNotFound;
    case absl::StatusCode::kResourceExhausted: return RejectReason::kQueueFull;
    case absl::StatusCode::kUnavailable: return RejectReason::kDraining;
    default: return RejectReason::kInternalError;
  }
}

RejectReason RejectReasonForHttp(int http_status, std::string_view error_code) {
  switch (http_status) {
    case 400:
      return IsPromptTooLongCode(error_code) ? RejectReason::kPromptTooLong
                                             : RejectReason::kBadRequest;
    case 401: return RejectReason::kUnauthorized;
    case 403: return RejectReason::kForbiddenHost;
    case 404: return RejectReason::kNotFound;
    case 405: return RejectReason::kMethodNotAllowed;
    case 413: return RejectReason::kBodyTooLarge;
    case 415: return RejectReason::kUnsupportedMediaType;
    case 429: return RejectReason::kQueueFull;
    case 431: return RejectReason::kHeaderTooLarge;
    case 503: return RejectReason::kDraining;
    default:
      return http_status >= 400 && http_status < 500 ? RejectReason::kBadRequest
                                                     : RejectReason::kInternalError;
  }
}

void RejectionCounters::Add(RejectReason reason, std::string_view tenant) {
  absl::MutexLock lock(&mu_);
  ++counts_[{reason, std::string(tenant)}];
}

std::vector<RejectionSample> RejectionCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<RejectionSample> out;
  out.reserve(counts_.size());
  for (const auto& [key, count] : counts_) {
    out.push_back({RejectReasonName(key.first), key.second, count});
  }
  return out;
}

int64_t RejectionCounters::Count(RejectReason reason, std::string_view tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find({reason, std::string(tenant)});
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace banyan::server
