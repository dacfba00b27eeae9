// main() of every GPU test binary (banyan_add_test with LABELS gpu links it instead of
// gtest_main): without a usable CUDA device the binary runs nothing and exits kSkipExitCode, which
// ctest reports as skipped; with one, every test runs and must pass. Host-only tests therefore
// live in host binaries (tests/kernels/cuda's cuda_host_test), where CI runs them.
#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "tests/testing/skip_main.h"

namespace {

std::optional<std::string> MissingDevice() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device (cudaGetDeviceCount found 0)";
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  return banyan::testing::RunTestsOrSkip(argc, argv, &MissingDevice);
}
