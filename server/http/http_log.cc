#include "server/http/http_log.h"

#include <memory>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace banyan::server::http {

spdlog::logger& HttpLog() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> l = spdlog::get("http");
    return l != nullptr ? l : spdlog::stderr_color_mt("http");
  }();
  return *logger;
}

void LogAccess(const AccessRecord& r) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start).count();
  HttpLog().info("[http] {} {} {} {} prompt={} cached={} completion={} {:.1f}ms{}{}", r.id,
                 r.method, r.path, r.status, r.prompt_tokens, r.cached_tokens, r.completion_tokens,
                 ms, r.note.empty() ? "" : " ", r.note);
}

}  // namespace banyan::server::http
