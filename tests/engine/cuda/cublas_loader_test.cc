// cuBLAS is opened on first use (engine/cuda/cublas_loader.h): a process linked with the CUDA
// backend maps neither library until something asks for them, and then every entry point
// resolves. Host-only: needs the CUDA toolkit's libraries, not a device.
#include "engine/cuda/cublas_loader.h"

#include <cublas_v2.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace banyan::engine::cuda {
namespace {

bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublas") != std::string::npos;
}

// In a fresh process (the threadsafe death-test style runs the binary again for this test
// alone), so that no other test of this binary has touched cuBLAS first.
TEST(CublasLoaderTest, NothingIsMappedUntilFirstUseThenEveryEntryPointResolves) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (CublasMapped()) std::_Exit(2);
        if (!LoadCublas().ok()) std::_Exit(3);
        if (!CublasMapped()) std::_Exit(4);
        // A call through the forwarding functions reaches the library.
        if (std::string(cublasGetStatusName(CUBLAS_STATUS_SUCCESS)) != "CUBLAS_STATUS_SUCCESS") {
          std::_Exit(5);
        }
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "")
      << "exit 2: cuBLAS mapped at start; 3: LoadCublas failed (" << LoadCublas().message()
      << "); 4: not mapped after loading; 5: a forwarded call returned the wrong name";
}

}  // namespace
}  // namespace banyan::engine::cuda
