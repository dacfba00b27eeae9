#include "server/http/http_server.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/http/http_connection.h"
#include "server/http/http_log.h"

namespace banyan::server::http {

HttpFrontEnd::HttpFrontEnd(ServerContext* ctx, HttpFrontEndOptions options)
    : impl_(std::make_unique<Impl>(ctx, options)) {}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

int HttpFrontEnd::port() const { return impl_->port; }

int64_t HttpFrontEnd::responses_in_flight() const { return impl_->jobs_in_flight(); }

bool HttpFrontEnd::WaitDelivered(std::chrono::steady_clock::time_point deadline) {
  return impl_->WaitJobs(deadline);
}

absl::Status HttpFrontEnd::Start() {
  if (impl_->started) return absl::FailedPreconditionError("HttpFrontEnd already started");
  return impl_->Start();
}

void HttpFrontEnd::Stop() { impl_->Stop(); }

}  // namespace banyan::server::http
