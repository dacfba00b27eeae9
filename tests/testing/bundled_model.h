// The bundled stories260K model (models/stories260K, the default model and the reference of the
// CPU tests), loaded once per test binary and kept to its end.
#pragma once

#include <cstdlib>
#include <string>

#include "engine/model_bundle.h"
#include "gtest/gtest.h"

namespace banyan::testing {

inline const std::string& BundledModelDir() {
  static const std::string dir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K";
  return dir;
}

inline const engine::ModelBundle& BundledModel() {
  static const engine::ModelBundle* bundle = [] {
    auto b = engine::LoadModelBundle(BundledModelDir() + "/stories260K.bin");
    if (!b.ok()) {
      ADD_FAILURE() << "the bundled model: " << b.status();
      std::abort();
    }
    return new engine::ModelBundle(*std::move(b));
  }();
  return *bundle;
}

}  // namespace banyan::testing
