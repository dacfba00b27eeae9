// The fixture the configuration tests share: a fresh folder per test, files written into it,
// and LoadDaemonConfig driven with command-line words.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/common/config.h"

namespace banyan::server::testing {

class ConfigFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("banyan_config_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `text` to dir_/rel (creating its folders); returns the path.
  std::filesystem::path Write(const std::filesystem::path& rel, const std::string& text) {
    const std::filesystem::path p = dir_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  static absl::StatusOr<DaemonConfig> Load(std::vector<std::string> args) {
    args.insert(args.begin(), "banyand");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return LoadDaemonConfig(static_cast<int>(argv.size()), argv.data());
  }
  static std::string Error(const absl::StatusOr<DaemonConfig>& c) {
    return c.ok() ? "OK" : std::string(c.status().message());
  }

  std::filesystem::path dir_;
};

inline bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace banyan::server::testing
