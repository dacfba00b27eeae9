#include "model/model_log.h"

#include "spdlog/sinks/stdout_color_sinks.h"

namespace banyan::model {

spdlog::logger& ModelLog() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> l = spdlog::get("model");
    return l != nullptr ? l : spdlog::stderr_color_mt("model");
  }();
  return *logger;
}

}  // namespace banyan::model
