#include "engine/model_bundle.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf_loader.h"
#include "engine/model/model_io.h"

namespace banyan::engine {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<std::string> FindTokenizerBeside(const fs::path& model) {
  fs::path dir = fs::is_directory(model) ? model : model.parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.model")) return (dir / "tokenizer.model").string();
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".model") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  return absl::NotFoundError(absl::StrCat(
      "no tokenizer for ", model.string(), ": expected tokenizer.model (or a single *.model) in ",
      dir.string(), "; pass --tokenizer FILE"));
}

}  // namespace

absl::StatusOr<ModelBundle> LoadModelBundle(const std::string& model_path,
                                            const std::string& tokenizer_path) {
  ModelBundle b;
  const bool gguf = model_path.size() > 5 && model_path.ends_with(".gguf");
  if (gguf) {
    SpmVocab vocab;
    auto w = LoadGguf(model_path, &vocab);
    if (!w.ok()) return w.status();
    b.weights = std::move(*w);
    if (tokenizer_path.empty()) {
      auto tok = Tokenizer::FromVocab(std::move(vocab));
      if (!tok.ok()) return tok.status();
      b.tokenizer = std::move(*tok);
      b.tokenizer_path = "<gguf metadata>";
      return b;
    }
  } else {
    auto w = LoadModel(model_path);
    if (!w.ok()) return w.status();
    b.weights = std::move(*w);
  }
  std::string tp = tokenizer_path;
  if (tp.empty()) {
    auto found = FindTokenizerBeside(model_path);
    if (!found.ok()) return found.status();
    tp = *found;
  }
  auto tok = Tokenizer::FromFile(tp);
  if (!tok.ok()) return tok.status();
  b.tokenizer = std::move(*tok);
  b.tokenizer_path = tp;
  if (b.tokenizer->vocab_size() != b.weights.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer ", tp, " has ", b.tokenizer->vocab_size(), " pieces but the model ",
        model_path, " has a vocabulary of ", b.weights.config.vocab_size));
  }
  return b;
}

std::string FindBundledModel(const char* argv0) {
  const fs::path rel = fs::path("models") / "stories260K" / "stories260K.bin";
  std::vector<fs::path> candidates = {rel};
  std::error_code ec;
  fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec && argv0 != nullptr) exe = fs::absolute(argv0, ec);
  for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    candidates.push_back(p / rel);
  }
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return c.string();
  }
  return "";
}

}  // namespace banyan::engine
