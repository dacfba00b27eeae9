#include "model/safetensors_loader.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "model/fp8_checkpoint.h"
#include "model/model_log.h"
#include "model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace banyan::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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
  absl::StatusOr<json> parsed = ReadJsonFile(index_path);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("weight_map") ||
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
    case WeightKind::kBq:
      return layer + "self_attn.q_proj.bias";
    case WeightKind::kBk:
      return layer + "self_attn.k_proj.bias";
    case WeightKind::kBv:
      return layer + "self_attn.v_proj.bias";
    case WeightKind::kQNorm:
      return layer + "self_attn.q_norm.weight";
    case WeightKind::kKNorm:
      return layer + "self_attn.k_norm.weight";
  }
  return "?";
}

namespace {

// rope_scaling (transformers 4) or rope_parameters (transformers 5): the rope type under
// "rope_type" (or the older "type"); "default" and a null object mean no scaling.
absl::Status ParseRopeScaling(const ConfigReader& r, const json& rs, const char* field,
                              RopeScaling* out) {
  if (!rs.is_object()) return r.Error(field, absl::StrCat("must be an object, got ", rs.dump()));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (rs.contains(key) && !rs[key].is_null()) {
      if (!rs[key].is_string()) return r.Error(field, absl::StrCat(key, " must be a string"));
      type = rs[key].get<std::string>();
      break;
    }
  }
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return r.Unimplemented(field, absl::StrCat("rope_type \"", type, "\" in ", rs.dump(),
                                               " is not implemented (supported: default, llama3)"));
  }
  auto number = [&](const char* key, double* v) -> absl::Status {
    if (!rs.contains(key) || !rs[key].is_number()) {
      return r.Error(field, absl::StrCat("rope_type llama3 needs a number ", key));
    }
    *v = rs[key].get<double>();
    return absl::OkStatus();
  };
  double factor = 0, low = 0, high = 0, orig = 0;
  if (absl::Status s = number("factor", &factor); !s.ok()) return s;
  if (absl::Status s = number("low_freq_factor", &low); !s.ok()) return s;
  if (absl::Status s = number("high_freq_factor", &high); !s.ok()) return s;
  if (absl::Status s = number("original_max_position_embeddings", &orig); !s.ok()) return s;
  if (orig < 1 || orig > std::numeric_limits<int>::max() || orig != std::floor(orig)) {
    return r.Error(field, "original_max_position_embeddings must be a positive integer");
  }
  out->type = RopeScalingType::kLlama3;
  out->factor = static_cast<float>(factor);
  out->low_freq_factor = static_cast<float>(low);
  out->high_freq_factor = static_cast<float>(high);
  out->original_max_pos = static_cast<int>(orig);
  return absl::OkStatus();
}

// Sliding-window attention equals full attention while the context fits in the window, so a
// window smaller than the context limits the context to it (with a warning) rather than being
// refused; `sliding_window` null, or use_sliding_window false (Qwen), means none.
absl::Status ApplySlidingWindow(const ConfigReader& r, const json& j, const std::string& arch,
                                const std::string& source, ModelConfig* c) {
  bool enabled = r.Has("sliding_window");
  if (arch == "qwen2" || arch == "qwen3") {
    bool use = false;
    if (absl::Status s = r.Bool("use_sliding_window", false, &use); !s.ok()) return s;
    enabled = enabled && use;
  }
  if (r.Has("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array()) return r.Error("layer_types", "must be a list");
    for (const json& t : lt) {
      if (!t.is_string() ||
          (t.get<std::string>() != "full_attention" && t.get<std::string>() != "sliding_attention")) {
        return r.Unimplemented("layer_types", absl::StrCat("entry ", t.dump(), " is not implemented"));
      }
      if (t.get<std::string>() == "sliding_attention") enabled = true;
    }
  }
  if (!enabled) return absl::OkStatus();
  int window = 0;
  if (absl::Status s = r.Int("sliding_window", std::nullopt, &window); !s.ok()) return s;
  if (window < 1) return r.Error("sliding_window", absl::StrCat("= ", window, " must be positive"));
  if (window < c->max_seq_len) {
    ModelLog().warn(
        "{}: sliding_window {} is smaller than max_position_embeddings {}: sliding-window "
        "attention is not implemented, so the context is limited to {} tokens",
        source, window, c->max_seq_len, window);
    c->max_seq_len = window;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& source,
                                           Fp8CheckpointScheme* quant) {
  absl::StatusOr<json> parsed = ParseJson(json_text, source);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid JSON object"));
  }
  const ConfigReader r(j, source);
  absl::StatusOr<Fp8CheckpointScheme> scheme = ParseQuantizationConfig(j, source);
  if (!scheme.ok()) return scheme.status();
  if (quant != nullptr) *quant = *std::move(scheme);
  absl::StatusOr<std::string> model_type = r.String("model_type", "llama");
  if (!model_type.ok()) return model_type.status();
  const std::string& arch = *model_type;
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3") {
    return r.Unimplemented(
        "model_type",
        absl::StrCat("\"", arch, "\" is not supported (need llama, mistral, qwen2 or qwen3)"));
  }
  ModelConfig c;
  c.arch = arch;
  c.rope_style = RopeStyle::kHalf;
  c.qkv_bias = arch == "qwen2";  // Qwen2Attention always has q/k/v biases and no o bias
  c.qk_norm = arch == "qwen3";
  if (r.Has("rope_scaling")) {
    if (absl::Status s = ParseRopeScaling(r, j["rope_scaling"], "rope_scaling", &c.rope_scaling);
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::string> act = r.String("hidden_act", "silu");
  if (!act.ok()) return act.status();
  if (*act != "silu") {
    return r.Unimplemented("hidden_act", absl::StrCat("\"", *act, "\" is not implemented"));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    if (absl::Status s = r.Bool(key, false, &bias); !s.ok()) return s;
    if (bias && !(arch == "qwen2" && std::string(key) == "attention_bias")) {
      return r.Unimplemented(key, "= true is not implemented (biases on o_proj / the MLP)");
    }
  }
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    int experts = 0;
    if (absl::Status s = r.Int(key, 0, &experts); !s.ok()) return s;
    if (experts > 0) {
      return r.Unimplemented(key, absl::StrCat("= ", experts, ": mixture of experts is not implemented"));
    }
  }
  if (r.Has("partial_rotary_factor")) {
    float prf = 1.0f;
    if (absl::Status s = r.Float("partial_rotary_factor", 1.0f, &prf); !s.ok()) return s;
    if (prf != 1.0f) return r.Unimplemented("partial_rotary_factor", absl::StrCat("= ", prf, " is not implemented"));
  }

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
  };
  for (const auto& f : ints) {
    if (absl::Status s = r.Int(f.key, f.def, f.out); !s.ok()) return s;
  }
  if (absl::Status s = r.Int("num_key_value_heads", c.n_heads, &c.n_kv_heads); !s.ok()) return s;
  if (absl::Status s = r.Int("bos_token_id", 1, &c.bos_id); !s.ok()) return s;
  if (r.Has("eos_token_id") && j["eos_token_id"].is_array()) {
    // Every listed id stops a sequence (Llama 3.x instruct lists <|end_of_text|>, <|eom_id|>,
    // <|eot_id|>); the first is the tokenizer-facing eos_id.
    const json& list = j["eos_token_id"];
    if (list.empty()) return r.Error("eos_token_id", "must be an integer or a non-empty list of integers");
    for (const json& e : list) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int>::max()) {
        return r.Error("eos_token_id", "must be an integer or a non-empty list of integers");
      }
      c.stop_ids.push_back(static_cast<int>(e.get<int64_t>()));
    }
    c.eos_id = c.stop_ids[0];
  } else if (absl::Status s = r.Int("eos_token_id", 2, &c.eos_id); !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Float("rope_theta", 10000.0f, &c.rope_theta); !s.ok()) return s;
  // transformers >= 5 writes RoPE settings under rope_parameters.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (c.rope_scaling.type == RopeScalingType::kNone) {
      if (absl::Status s = ParseRopeScaling(r, rp, "rope_parameters", &c.rope_scaling); !s.ok()) {
        return s;
      }
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
  if (r.Has("head_dim")) {
    int head_dim = 0;
    if (absl::Status s = r.Int("head_dim", std::nullopt, &head_dim); !s.ok()) return s;
    if (head_dim < 1) return r.Error("head_dim", absl::StrCat("= ", head_dim, " must be positive"));
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0 || head_dim != c.dim / c.n_heads) {
      c.head_size = head_dim;
    }
  }
  if (absl::Status s = ApplySlidingWindow(r, j, arch, source, &c); !s.ok()) return s;
  if (absl::Status s = ValidateConfig(c, source); !s.ok()) return s;
  return c;
}

absl::StatusOr<ModelWeights> LoadHfFolder(const std::string& dir, WeightQuantization quantization) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return absl::NotFoundError(absl::StrCat(dir, ": not found"));
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));
  }
  const std::string config_path = (fs::path(dir) / "config.json").string();
  absl::StatusOr<std::string> config_text = ReadJsonText(config_path);
  if (!config_text.ok()) return config_text.status();
  Fp8CheckpointScheme quant;
  absl::StatusOr<ModelConfig> cfg = ParseHfConfig(*config_text, config_path, &quant);
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
  std::set<std::string> loaded;
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const std::string name = HfTensorName(slot);
    loaded.insert(name);
    // An FP8 projection: the loader of its layout reads it with its scale.
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    if (quant.quantized() && IsProjection(slot.kind) && !quant.Ignores(module)) {
      if (absl::Status s = ReadFp8Projection(shard_for, name, slot.shape, quant,
                                             SlotQuantized(w, slot));
          !s.ok()) {
        return s;
      }
      loaded.insert(quant.ScaleName(name));
      continue;
    }
    absl::StatusOr<const SafetensorsFile*> f = shard_for(name);
    if (!f.ok()) return f.status();
    auto it = (*f)->entries().find(name);
    if (it == (*f)->entries().end()) {
      return absl::InvalidArgumentError(absl::StrCat((*f)->path(), ": missing tensor ", name));
    }
    if (it->second.dtype == kSafetensorsF8E4M3 || it->second.dtype == kSafetensorsF8E5M2) {
      return absl::InvalidArgumentError(absl::StrCat(
          (*f)->path(), ": tensor ", name, " is FP8 (", it->second.dtype, ") but ",
          !quant.quantized() ? "config.json has no quantization_config"
          : IsProjection(slot.kind)
              ? absl::StrCat("its module is left unquantized by the quantization_config (",
                             quant.layout == Fp8Layout::kFineGrained ? "modules_to_not_convert"
                                                                     : "ignore",
                             ")")
              : std::string("only the projections of the blocks may be FP8")));
    }
    if (it->second.shape != slot.shape) {
      return absl::InvalidArgumentError(absl::StrCat((*f)->path(), ": tensor shape mismatch for ",
                                                     name, ": expected ", ShapeString(slot.shape),
                                                     ", got ", ShapeString(it->second.shape)));
    }
    if (absl::Status s = (*f)->ReadTensor(name, &SlotTensor(w, slot)); !s.ok()) return s;
    if (quantization == WeightQuantization::kFp8 && !quant.quantized() &&
        IsProjection(slot.kind)) {
      Tensor& t = SlotTensor(w, slot);
      if (absl::Status s = QuantizeFp8PerChannel(t, absl::StrCat((*f)->path(), ": ", name),
                                                 SlotQuantized(w, slot));
          !s.ok()) {
        return s;
      }
      t = Tensor{};
    }
  }
  // A bias or q/k norm the config does not call for would be silently dropped: refuse it.
  std::vector<std::string> all_names;
  if (index.has_value()) {
    for (const auto& [name, file] : *index) all_names.push_back(name);
  } else if (!shards.empty()) {
    for (const auto& [name, entry] : shards.begin()->second->entries()) all_names.push_back(name);
  }
  for (const std::string& name : all_names) {
    if (loaded.count(name) == 0) {
      if (absl::Status s = CheckUnusedTensor(dir, name, quant); !s.ok()) return s;
    }
    if (loaded.count(name) == 0 && IsBehaviourTensor(name)) {
      return absl::UnimplementedError(absl::StrCat(
          dir, ": tensor ", name, " is not implemented for model_type ", w.config.arch,
          " with this config (q/k/v biases: qwen2; q/k norms: qwen3)"));
    }
  }
  ModelLog().info("{}: loaded {} ({} layers, dim {}, head_dim {}, vocab {}{}{}{}{})", dir,
                  w.config.arch, w.config.n_layers, w.config.dim, w.config.head_dim(),
                  w.config.vocab_size, w.config.qkv_bias ? ", qkv bias" : "",
                  w.config.qk_norm ? ", q/k norm" : "",
                  w.config.rope_scaling.type == RopeScalingType::kLlama3 ? ", llama3 rope" : "",
                  quant.quantized() ? ", " + quant.Describe() : "");
  if (absl::Status s = ValidateWeights(w); !s.ok()) return s;
  return w;
}

}  // namespace banyan::model
