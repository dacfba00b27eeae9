#include "model/fp8_checkpoint.h"

#include <cmath>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/dtype.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "nlohmann/json.hpp"

namespace banyan::model {
namespace {

using nlohmann::json;

constexpr const char* kField = "quantization_config";

// Errors about config.json's quantization_config, naming the field by its path.
struct QuantConfigErrors {
  const std::string& source;

  absl::Status Unimplemented(const std::string& field, absl::string_view why) const {
    return absl::UnimplementedError(
        absl::StrCat(source, ": ", kField, ".", field, " ", why));
  }
  absl::Status Invalid(const std::string& field, absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", kField, ".", field, " ", why));
  }
};

// `obj[key]` when present and not null, else nullptr.
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string Dump(const json* v) { return v == nullptr ? "null" : v->dump(); }

// A quantization-args object of compressed-tensors (weights or input_activations), checked to
// be 8-bit float. `path` is its field path for messages.
absl::Status CheckFloat8Args(const QuantConfigErrors& e, const json& args, const std::string& path) {
  if (!args.is_object()) return e.Invalid(path, "must be an object");
  const json* bits = Field(args, "num_bits");
  if (bits == nullptr || !bits->is_number_integer() || bits->get<int64_t>() != 8) {
    return e.Unimplemented(path + ".num_bits",
                           absl::StrCat("= ", Dump(bits), ": only 8-bit (FP8) is supported"));
  }
  const json* type = Field(args, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "float") {
    return e.Unimplemented(path + ".type",
                           absl::StrCat("= ", Dump(type),
                                        ": only \"float\" (FP8 E4M3) is supported; integer "
                                        "quantization is not"));
  }
  if (const json* sym = Field(args, "symmetric"); sym != nullptr && *sym != json(true)) {
    return e.Unimplemented(path + ".symmetric", "= false (zero points) is not supported");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StringList(const QuantConfigErrors& e, const json& q,
                                                    const char* key) {
  std::vector<std::string> out;
  const json* list = Field(q, key);
  if (list == nullptr) return out;
  if (!list->is_array()) return e.Invalid(key, "must be a list of strings");
  for (const json& s : *list) {
    if (!s.is_string()) return e.Invalid(key, "must be a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

absl::StatusOr<Fp8CheckpointScheme> ParseCompressedTensors(const QuantConfigErrors& e,
                                                           const json& q) {
  Fp8CheckpointScheme scheme;
  scheme.layout = Fp8Layout::kCompressedTensors;
  auto check_format = [&](const json* format, const std::string& path) -> absl::Status {
    if (format == nullptr) return absl::OkStatus();
    if (!format->is_string() || (format->get<std::string>() != "float-quantized" &&
                                 format->get<std::string>() != "naive-quantized")) {
      return e.Unimplemented(path, absl::StrCat("= ", format->dump(),
                                                " is not supported (float-quantized or "
                                                "naive-quantized FP8 weights are)"));
    }
    return absl::OkStatus();
  };
  // "mixed-precision" at the top means each group names its own format (checked per group).
  const json* top_format = Field(q, "format");
  const bool per_group_format = top_format != nullptr && *top_format == json("mixed-precision");
  if (!per_group_format) {
    if (absl::Status s = check_format(top_format, "format"); !s.ok()) return s;
  }
  if (const json* status = Field(q, "quantization_status");
      status != nullptr && *status != json("compressed")) {
    return e.Unimplemented("quantization_status",
                           absl::StrCat("= ", status->dump(), ": only \"compressed\" checkpoints "
                                                              "(FP8 tensors on disk) load"));
  }
  if (const json* kv = Field(q, "kv_cache_scheme"); kv != nullptr) {
    return e.Unimplemented("kv_cache_scheme", "is set: an FP8 KV cache is not supported yet");
  }
  if (const json* sp = Field(q, "sparsity_config"); sp != nullptr && !sp->empty()) {
    return e.Unimplemented("sparsity_config", "is set: sparse weights are not supported");
  }
  if (const json* tc = Field(q, "transform_config"); tc != nullptr && !tc->empty()) {
    return e.Unimplemented("transform_config", "is set: weight transforms are not supported");
  }
  const json* groups = Field(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty()) {
    return e.Invalid("config_groups", "must be a non-empty object");
  }
  bool have_strategy = false;
  for (const auto& [name, g] : groups->items()) {
    const std::string path = absl::StrCat("config_groups.", name);
    if (!g.is_object()) return e.Invalid(path, "must be an object");
    if (per_group_format && Field(g, "format") == nullptr) {
      return e.Invalid(path + ".format", "is missing (the top-level format is mixed-precision)");
    }
    if (absl::Status s = check_format(Field(g, "format"), path + ".format"); !s.ok()) return s;
    const json* targets = Field(g, "targets");
    if (targets == nullptr || *targets != json::array({"Linear"})) {
      return e.Unimplemented(path + ".targets",
                             absl::StrCat("= ", Dump(targets), ": only [\"Linear\"] is supported"));
    }
    const json* w = Field(g, "weights");
    if (w == nullptr) return e.Invalid(path + ".weights", "is missing");
    if (absl::Status s = CheckFloat8Args(e, *w, path + ".weights"); !s.ok()) return s;
    if (const json* dyn = Field(*w, "dynamic"); dyn != nullptr && *dyn != json(false)) {
      return e.Unimplemented(path + ".weights.dynamic", "= true is not supported");
    }
    const json* strategy = Field(*w, "strategy");
    Fp8ScaleKind kind;
    if (strategy != nullptr && *strategy == json("tensor")) {
      kind = Fp8ScaleKind::kPerTensor;
    } else if (strategy != nullptr && *strategy == json("channel")) {
      kind = Fp8ScaleKind::kPerChannel;
    } else {
      return e.Unimplemented(path + ".weights.strategy",
                             absl::StrCat("= ", Dump(strategy),
                                          " is not supported (\"tensor\" or \"channel\" are)"));
    }
    if (have_strategy && kind != scheme.scale_kind) {
      return e.Unimplemented(path + ".weights.strategy",
                             "differs between config_groups; one weight strategy is supported");
    }
    scheme.scale_kind = kind;
    have_strategy = true;
    if (const json* a = Field(g, "input_activations"); a != nullptr) {
      const std::string apath = path + ".input_activations";
      if (absl::Status s = CheckFloat8Args(e, *a, apath); !s.ok()) return s;
      if (Field(*a, "dynamic") == nullptr || *Field(*a, "dynamic") != json(true)) {
        return e.Unimplemented(apath + ".dynamic",
                               absl::StrCat("= ", Dump(Field(*a, "dynamic")),
                                            ": static activation scales are not supported "
                                            "(dynamic ones are)"));
      }
    }
    if (Field(g, "output_activations") != nullptr) {
      return e.Unimplemented(path + ".output_activations", "is set: not supported");
    }
  }
  absl::StatusOr<std::vector<std::string>> ignore = StringList(e, q, "ignore");
  if (!ignore.ok()) return ignore.status();
  for (const std::string& pattern : *ignore) {
    if (!pattern.starts_with("re:")) continue;
    try {
      std::regex re(pattern.substr(3));
    } catch (const std::regex_error&) {
      return e.Invalid("ignore", absl::StrCat("entry \"", pattern, "\" is not a valid regex"));
    }
  }
  scheme.ignore = *std::move(ignore);
  return scheme;
}

absl::StatusOr<Fp8CheckpointScheme> ParseFineGrained(const QuantConfigErrors& e, const json& q) {
  Fp8CheckpointScheme scheme;
  scheme.layout = Fp8Layout::kFineGrained;
  scheme.scale_kind = Fp8ScaleKind::kBlock128;
  const json* act = Field(q, "activation_scheme");
  if (act != nullptr && *act != json("dynamic")) {
    return e.Unimplemented("activation_scheme",
                           absl::StrCat("= ", act->dump(),
                                        ": static activation scales are not supported "
                                        "(\"dynamic\" is)"));
  }
  const json* block = Field(q, "weight_block_size");
  if (block == nullptr || *block != json::array({128, 128})) {
    return e.Unimplemented("weight_block_size",
                           absl::StrCat("= ", Dump(block),
                                        ": only [128, 128] blocks are supported (per-tensor fp8 "
                                        "checkpoints load through compressed-tensors)"));
  }
  if (const json* fmt = Field(q, "fmt"); fmt != nullptr && *fmt != json("e4m3")) {
    return e.Unimplemented("fmt", absl::StrCat("= ", fmt->dump(), ": only e4m3 is supported"));
  }
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    absl::StatusOr<std::vector<std::string>> list = StringList(e, q, key);
    if (!list.ok()) return list.status();
    scheme.ignore.insert(scheme.ignore.end(), list->begin(), list->end());
  }
  return scheme;
}

}  // namespace

bool Fp8CheckpointScheme::Ignores(const std::string& module) const {
  for (const std::string& entry : ignore) {
    if (layout == Fp8Layout::kFineGrained) {
      if (absl::StrContains(module, entry)) return true;
    } else if (entry.starts_with("re:")) {
      // Validated in ParseCompressedTensors; match_continuous anchors at the start (re.match).
      if (std::regex_search(module, std::regex(entry.substr(3)),
                            std::regex_constants::match_continuous)) {
        return true;
      }
    } else if (module == entry) {
      return true;
    }
  }
  return false;
}

std::string Fp8CheckpointScheme::ScaleName(const std::string& weight_name) const {
  return weight_name + (layout == Fp8Layout::kFineGrained ? "_scale_inv" : "_scale");
}

std::string Fp8CheckpointScheme::Describe() const {
  switch (layout) {
    case Fp8Layout::kNone:
      return "unquantized";
    case Fp8Layout::kCompressedTensors:
      return absl::StrCat("compressed-tensors FP8 (", Fp8ScaleKindName(scale_kind), ")");
    case Fp8Layout::kFineGrained:
      return absl::StrCat("fine-grained FP8 (", Fp8ScaleKindName(scale_kind), ")");
  }
  return "?";
}

absl::StatusOr<Fp8CheckpointScheme> ParseQuantizationConfig(const json& config,
                                                            const std::string& source) {
  const json* q = Field(config, kField);
  if (q == nullptr) return Fp8CheckpointScheme{};
  const QuantConfigErrors e{source};
  if (!q->is_object()) return e.Invalid("", "must be an object");
  const json* method = Field(*q, "quant_method");
  if (method != nullptr && *method == json("compressed-tensors")) {
    return ParseCompressedTensors(e, *q);
  }
  if (method != nullptr && *method == json("fp8")) return ParseFineGrained(e, *q);
  return e.Unimplemented(
      "quant_method",
      absl::StrCat(method == nullptr ? "(none named)" : method->dump(),
                   ": this quantization is not supported yet (banyan runs f32, f16 and bf16 weights, "
                   "and FP8 weights in the compressed-tensors or fine-grained \"fp8\" layouts)"));
}

absl::Status ReadFp8Projection(const ShardLookup& shards, const std::string& name,
                               const std::vector<int64_t>& shape,
                               const Fp8CheckpointScheme& scheme, QuantizedTensor* out) {
  absl::StatusOr<const SafetensorsFile*> wf = shards(name);
  if (!wf.ok()) return wf.status();
  const std::string& path = (*wf)->path();
  auto it = (*wf)->entries().find(name);
  if (it == (*wf)->entries().end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor ", name));
  }
  const SafetensorsEntry& we = it->second;
  if (we.dtype != kSafetensorsF8E4M3 && we.dtype != kSafetensorsF8E5M2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor ", name, " is ", we.dtype, " but the quantization_config (",
        scheme.Describe(), ") quantizes it: expected F8_E4M3 (list the module under ",
        scheme.layout == Fp8Layout::kFineGrained ? "modules_to_not_convert" : "ignore",
        " to keep it unquantized)"));
  }
  if (we.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor shape mismatch for ", name,
                                                   ": expected ", ShapeString(shape), ", got ",
                                                   ShapeString(we.shape)));
  }
  QuantizedTensor q;
  q.shape = shape;
  q.scale_kind = scheme.scale_kind;
  if (absl::Status s = (*wf)->ReadFp8Codes(name, &q.codes); !s.ok()) return s;

  const std::string scale_name = scheme.ScaleName(name);
  absl::StatusOr<const SafetensorsFile*> sf = shards(scale_name);
  if (!sf.ok()) return sf.status();
  auto si = (*sf)->entries().find(scale_name);
  if (si == (*sf)->entries().end()) {
    return absl::InvalidArgumentError(absl::StrCat((*sf)->path(), ": missing tensor ", scale_name,
                                                   ", the scale of FP8 weight ", name));
  }
  const SafetensorsEntry& se = si->second;
  auto bad_scale = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat((*sf)->path(), ": scale tensor ", scale_name, " ", why));
  };
  if (se.dtype != "F32" && se.dtype != "BF16") {
    return bad_scale(absl::StrCat("is ", se.dtype, "; expected F32 or BF16"));
  }
  const std::vector<int64_t> want = Fp8ScaleShape(scheme.scale_kind, shape[0], shape[1]);
  bool shape_ok = false;
  switch (scheme.scale_kind) {
    case Fp8ScaleKind::kPerTensor:
      shape_ok = se.shape.empty() || se.shape == std::vector<int64_t>{1};
      break;
    case Fp8ScaleKind::kPerChannel:
      shape_ok = se.shape == std::vector<int64_t>{shape[0], 1};
      break;
    case Fp8ScaleKind::kBlock128:
      shape_ok = se.shape == want;
      break;
  }
  if (!shape_ok) {
    const std::string expected = scheme.scale_kind == Fp8ScaleKind::kPerTensor ? "[] or [1]"
                                 : scheme.scale_kind == Fp8ScaleKind::kPerChannel
                                     ? ShapeString({shape[0], 1})
                                     : ShapeString(want);
    return bad_scale(absl::StrCat("has shape ", ShapeString(se.shape), "; a ",
                                  Fp8ScaleKindName(scheme.scale_kind), " scale of a ",
                                  ShapeString(shape), " weight has shape ", expected));
  }
  Tensor scales;
  if (absl::Status s = (*sf)->ReadTensor(scale_name, &scales); !s.ok()) return s;
  for (size_t i = 0; i < scales.data.size(); ++i) {
    const float v = scales.data[i];
    if (!(std::isfinite(v) && v > 0)) {
      return bad_scale(absl::StrCat("holds ", v, " at index ", i,
                                    "; scales must be finite and positive"));
    }
  }
  q.scales = std::move(scales.data);
  if (absl::Status s = CheckQuantized(q, absl::StrCat(path, ": tensor ", name)); !s.ok()) return s;
  *out = std::move(q);
  return absl::OkStatus();
}

absl::Status CheckUnusedTensor(const std::string& dir, const std::string& name,
                               const Fp8CheckpointScheme& scheme) {
  auto ends_with = [&](absl::string_view suffix) { return absl::EndsWith(name, suffix); };
  if (ends_with(".input_scale")) {
    return absl::UnimplementedError(absl::StrCat(
        dir, ": tensor ", name,
        " is a static activation scale; static activation quantization is not supported"));
  }
  if (ends_with(".k_scale") || ends_with(".v_scale") || ends_with(".kv_scale")) {
    return absl::UnimplementedError(absl::StrCat(
        dir, ": tensor ", name, " is an FP8 KV-cache scale; an FP8 KV cache is not supported yet"));
  }
  if (ends_with(".weight_scale") || ends_with(".weight_scale_inv") ||
      ends_with(".weight_zero_point") || ends_with(".output_scale")) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": tensor ", name, " is a quantization scale of a weight that is not loaded as FP8 (",
        scheme.quantized() ? "its module is not quantized by the quantization_config"
                           : "config.json has no quantization_config",
        ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fp8CheckpointScheme> Fp8SchemeFor(const ModelWeights& w) {
  Fp8CheckpointScheme scheme;
  scheme.ignore.push_back("lm_head");
  bool have_kind = false;
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const QuantizedTensor* q = SlotQuantized(w, slot);
    if (q == nullptr) continue;
    const std::string name = HfTensorName(slot);
    if (q->empty()) {
      scheme.ignore.push_back(name.substr(0, name.size() - std::string(".weight").size()));
      continue;
    }
    if (have_kind && q->scale_kind != scheme.scale_kind) {
      return absl::UnimplementedError(absl::StrCat(
          w.source, ": FP8 weights with ", Fp8ScaleKindName(scheme.scale_kind), " and ",
          Fp8ScaleKindName(q->scale_kind), " scales have no single checkpoint layout"));
    }
    scheme.scale_kind = q->scale_kind;
    have_kind = true;
  }
  scheme.layout = scheme.scale_kind == Fp8ScaleKind::kBlock128 ? Fp8Layout::kFineGrained
                                                               : Fp8Layout::kCompressedTensors;
  return scheme;
}

void SetQuantizationConfig(const Fp8CheckpointScheme& scheme, nlohmann::ordered_json* config) {
  nlohmann::ordered_json& q = (*config)[kField];
  if (scheme.layout == Fp8Layout::kFineGrained) {
    q = {{"quant_method", "fp8"},
         {"activation_scheme", "dynamic"},
         {"fmt", "e4m3"},
         {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}},
         {"modules_to_not_convert", scheme.ignore}};
    return;
  }
  const char* strategy = scheme.scale_kind == Fp8ScaleKind::kPerTensor ? "tensor" : "channel";
  q = {{"quant_method", "compressed-tensors"},
       {"format", "float-quantized"},
       {"quantization_status", "compressed"},
       {"config_groups",
        {{"group_0",
          {{"targets", {"Linear"}},
           {"weights",
            {{"num_bits", 8},
             {"type", "float"},
             {"strategy", strategy},
             {"symmetric", true},
             {"dynamic", false}}},
           {"input_activations",
            {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
       {"ignore", scheme.ignore}};
}

std::vector<int64_t> Fp8ScaleShapeOnDisk(const QuantizedTensor& q) {
  switch (q.scale_kind) {
    case Fp8ScaleKind::kPerTensor:
      return {1};
    case Fp8ScaleKind::kPerChannel:
      return {q.rows(), 1};
    case Fp8ScaleKind::kBlock128:
      return Fp8ScaleShape(q.scale_kind, q.rows(), q.cols());
  }
  return {};
}

}  // namespace banyan::model
