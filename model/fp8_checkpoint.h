// FP8 Hugging Face checkpoints: the two layouts users serve on Hopper, read into
// QuantizedTensor (model/quantized.h). Called by the safetensors loader for the seven
// projections of every block; everything else in such a checkpoint (embeddings, norms, LM head)
// is F32 / F16 / BF16 as usual.
//
// 1. compressed-tensors (llm-compressor, "FP8 dynamic" / "FP8" recipes):
//      quantization_config: {"quant_method": "compressed-tensors",
//        "format": "float-quantized" | "naive-quantized"  (here or per group; "mixed-precision"
//                  here when every group names its own),
//        "config_groups": {<name>: {"targets": ["Linear"],
//            "weights": {"num_bits": 8, "type": "float", "strategy": "tensor" | "channel",
//                        "symmetric": true, "dynamic": false},
//            "input_activations": null | {"num_bits": 8, "type": "float",
//                        "strategy": "token" | "tensor", "dynamic": true}}},
//        "ignore": ["lm_head", "re:<regex>", ...]}
//    tensors: <module>.weight F8_E4M3 [out, in], <module>.weight_scale F32 / BF16 of shape []
//    or [1] (strategy tensor) or [out, 1] (strategy channel); weight = fp8 * weight_scale.
//    An ignore entry is a module name, or "re:" and a regular expression matched from the
//    start of the module name (Python's re.match).
// 2. Hugging Face fine-grained FP8 (Qwen 3 FP8 and DeepSeek-style releases):
//      quantization_config: {"quant_method": "fp8", "activation_scheme": "dynamic",
//        "weight_block_size": [128, 128], "fmt": "e4m3" (optional),
//        "modules_to_not_convert": [...] | null}
//    tensors: <module>.weight F8_E4M3 [out, in], <module>.weight_scale_inv F32 / BF16 of
//    shape [ceil(out / 128), ceil(in / 128)]; weight[i][j] = fp8 * scale_inv[i / 128][j / 128]
//    (despite the name, the stored value multiplies). A modules_to_not_convert entry excludes
//    every module whose name contains it (transformers' rule).
//
// Refused at config time with UnimplementedError naming the field: any other quant_method
// (gptq, awq, bitsandbytes, ...), other formats, num_bits != 8, type "int", weight strategies
// "group" / "block" (compressed-tensors), dynamic weights, static activation scales
// (input_activations.dynamic false, activation_scheme "static"), activation types or sizes other
// than FP8, targets other than "Linear", a kv_cache_scheme (FP8 KV cache), sparsity, a
// weight_block_size other than [128, 128], fmt other than e4m3.
// Refused at load with InvalidArgumentError naming the tensor: a missing scale, a scale of the
// wrong shape or dtype, a NaN / inf / zero / negative scale, a NaN FP8 value, a weight stored as
// F8_E5M2 or in a dtype other than F8_E4M3 where the config quantizes it, an FP8 tensor in a
// module the config leaves unquantized (ignore / modules_to_not_convert) or with no
// quantization_config at all; and (UnimplementedError) an input_scale (static activation
// scales) or k_scale / v_scale (FP8 KV cache) tensor.
//
// The CPU backend computes with the dequantized weights; activations stay fp32 there (dynamic
// activation quantization, the "A8" of W8A8, is a GPU GEMM matter and is not simulated).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/quantized.h"
#include "model/safetensors_file.h"
#include "nlohmann/json_fwd.hpp"

namespace banyan::model {

enum class Fp8Layout { kNone, kCompressedTensors, kFineGrained };

// What a config.json's quantization_config says about the weights.
struct Fp8CheckpointScheme {
  Fp8Layout layout = Fp8Layout::kNone;
  Fp8ScaleKind scale_kind = Fp8ScaleKind::kPerChannel;  // kBlock128 for kFineGrained
  // Modules kept unquantized: compressed-tensors' ignore (names or "re:" patterns) or
  // fine-grained's modules_to_not_convert (substrings).
  std::vector<std::string> ignore;

  bool quantized() const { return layout != Fp8Layout::kNone; }
  // Whether module `module` ("model.layers.0.self_attn.q_proj", "lm_head") is left unquantized.
  bool Ignores(const std::string& module) const;
  // The name of the scale tensor of weight `weight_name` ("<module>.weight_scale[_inv]").
  std::string ScaleName(const std::string& weight_name) const;
  // "compressed-tensors (per-channel)", "fine-grained fp8 (128x128-block)".
  std::string Describe() const;
};

// Parses config.json's "quantization_config" (absent or null: kNone). `source` names the file.
absl::StatusOr<Fp8CheckpointScheme> ParseQuantizationConfig(const nlohmann::json& config,
                                                            const std::string& source);

// Finds the file holding a tensor (a shard of an index, or the single file).
using ShardLookup = std::function<absl::StatusOr<const SafetensorsFile*>(const std::string&)>;

// Reads projection weight `name` (".../q_proj.weight") of the expected `shape` under `scheme`
// (which must be quantized() and not ignore the module) with its scale, into *out; every check
// listed above, messages naming the file and the tensor.
absl::Status ReadFp8Projection(const ShardLookup& shards, const std::string& name,
                               const std::vector<int64_t>& shape,
                               const Fp8CheckpointScheme& scheme, QuantizedTensor* out);

// The writer's side (WriteHfFolder): the layout that holds w's FP8 projections as they are:
// compressed-tensors for per-tensor or per-channel scales (written with dynamic per-token FP8
// activations, the only activation scheme besides none that loads), fine-grained fp8 for
// 128 x 128 blocks; projections held in fp32 are listed as unquantized (ignore /
// modules_to_not_convert), and so is lm_head. UnimplementedError when the projections mix scale
// kinds. Requires HasQuantizedWeights(w).
absl::StatusOr<Fp8CheckpointScheme> Fp8SchemeFor(const ModelWeights& w);

// Sets config["quantization_config"] for `scheme` (from Fp8SchemeFor), which parses back to it.
void SetQuantizationConfig(const Fp8CheckpointScheme& scheme, nlohmann::ordered_json* config);

// The scale tensor's shape as written: [1] per tensor, [out, 1] per channel, the block grid.
std::vector<int64_t> Fp8ScaleShapeOnDisk(const QuantizedTensor& q);

// For a tensor of the checkpoint that the loader did not read: an error when it is a
// quantization tensor (a scale of a weight not loaded as FP8, an input_scale, a k/v scale), so
// that nothing the forward pass would need is silently dropped. `dir` names the checkpoint.
absl::Status CheckUnusedTensor(const std::string& dir, const std::string& name,
                               const Fp8CheckpointScheme& scheme);

}  // namespace banyan::model
