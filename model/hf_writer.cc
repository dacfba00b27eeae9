// WriteHfFolder (declared in model_io.h).
#include <charconv>
#include <deque>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/fp8_checkpoint.h"
#include "model/model_io.h"
#include "model/safetensors_file.h"
#include "model/safetensors_loader.h"
#include "nlohmann/json.hpp"

namespace banyan::model {
namespace {

// The double whose shortest decimal form equals the float's, so 1e-5f is written as 1e-05
// rather than 9.999999747378752e-06.
double ShortestDouble(float f) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

const char* TorchDtype(HfDtype d) {
  switch (d) {
    case HfDtype::kF32:
      return "float32";
    case HfDtype::kF16:
      return "float16";
    case HfDtype::kBF16:
      return "bfloat16";
  }
  return "float32";
}

}  // namespace

absl::Status WriteHfFolder(const ModelWeights& w, const std::string& dir, HfDtype dtype) {
  namespace fs = std::filesystem;
  if (absl::Status s = ValidateWeights(w); !s.ok()) return s;
  const ModelConfig& c = w.config;
  std::optional<Fp8CheckpointScheme> fp8;
  if (HasQuantizedWeights(w)) {
    absl::StatusOr<Fp8CheckpointScheme> scheme = Fp8SchemeFor(w);
    if (!scheme.ok()) return scheme.status();
    fp8 = *std::move(scheme);
  }
  if (c.rope_style != RopeStyle::kHalf && (c.qkv_bias || c.qk_norm)) {
    return absl::UnimplementedError(
        absl::StrCat(w.source, ": writing q/k biases or norms in the interleaved RoPE order"));
  }
  if (!c.rope_scaling.freq_divisors.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        w.source, ": per-frequency RoPE factors (GGUF rope_freqs) have no config.json form"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create: ", ec.message()));

  nlohmann::ordered_json j;
  const std::string arch = c.arch.empty() ? "llama" : c.arch;
  j["architectures"] = {arch == "qwen2"     ? "Qwen2ForCausalLM"
                        : arch == "qwen3"   ? "Qwen3ForCausalLM"
                        : arch == "mistral" ? "MistralForCausalLM"
                                            : "LlamaForCausalLM"};
  j["model_type"] = arch;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim();
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rope_theta"] = ShortestDouble(c.rope_theta);
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", ShortestDouble(c.rope_scaling.factor)},
                         {"low_freq_factor", ShortestDouble(c.rope_scaling.low_freq_factor)},
                         {"high_freq_factor", ShortestDouble(c.rope_scaling.high_freq_factor)},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_pos}};
  }
  j["rms_norm_eps"] = ShortestDouble(c.norm_eps);
  j["hidden_act"] = "silu";
  if (arch != "qwen2") j["attention_bias"] = false;  // Qwen2 has q/k/v biases without the key
  j["mlp_bias"] = false;
  if (arch == "qwen2" || arch == "qwen3") j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["bos_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  if (!c.stop_ids.empty()) j["eos_token_id"] = c.stop_ids;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = TorchDtype(dtype);
  if (fp8.has_value()) SetQuantizationConfig(*fp8, &j);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  {
    std::ofstream out(config_path, std::ios::trunc);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat(config_path, ": write failed"));
  }

  // Wq / Wk go out in the Hugging Face (kHalf) row order.
  std::vector<SafetensorsItem> items;
  std::vector<SafetensorsRawItem> raw;  // FP8 projections: codes and fp32 scales as held
  std::deque<QuantizedTensor> permuted;  // FP8 Wq / Wk in the kHalf order, when reordered
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    if (const QuantizedTensor* q = SlotQuantized(w, slot); q != nullptr && !q->empty()) {
      const std::string name = HfTensorName(slot);
      if (c.rope_style != RopeStyle::kHalf &&
          (slot.kind == WeightKind::kWq || slot.kind == WeightKind::kWk)) {
        // A reordered copy (FP8 Wq / Wk are small next to the rest), alive until written.
        QuantizedTensor& copy = permuted.emplace_back(*q);
        const int heads = slot.kind == WeightKind::kWq ? c.n_heads : c.n_kv_heads;
        if (absl::Status s = PermuteQkRows(copy, heads, c.head_dim(), c.rope_style, RopeStyle::kHalf);
            !s.ok()) {
          return absl::UnimplementedError(absl::StrCat(w.source, ": ", s.message()));
        }
        q = &copy;
      }
      raw.push_back({name, kSafetensorsF8E4M3, q->shape, q->codes.data(), q->codes.size()});
      raw.push_back({fp8->ScaleName(name), "F32", Fp8ScaleShapeOnDisk(*q), q->scales.data(),
                     q->scales.size() * sizeof(float)});
      continue;
    }
    SafetensorsItem item{HfTensorName(slot), &SlotTensor(w, slot), nullptr};
    if (c.rope_style != RopeStyle::kHalf &&
        (slot.kind == WeightKind::kWq || slot.kind == WeightKind::kWk)) {
      const int heads = slot.kind == WeightKind::kWq ? c.n_heads : c.n_kv_heads;
      item.transform = [heads, &c](const Tensor& t) {
        Tensor copy = t;
        PermuteQkRows(copy, heads, c.head_dim(), c.rope_style, RopeStyle::kHalf);
        return copy;
      };
    }
    items.push_back(std::move(item));
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), items, dtype, raw);
}

}  // namespace banyan::model
