#include "model/model_bundle.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/json_limits.h"
#include "model/dummy_weights.h"
#include "model/weights_layout.h"
#include "model/gguf_loader.h"
#include "model/model_io.h"
#include "text/tokenizer/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace banyan::model {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<std::string> FindTokenizerBeside(const fs::path& model) {
  fs::path dir = fs::is_directory(model) ? model : model.parent_path();
  if (dir.empty()) dir = ".";
  // tokenizer.json first: its ids are what transformers' (fast) tokenizer gives, which is what
  // the model was trained and evaluated with; tokenizer.model can differ (e.g. Llama 2's legacy
  // handling of text after special tokens).
  if (fs::exists(dir / "tokenizer.json")) return (dir / "tokenizer.json").string();
  if (fs::exists(dir / "tokenizer.model")) return (dir / "tokenizer.model").string();
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".model") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  return absl::NotFoundError(absl::StrCat(
      "no tokenizer for ", model.string(),
      ": expected tokenizer.json, tokenizer.model (or a single *.model) in ",
      dir.string(), "; pass --tokenizer FILE"));
}

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string TokenText(const nlohmann::json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

absl::StatusOr<std::string> ReadSmallFile(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec || size > (size_t{16} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(p.string(), ": unreadable or larger than 16 MiB"));
  }
  std::ifstream in(p, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return absl::InvalidArgumentError(p.string() + ": read error");
  return text;
}

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} from
// which "default" is taken; null or absent is none. Any other shape is refused rather than
// served with the plain template, which would answer every chat request with the wrong prompt.
absl::Status ReadTemplateField(const nlohmann::json& cfg, const std::string& file,
                               ModelBundle* b) {
  const auto t = cfg.find("chat_template");
  if (t == cfg.end() || t->is_null()) return absl::OkStatus();
  if (t->is_string()) {
    b->chat_template = t->get<std::string>();
    return absl::OkStatus();
  }
  const auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": chat_template ", what,
        "; it must be a string or a list of {\"name\": string, \"template\": string}"));
  };
  if (!t->is_array()) return bad(absl::StrCat("is a JSON ", t->type_name()));
  for (size_t i = 0; i < t->size(); ++i) {
    const nlohmann::json& e = (*t)[i];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
        !e.contains("template") || !e["template"].is_string()) {
      return bad(absl::StrCat("entry ", i, " is not {\"name\": string, \"template\": string}"));
    }
    if (e["name"].get<std::string>() == "default") {
      b->chat_template = e["template"].get<std::string>();
    }
  }
  return absl::OkStatus();
}

// The chat template and special-token texts of a model folder (see the header).
absl::Status ReadChatTemplate(const fs::path& model, ModelBundle* b) {
  fs::path dir = fs::is_directory(model) ? model : model.parent_path();
  if (dir.empty()) dir = ".";
  const fs::path config = dir / "tokenizer_config.json";
  if (fs::is_regular_file(config)) {
    absl::StatusOr<nlohmann::json> cfg = ReadJsonFile(config.string());
    if (!cfg.ok()) return cfg.status();
    if (!cfg->is_object()) {
      return absl::InvalidArgumentError(config.string() + ": not a JSON object");
    }
    b->bos_token = TokenText(*cfg, "bos_token");
    b->eos_token = TokenText(*cfg, "eos_token");
    if (absl::Status s = ReadTemplateField(*cfg, config.string(), b); !s.ok()) return s;
    if (!b->chat_template.empty()) b->chat_template_source = config.string();
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::is_regular_file(jinja)) {
    absl::StatusOr<std::string> text = ReadSmallFile(jinja);
    if (!text.ok()) return text.status();
    b->chat_template = *std::move(text);
    b->chat_template_source = jinja.string();
  }
  return absl::OkStatus();
}

// Token texts the config did not give: the tokenizer's own pieces.
void FillTokenTexts(ModelBundle* b) {
  if (b->bos_token.empty() && b->tokenizer->bos_id() >= 0) {
    b->bos_token = std::string(b->tokenizer->Piece(b->tokenizer->bos_id()));
  }
  if (b->eos_token.empty() && b->tokenizer->eos_id() >= 0) {
    b->eos_token = std::string(b->tokenizer->Piece(b->tokenizer->eos_id()));
  }
}

}  // namespace

// The bundle, with the weights quantized as they load where the format allows (a Hugging Face
// folder: one projection at a time); LoadModelBundle quantizes whatever is left.
static absl::StatusOr<ModelBundle> LoadBundle(const std::string& model_path,
                                              const std::string& tokenizer_path,
                                              WeightQuantization quantization) {
  ModelBundle b;
  const bool gguf = model_path.size() > 5 && model_path.ends_with(".gguf");
  if (gguf) {
    text::SpmVocab vocab;
    text::BpeSpec bpe;
    const bool want_vocab = tokenizer_path.empty();
    auto w = LoadGguf(model_path, want_vocab ? &vocab : nullptr, want_vocab ? &bpe : nullptr,
                      &b.chat_template);
    if (!w.ok()) return w.status();
    b.weights = std::move(*w);
    if (!b.chat_template.empty()) b.chat_template_source = "tokenizer.chat_template (GGUF)";
    if (want_vocab) {
      absl::StatusOr<std::unique_ptr<text::Tokenizer>> tok =
          bpe.vocab.empty() ? text::Tokenizer::FromVocab(std::move(vocab))
                            : absl::StatusOr<std::unique_ptr<text::Tokenizer>>(
                                  text::BpeTokenizer::Create(std::move(bpe)));
      if (!tok.ok()) {
        return absl::Status(tok.status().code(), absl::StrCat(model_path, ": tokenizer metadata: ",
                                                              tok.status().message()));
      }
      b.tokenizer = std::move(*tok);
      b.tokenizer_path = "<gguf metadata>";
      FillTokenTexts(&b);
      return b;
    }
  } else {
    auto w = LoadModel(model_path, quantization);
    if (!w.ok()) return w.status();
    b.weights = std::move(*w);
    if (absl::Status s = ReadChatTemplate(model_path, &b); !s.ok()) return s;
  }
  std::string tp = tokenizer_path;
  if (tp.empty()) {
    auto found = FindTokenizerBeside(model_path);
    if (!found.ok()) return found.status();
    tp = *found;
  }
  auto tok = text::Tokenizer::FromFile(tp);
  if (!tok.ok()) return tok.status();
  b.tokenizer = std::move(*tok);
  b.tokenizer_path = tp;
  // A tokenizer.json may cover fewer ids than the model's (padded) embedding, as Qwen's does.
  const bool json = tp.ends_with(".json");
  if (b.tokenizer->vocab_size() > b.weights.config.vocab_size ||
      (!json && b.tokenizer->vocab_size() != b.weights.config.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer ", tp, " has ", b.tokenizer->vocab_size(), " pieces but the model ",
        model_path, " has a vocabulary of ", b.weights.config.vocab_size));
  }
  FillTokenTexts(&b);
  return b;
}

absl::StatusOr<ModelBundle> LoadModelBundle(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            WeightQuantization quantization) {
  absl::StatusOr<ModelBundle> b = LoadBundle(model_path, tokenizer_path, quantization);
  if (!b.ok() || quantization == WeightQuantization::kNone) return b;
  if (absl::Status s = QuantizeWeightsFp8(&b->weights); !s.ok()) return s;
  return b;
}

std::string FindBundledModel(const char* argv0) {
  const fs::path rel = fs::path("models") / "stories260K" / "stories260K.bin";
  std::vector<fs::path> candidates;
  std::error_code ec;
  fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec && argv0 != nullptr) exe = fs::absolute(argv0, ec);
  // The installation's own copy first: a models/ folder in whatever directory the daemon is
  // started from must not replace the model it ships with.
  for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    candidates.push_back(p / rel);
  }
  candidates.push_back(rel);
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return c.string();
  }
  return "";
}

}  // namespace banyan::model

namespace banyan::model {

bool IsDummyModel(const std::string& model_path) { return model_path.starts_with("dummy:"); }

absl::StatusOr<ModelConfig> ShapeOrDummyConfig(const std::string& spec) {
  if (!IsDummyModel(spec)) return NamedShapeConfig(spec);
  absl::StatusOr<DummyModelSpec> d = ParseDummyModel(spec);
  if (!d.ok()) return d.status();
  return d->config;
}

absl::StatusOr<DummyModelSpec> ParseDummyModel(const std::string& model_path) {
  if (!IsDummyModel(model_path)) {
    return absl::InvalidArgumentError(absl::StrCat("not a dummy model: ", model_path));
  }
  std::vector<std::string> parts = absl::StrSplit(model_path.substr(6), ':');
  auto config = NamedShapeConfig(parts[0]);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", model_path, ": ", config.status().message(),
        " (form: dummy:<shape>[:vocab=N][:context=N][:seed=N])"));
  }
  DummyModelSpec spec{.config = *config};
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (!absl::SimpleAtoi(kv.second, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--model ", model_path, ": '", parts[i],
                                                     "' is not <key>=<positive integer>"));
    }
    if (kv.first == "vocab") {
      if (v < 259 || v > (int64_t{1} << 24)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model ", model_path, ": vocab must be in [259, 2^24], got ", v));
      }
      spec.config.vocab_size = static_cast<int>(v);
    } else if (kv.first == "context") {
      if (v > (int64_t{1} << 22)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model ", model_path, ": context must be at most 2^22, got ", v));
      }
      spec.config.max_seq_len = static_cast<int>(v);
    } else if (kv.first == "seed") {
      spec.seed = static_cast<uint64_t>(v);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model ", model_path, ": unknown key '", kv.first, "' (vocab, context, seed)"));
    }
  }
  spec.config.bos_id = 1;
  spec.config.eos_id = 2;
  if (absl::Status s = ValidateConfig(spec.config, model_path); !s.ok()) return s;
  return spec;
}

absl::StatusOr<std::unique_ptr<text::Tokenizer>> SyntheticTokenizer(int vocab_size) {
  if (vocab_size < 259) {
    return absl::InvalidArgumentError(
        absl::StrCat("a synthetic vocabulary needs at least 259 pieces, got ", vocab_size));
  }
  text::SpmVocab v;
  v.model_type = text::SpmModelType::kBpe;
  v.byte_fallback = true;
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  auto add = [&](std::string piece, float score, text::PieceType type) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, text::PieceType::kUnknown);
  add("<s>", 0, text::PieceType::kControl);
  add("</s>", 0, text::PieceType::kControl);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0, text::PieceType::kByte);
  for (int i = static_cast<int>(v.pieces.size()); i < vocab_size; ++i) {
    add(absl::StrCat("\xE2\x96\x81t", i), -static_cast<float>(i), text::PieceType::kNormal);
  }
  return text::Tokenizer::FromVocab(std::move(v));
}

absl::StatusOr<ModelBundle> LoadDummyBundle(const std::string& model_path, bool host_weights,
                                            const std::string& tokenizer_path,
                                            WeightQuantization quantization) {
  auto spec = ParseDummyModel(model_path);
  if (!spec.ok()) return spec.status();
  ModelBundle b;
  if (tokenizer_path.empty()) {
    auto tok = SyntheticTokenizer(spec->config.vocab_size);
    if (!tok.ok()) return tok.status();
    b.tokenizer = std::move(*tok);
    b.tokenizer_path = "<synthetic>";
  } else {
    auto tok = text::Tokenizer::FromFile(tokenizer_path);
    if (!tok.ok()) return tok.status();
    if ((*tok)->vocab_size() > spec->config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer ", tokenizer_path, " has ", (*tok)->vocab_size(), " pieces but ",
          model_path, " a vocabulary of ", spec->config.vocab_size, " (set vocab=)"));
    }
    b.tokenizer = std::move(*tok);
    b.tokenizer_path = tokenizer_path;
    // The real tokenizer's end and start ids, so that a grammar's end and EOS mean the same.
    if (b.tokenizer->eos_id() >= 0) spec->config.eos_id = b.tokenizer->eos_id();
    if (b.tokenizer->bos_id() >= 0) spec->config.bos_id = b.tokenizer->bos_id();
    FillTokenTexts(&b);
  }
  if (host_weights) {
    b.weights = MakeDummyWeights(spec->config, spec->seed, quantization);
  } else {
    b.weights.config = spec->config;
  }
  b.weights.source = model_path;
  return b;
}

}  // namespace banyan::model
