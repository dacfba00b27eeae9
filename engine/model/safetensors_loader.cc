#include "engine/model/safetensors_loader.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/model/model_log.h"
#include "engine/model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace banyan::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": not found"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

// Typed access to config.json fields; messages name the file and the field.
class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& source) : j_(j), source_(source) {}

  // Present and not null.
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  absl::Status Int(const char* key, std::optional<int> def, int* out) const {
    if (!Has(key)) {
      if (!def.has_value()) return Error(key, "is missing");
      *out = *def;
      return absl::OkStatus();
    }
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int>::min() ||
        v.get<int64_t>() > std::numeric_limits<int>::max()) {
      return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
    }
    *out = static_cast<int>(v.get<int64_t>());
    return absl::OkStatus();
  }

  absl::Status Float(const char* key, float def, float* out) const {
    if (!Has(key)) {
      *out = def;
      return absl::OkStatus();
    }
    const json& v = j_[key];
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    *out = static_cast<float>(v.get<double>());
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool def, bool* out) const {
    if (!Has(key)) {
      *out = def;
      return absl::OkStatus();
    }
    const json& v = j_[key];
    if (!v.is_boolean()) return Error(key, absl::StrCat("must be true/false, got ", v.dump()));
    *out = v.get<bool>();
    return absl::OkStatus();
  }

  // A string field, or `def` when absent / null.
  absl::StatusOr<std::string> String(const char* key, const std::string& def) const {
    if (!Has(key)) return def;
    if (!j_[key].is_string()) return Error(key, "must be a string");
    return j_[key].get<std::string>();
  }

  absl::Status Error(const char* key, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field ", key, " ", why));
  }
  absl::Status Unimplemented(const char* key, absl::string_view why) const {
    return absl::UnimplementedError(absl::StrCat(source_, ": ", key, " ", why));
  }

 private:
  const json& j_;
  const std::string& source_;
};

// Maps tensor name -> shard file name (relative to the folder).
absl::StatusOr<std::map<std::string, std::string>> ReadIndex(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadTextFile(index_path);
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": expected a JSON object with a \"weight_map\" object"));
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map[", name, "] is not a string"));
    }
    const std::string f = file.get<std::string>();
    // Shards live in the folder itself; refuse paths that would leave it.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map[", name, "] = \"", f, "\" is not a file name"));
    }
    map.emplace(name, f);
  }
  return map;
}

}  // namespace

std::string HfTensorName(const TensorSlot& s) {
  const std::string layer = absl::StrCat("model.layers.", s.layer, ".");
  switch (s.kind) {
    case WeightKind::kTokEmbd:
      return "model.embed_tokens.weight";
    case WeightKind::kFinalNorm:
      return "model.norm.weight";
    case WeightKind::kLmHead:
      return "lm_head.weight";
    case WeightKind::kAttnNorm:
      return layer + "input_layernorm.weight";
    case WeightKind::kWq:
      return layer + "self_attn.q_proj.weight";
    case WeightKind::kWk:
      return layer + "self_attn.k_proj.weight";
    case WeightKind::kWv:
      return layer + "self_attn.v_proj.weight";
    case WeightKind::kWo:
      return layer + "self_attn.o_proj.weight";
    case WeightKind::kFfnNorm:
      return layer + "post_attention_layernorm.weight";
    case WeightKind::kGate:
      return layer + "mlp.gate_proj.weight";
    case WeightKind::kDown:
      return layer + "mlp.down_proj.weight";
    case WeightKind::kUp:
      return layer + "mlp.up_proj.weight";
  }
  return "?";
}

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& source) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid JSON object"));
  }
  const ConfigReader r(j, source);
  absl::StatusOr<std::string> model_type = r.String("model_type", "llama");
  if (!model_type.ok()) return model_type.status();
  if (*model_type != "llama") {
    return r.Unimplemented("model_type",
                           absl::StrCat("\"", *model_type, "\" is not supported (need \"llama\")"));
  }
  if (r.Has("rope_scaling")) {
    return r.Unimplemented("rope_scaling",
                           absl::StrCat(j["rope_scaling"].dump(), " is not implemented"));
  }
  absl::StatusOr<std::string> act = r.String("hidden_act", "silu");
  if (!act.ok()) return act.status();
  if (*act != "silu") {
    return r.Unimplemented("hidden_act", absl::StrCat("\"", *act, "\" is not implemented"));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    if (absl::Status s = r.Bool(key, false, &bias); !s.ok()) return s;
    if (bias) return r.Unimplemented(key, "= true is not implemented");
  }

  ModelConfig c;
  c.rope_style = RopeStyle::kHalf;
  const struct {
    const char* key;
    std::optional<int> def;
    int* out;
  } ints[] = {
      {"hidden_size", std::nullopt, &c.dim},
      {"intermediate_size", std::nullopt, &c.hidden_dim},
      {"num_hidden_layers", std::nullopt, &c.n_layers},
      {"num_attention_heads", std::nullopt, &c.n_heads},
      {"vocab_size", std::nullopt, &c.vocab_size},
      {"max_position_embeddings", 2048, &c.max_seq_len},
      {"bos_token_id", 1, &c.bos_id},
  };
  for (const auto& f : ints) {
    if (absl::Status s = r.Int(f.key, f.def, f.out); !s.ok()) return s;
  }
  if (absl::Status s = r.Int("num_key_value_heads", c.n_heads, &c.n_kv_heads); !s.ok()) return s;
  if (r.Has("eos_token_id") && j["eos_token_id"].is_array()) {
    const json& list = j["eos_token_id"];
    if (list.empty() || !list[0].is_number_integer() || list[0].get<int64_t>() < 0 ||
        list[0].get<int64_t>() > std::numeric_limits<int>::max()) {
      return r.Error("eos_token_id", "must be an integer or a non-empty list of integers");
    }
    c.eos_id = static_cast<int>(list[0].get<int64_t>());
  } else if (absl::Status s = r.Int("eos_token_id", 2, &c.eos_id); !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Float("rope_theta", 10000.0f, &c.rope_theta); !s.ok()) return s;
  // transformers >= 5 writes RoPE settings under rope_parameters; only the default (unscaled)
  // type is implemented.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (rp.contains("rope_type") &&
        !(rp["rope_type"].is_string() && rp["rope_type"].get<std::string>() == "default")) {
      return r.Unimplemented("rope_parameters", "only rope_type \"default\" is implemented");
    }
    if (!r.Has("rope_theta") && rp.contains("rope_theta")) {
      if (!rp["rope_theta"].is_number() || rp["rope_theta"].get<double>() <= 0) {
        return r.Error("rope_parameters", "rope_theta must be a positive number");
      }
      c.rope_theta = static_cast<float>(rp["rope_theta"].get<double>());
    }
  }
  if (absl::Status s = r.Float("rms_norm_eps", 1e-6f, &c.norm_eps); !s.ok()) return s;
  if (absl::Status s = r.Bool("tie_word_embeddings", false, &c.tie_embeddings); !s.ok()) return s;
  if (absl::Status s = ValidateConfig(c, source); !s.ok()) return s;
  int head_dim = c.head_dim();
  if (absl::Status s = r.Int("head_dim", c.head_dim(), &head_dim); !s.ok()) return s;
  if (head_dim != c.head_dim()) {
    return r.Unimplemented("head_dim", absl::StrCat("= ", head_dim,
                                                    " != hidden_size / "
                                                    "num_attention_heads = ",
                                                    c.head_dim(), " is not implemented"));
  }
  return c;
}

absl::StatusOr<ModelWeights> LoadHfFolder(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return absl::NotFoundError(absl::StrCat(dir, ": not found"));
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));
  }
  const std::string config_path = (fs::path(dir) / "config.json").string();
  absl::StatusOr<std::string> config_text = ReadTextFile(config_path);
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<ModelConfig> cfg = ParseHfConfig(*config_text, config_path);
  if (!cfg.ok()) return cfg.status();

  // Which file holds each tensor: the single model.safetensors, or the index's shard.
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::optional<std::map<std::string, std::string>> index;
  if (!fs::is_regular_file(single, ec)) {
    if (!fs::is_regular_file(index_path, ec)) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": neither model.safetensors nor model.safetensors.index.json exists"));
    }
    absl::StatusOr<std::map<std::string, std::string>> m = ReadIndex(index_path);
    if (!m.ok()) return m.status();
    index = *std::move(m);
  }
  std::map<std::string, std::unique_ptr<SafetensorsFile>> shards;  // by file name
  auto shard_for = [&](const std::string& tensor) -> absl::StatusOr<const SafetensorsFile*> {
    std::string file = "model.safetensors";
    if (index.has_value()) {
      auto it = index->find(tensor);
      if (it == index->end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": missing tensor ", tensor, " (not in the index's weight_map)"));
      }
      file = it->second;
    }
    std::unique_ptr<SafetensorsFile>& slot = shards[file];
    if (slot == nullptr) {
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
          SafetensorsFile::Open((fs::path(dir) / file).string());
      if (!f.ok()) return f.status();
      slot = *std::move(f);
    }
    return slot.get();
  };

  ModelWeights w;
  w.source = dir;
  w.config = *cfg;
  w.layers.resize(static_cast<size_t>(w.config.n_layers));
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const std::string name = HfTensorName(slot);
    absl::StatusOr<const SafetensorsFile*> f = shard_for(name);
    if (!f.ok()) return f.status();
    auto it = (*f)->entries().find(name);
    if (it == (*f)->entries().end()) {
      return absl::InvalidArgumentError(absl::StrCat((*f)->path(), ": missing tensor ", name));
    }
    if (it->second.shape != slot.shape) {
      return absl::InvalidArgumentError(absl::StrCat((*f)->path(), ": tensor shape mismatch for ",
                                                     name, ": expected ", ShapeString(slot.shape),
                                                     ", got ", ShapeString(it->second.shape)));
    }
    if (absl::Status s = (*f)->ReadTensor(name, &SlotTensor(w, slot)); !s.ok()) return s;
  }
  ModelLog().info("{}: loaded {} layers, dim {}, vocab {}", dir, w.config.n_layers, w.config.dim,
                  w.config.vocab_size);
  if (absl::Status s = ValidateWeights(w); !s.ok()) return s;
  return w;
}

}  // namespace banyan::engine
