// The one way a test binary skips as a whole: when something its tests need is missing (a CUDA
// device, an npm oracle), main() prints one line that says what and why, runs no test and exits
// with kSkipExitCode, which banyan_add_test registers as ctest's SKIP_RETURN_CODE. Otherwise every
// test runs and the exit status is gtest's: a failing test fails the binary, and a GTEST_SKIP
// inside it is never counted as a skip of the binary (ctest reads only the exit code).
//
// A binary that uses it defines its own main (banyan_add_test(... MAIN own)):
//   int main(int argc, char** argv) {
//     return banyan::testing::RunTestsOrSkip(argc, argv, &MissingOracle);
//   }
// where MissingOracle returns why the tests cannot run, or std::nullopt when they can.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace banyan::testing {

// Matches SKIP_RETURN_CODE in cmake/BanyanHelpers.cmake and tests/e2e/run.sh (the automake
// convention for "skipped").
inline constexpr int kSkipExitCode = 77;

// Why this binary's tests cannot run here, or std::nullopt when they can.
using MissingPrerequisite = std::optional<std::string> (*)();

inline int RunTestsOrSkip(int argc, char** argv, MissingPrerequisite missing) {
  ::testing::InitGoogleTest(&argc, argv);
  // Listing tests needs no device or oracle.
  if (!GTEST_FLAG_GET(list_tests)) {
    if (const std::optional<std::string> why = missing(); why.has_value()) {
      std::printf("[ BANYAN SKIPPED BINARY ] %s: %s; no test ran (exit %d)\n", argv[0],
                  why->c_str(), kSkipExitCode);
      std::fflush(stdout);
      return kSkipExitCode;
    }
  }
  return RUN_ALL_TESTS();
}

}  // namespace banyan::testing
