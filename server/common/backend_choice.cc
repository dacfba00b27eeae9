#include "server/common/backend_choice.h"

#include "absl/strings/str_cat.h"

namespace banyan::server {

BackendChoice ChooseBackend(std::string_view requested, bool built_with_cuda, int cuda_devices,
                            std::string_view cuda_error) {
  if (requested != "auto") {
    return {std::string(requested), "--backend " + std::string(requested)};
  }
  if (!built_with_cuda) {
    return {"cpu", "--backend auto: this banyand was built without the CUDA backend"};
  }
  if (cuda_devices <= 0) {
    std::string why = "--backend auto: no CUDA device is visible";
    if (!cuda_error.empty()) why += " (" + std::string(cuda_error) + ")";
    return {"cpu", why};
  }
  return {"cuda", absl::StrCat("--backend auto: ", cuda_devices, " CUDA device",
                               cuda_devices == 1 ? "" : "s", " visible; using device 0")};
}

}  // namespace banyan::server
