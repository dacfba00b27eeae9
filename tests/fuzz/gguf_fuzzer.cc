// Fuzzes the GGUF loader (model/gguf_loader.h) on arbitrary file contents, with the
// tokenizer metadata read too. A vocabulary that loads must validate and give a Tokenizer, as
// LoadModelBundle expects; loaded weights must pass CheckLoadedWeights.
#include <cstddef>
#include <cstdint>

#include "model/gguf_loader.h"
#include "model/model_log.h"
#include "text/tokenizer/spm_model_reader.h"
#include "text/tokenizer/tokenizer.h"
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
  using namespace banyan::text;
  static banyan::fuzz::MemFile* file = new banyan::fuzz::MemFile;
  file->Assign(data, size);
  SpmVocab vocab;
  absl::StatusOr<ModelWeights> w = LoadGguf(file->path(), &vocab);
  if (!w.ok()) return 0;
  banyan::fuzz::CheckLoadedWeights(*w);
  if (ValidateSpmVocab(vocab).ok()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromVocab(std::move(vocab));
    if (tok.ok()) (void)(*tok)->Decode((*tok)->Encode("Once upon a time", true));
  }
  return 0;
}
