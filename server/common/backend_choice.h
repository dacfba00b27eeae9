// Which backend banyand runs on (--backend auto|cpu|cuda, server/common/config.h).
//
// "auto" (the default) picks CUDA when this banyand was built with the CUDA backend and at
// least one CUDA device is visible to it (CUDA_VISIBLE_DEVICES, the container runtime's
// device list), else the CPU; the reason is returned for the start-up log, so a pod that
// silently fell back to the CPU says why. "cpu" and "cuda" are taken as given: a "cuda" that
// cannot run fails start-up with its own error instead of falling back.
#pragma once

#include <string>
#include <string_view>

namespace banyan::server {

struct BackendChoice {
  std::string backend;  // "cpu" or "cuda"
  std::string reason;   // for the log: why this one
};

// `requested`: "auto", "cpu" or "cuda". `built_with_cuda`: the CUDA backend is compiled in.
// `cuda_devices`: devices visible (0 when none or when asking failed); `cuda_error`: why asking
// failed ("" when it did not), quoted in the reason.
BackendChoice ChooseBackend(std::string_view requested, bool built_with_cuda, int cuda_devices,
                            std::string_view cuda_error);

}  // namespace banyan::server
