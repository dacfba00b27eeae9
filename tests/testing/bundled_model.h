// The bundled stories260K model (models/stories260K, the default model and the reference of the
// CPU tests), loaded once per test binary and kept to its end.
//
// Where it is found, first match wins, so that a binary copied to another machine or run from
// any folder still finds it:
//   1. $BANYAN_MODEL_DIR: the stories260K folder itself;
//   2. $BANYAN_SOURCE_DIR/models/stories260K: a checkout;
//   3. models/stories260K in the binary's own folder (/proc/self/exe) or any folder above it: a
//      build folder inside the checkout;
//   4. the checkout the binary was configured from (the BANYAN_SOURCE_DIR macro).
// A variable that is set but points at no model is an error naming it, never a silent fall
// through to another copy.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_bundle.h"
#include "gtest/gtest.h"

namespace banyan::testing {

inline constexpr char kBundledModelFile[] = "stories260K.bin";

inline absl::StatusOr<std::string> FindBundledModelDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto has_model = [&ec](const fs::path& dir) {
    return fs::is_regular_file(dir / kBundledModelFile, ec);
  };
  if (const char* env = std::getenv("BANYAN_MODEL_DIR"); env != nullptr && *env != '\0') {
    if (has_model(env)) return std::string(env);
    return absl::NotFoundError(std::string("BANYAN_MODEL_DIR=") + env + " holds no " +
                               kBundledModelFile + " (it names the stories260K folder itself)");
  }
  if (const char* env = std::getenv("BANYAN_SOURCE_DIR"); env != nullptr && *env != '\0') {
    const fs::path dir = fs::path(env) / "models" / "stories260K";
    if (has_model(dir)) return dir.string();
    return absl::NotFoundError(std::string("BANYAN_SOURCE_DIR=") + env + ": no " +
                               (dir / kBundledModelFile).string() +
                               " (it names the checkout's top folder)");
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path d = exe.parent_path(); !d.empty(); d = d.parent_path()) {
      if (has_model(d / "models" / "stories260K")) return (d / "models" / "stories260K").string();
      if (d == d.root_path()) break;
    }
  }
  const fs::path configured = fs::path(BANYAN_SOURCE_DIR) / "models" / "stories260K";
  if (has_model(configured)) return configured.string();
  return absl::NotFoundError(
      std::string("the bundled model (models/stories260K/") + kBundledModelFile +
      ") is neither above " + (ec ? std::string("this binary") : exe.string()) + " nor in " +
      configured.string() +
      "; set BANYAN_SOURCE_DIR to a checkout or BANYAN_MODEL_DIR to its stories260K folder");
}

// The folder FindBundledModelDir finds; aborts, saying why, where there is none (every caller
// needs the model, and a test binary without it can only report that).
inline const std::string& BundledModelDir() {
  static const std::string dir = [] {
    absl::StatusOr<std::string> d = FindBundledModelDir();
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.status().ToString().c_str());
      std::abort();
    }
    return *std::move(d);
  }();
  return dir;
}

// BundledModelDir()/stories260K.bin.
inline std::string BundledModelPath() { return BundledModelDir() + "/" + kBundledModelFile; }

inline const model::ModelBundle& BundledModel() {
  static const model::ModelBundle* bundle = [] {
    auto b = model::LoadModelBundle(BundledModelPath());
    if (!b.ok()) {
      ADD_FAILURE() << "the bundled model: " << b.status();
      std::abort();
    }
    return new model::ModelBundle(*std::move(b));
  }();
  return *bundle;
}

}  // namespace banyan::testing
