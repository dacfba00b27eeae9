// The model module's spdlog logger ("model"), created on first use.
#pragma once

#include <memory>

#include "spdlog/spdlog.h"

namespace banyan::model {

spdlog::logger& ModelLog();

}  // namespace banyan::model
