// Fuzzes the llama2.c checkpoint loader (model/llama2c_loader.h) on arbitrary file
// contents. Weights that load must pass CheckLoadedWeights.
#include <cstddef>
#include <cstdint>

#include "model/llama2c_loader.h"
#include "model/model_log.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/weights_check.h"

// The loaders log (unused tensors, loaded shapes) to stderr; per input that would bury
// libFuzzer's own output and slow it down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  banyan::model::ModelLog().set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::model;
  static banyan::fuzz::MemFile* file = new banyan::fuzz::MemFile;
  file->Assign(data, size);
  absl::StatusOr<ModelWeights> w = LoadLlama2c(file->path());
  if (w.ok()) banyan::fuzz::CheckLoadedWeights(*w);
  return 0;
}
