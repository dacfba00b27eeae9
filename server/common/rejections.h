// Counts of requests the front ends turn away, by reason and tenant, for /metrics
// (banyan_requests_rejected_total{reason,tenant}, docs/metrics.md).
//
// A refusal is any request answered with an error before it was admitted: malformed HTTP,
// limits (head, body, prompt), authentication, routing, validation, a tenant's concurrency
// limit, a full queue, draining. Both front ends count into the one RejectionCounters of their
// ServerContext.
//
// Cardinality: the reason is one of a fixed set (RejectReason) and the tenant label is the
// configured name of the authenticated tenant, or "" when the request was refused before it was
// authenticated (malformed HTTP, bad key, body limits). Nothing a client writes ever becomes a
// label, so the number of series is at most reasons x (configured tenants + 1).
//
// Thread safety: Add and Snapshot may run on any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace banyan::server {

enum class RejectReason {
  kBadRequest,            // malformed HTTP, bad JSON, a field out of range (400)
  kPromptTooLong,         // prompt over max_prompt_bytes or the context length (400)
  kUnauthorized,          // missing or unknown API key (401)
  kForbiddenHost,         // loopback daemon without keys, foreign Host header (403)
  kNotFound,              // unknown path or model (404)
  kMethodNotAllowed,      // (405)
  kBodyTooLarge,          // body over max_body_bytes, before or after decompression (413)
  kUnsupportedMediaType,  // not JSON, unknown Content-Encoding (415)
  kHeaderTooLarge,        // request head over 16 KiB (431)
  kTenantConcurrency,     // the tenant has max_concurrent_requests in flight (429)
  kQueueFull,             // the scheduler's waiting queue is full (429)
  kDraining,              // loading, draining or shutting down (503)
  kHeadTimeout,           // a request head started but not finished within the head timeout
  kBodyTimeout,           // a request body not finished within the body timeout
  kInternalError,         // anything else (500)
};

// The label value: "bad_request", "tenant_concurrency", ...
std::string_view RejectReasonName(RejectReason reason);

// The reason for a refusal given as a Status (the front ends' errors, server/common/validation.h):
// InvalidArgument / FailedPrecondition / OutOfRange are bad_request, or prompt_too_long when
// the status' code payload is "prompt_too_long" or "context_length_exceeded"; Unauthenticated
// unauthorized; NotFound not_found; ResourceExhausted queue_full (the tenant limit is told
// apart by its caller); Unavailable draining; anything else internal_error.
RejectReason RejectReasonForStatus(const absl::Status& status);

// The reason for an HTTP error status, with the OpenAI error code it carries (for 400).
// 429 is queue_full; the tenant limit is told apart by its caller.
RejectReason RejectReasonForHttp(int http_status, std::string_view error_code);

struct RejectionSample {
  std::string_view reason;  // RejectReasonName
  std::string tenant;       // a configured tenant name, or "" (not authenticated)
  int64_t count = 0;
};

class RejectionCounters {
 public:
  // `tenant`: the authenticated tenant's configured name; "" before authentication.
  void Add(RejectReason reason, std::string_view tenant);
  // Every (reason, tenant) counted so far, ordered by reason, then tenant.
  std::vector<RejectionSample> Snapshot() const;
  // One series' count (tests, logs).
  int64_t Count(RejectReason reason, std::string_view tenant) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<RejectReason, std::string>, int64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace banyan::server
