// Fuzzes the safetensors reader and the Hugging Face folder loader on arbitrary file contents:
//  - SafetensorsFile::Open on the bytes, then ReadTensor of every entry it lists;
//  - LoadHfFolder on a folder whose config.json is kTinyHfConfig (tiny_model.h) and whose
//    model.safetensors is the bytes, so the loader's shape and dtype checks are reached.
// The folder lives in $TMPDIR (or /tmp); model.safetensors is a symlink to the in-memory file,
// so each input costs no disk write. Weights that load must pass CheckLoadedWeights.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/model_log.h"
#include "model/safetensors_file.h"
#include "model/safetensors_loader.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/tiny_model.h"
#include "tests/fuzz/weights_check.h"

namespace banyan::fuzz {
namespace {

struct Folder {
  MemFile file;
  std::string dir;
};

std::filesystem::path TempRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

void RemoveFolder();

Folder& GetFolder() {
  static Folder* folder = [] {
    auto* f = new Folder;
    std::string pattern = (TempRoot() / "banyan-fuzz-hf-XXXXXX").string();
    FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr);
    f->dir = pattern;
    std::ofstream(f->dir + "/config.json") << kTinyHfConfig;
    FUZZ_CHECK(symlink(f->file.path().c_str(), (f->dir + "/model.safetensors").c_str()) == 0);
    std::atexit(RemoveFolder);
    return f;
  }();
  return *folder;
}

void RemoveFolder() {
  std::error_code ec;
  std::filesystem::remove_all(GetFolder().dir, ec);
}

}  // namespace
}  // namespace banyan::fuzz

// The loaders log (unused tensors, loaded shapes) to stderr; per input that would bury
// libFuzzer's own output and slow it down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  banyan::model::ModelLog().set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::model;
  banyan::fuzz::Folder& folder = banyan::fuzz::GetFolder();
  folder.file.Assign(data, size);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> st = SafetensorsFile::Open(folder.file.path());
  if (st.ok()) {
    for (const auto& [name, entry] : (*st)->entries()) {
      Tensor t;
      if ((*st)->ReadTensor(name, &t).ok()) {
        FUZZ_CHECK(t.shape == entry.shape);
        FUZZ_CHECK(t.data.size() == static_cast<size_t>(t.numel()));
      }
      std::vector<uint8_t> codes;  // FP8 entries: one byte per element
      if ((*st)->ReadFp8Codes(name, &codes).ok()) {
        int64_t numel = 1;
        for (int64_t d : entry.shape) numel *= d;
        FUZZ_CHECK(codes.size() == static_cast<size_t>(numel));
      }
    }
  }

  absl::StatusOr<ModelWeights> w = LoadHfFolder(folder.dir);
  if (w.ok()) banyan::fuzz::CheckLoadedWeights(*w);
  return 0;
}
