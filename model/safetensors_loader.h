// Loader for Hugging Face Llama-family checkpoints (model_type llama, mistral, qwen2, qwen3): a
// folder with config.json and either model.safetensors or model.safetensors.index.json plus the
// shards its weight_map names.
//
// config.json fields read: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, vocab_size (required); num_key_value_heads (default: heads), head_dim
// (default hidden_size / heads; Qwen 3 differs), max_position_embeddings (2048), rope_theta
// (10000), rope_scaling / rope_parameters (rope_type "default" or "llama3" with factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings), rms_norm_eps (1e-6),
// tie_word_embeddings (false), bos_token_id (1), eos_token_id (2; a list -> every entry stops,
// the first is eos_id); torch_dtype is informational.
// Per architecture: qwen2 has q/k/v biases (*.self_attn.{q,k,v}_proj.bias); qwen3 has per-head
// q/k RMSNorm (*.self_attn.{q,k}_norm.weight). A sliding_window smaller than the context
// (mistral; qwen with use_sliding_window) limits max_seq_len to the window, with a warning.
// Rejected with UnimplementedError naming the field: another model_type, another rope_type,
// hidden_act other than "silu", attention_bias / mlp_bias (except qwen2's q/k/v biases),
// experts (num_local_experts, num_experts), partial_rotary_factor != 1, unknown layer_types,
// and a *.bias / *q_norm / *k_norm tensor the config does not call for (it would be dropped).
//
// Tensors may be F32, F16 or BF16 and are widened to fp32. A quantization_config of FP8
// (compressed-tensors or fine-grained "fp8", model/fp8_checkpoint.h) makes the projections load
// as FP8 (LayerWeights::fp8); any other is refused naming the field. The result has rope_style
// kHalf.
// Unused tensors (e.g. rotary_emb.inv_freq) are ignored, and so is lm_head.weight when tied.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/weights_layout.h"

namespace banyan::model {

struct Fp8CheckpointScheme;  // model/fp8_checkpoint.h

// With kFp8 (--quantization fp8) the projections of an unquantized checkpoint are quantized as
// each is read (QuantizeFp8PerChannel), so the host never holds them all in fp32.
absl::StatusOr<ModelWeights> LoadHfFolder(const std::string& dir,
                                          WeightQuantization quantization = WeightQuantization::kNone);

// Parses the text of a config.json; `source` names the file in messages. Its
// quantization_config, checked here, goes to *quant when given.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& source,
                                          Fp8CheckpointScheme* quant = nullptr);

// Hugging Face tensor name of a slot: "model.layers.3.self_attn.q_proj.weight", ...
std::string HfTensorName(const TensorSlot& slot);

}  // namespace banyan::model
