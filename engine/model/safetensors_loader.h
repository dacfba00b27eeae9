// Loader for Hugging Face LLaMA checkpoints: a folder with config.json and either
// model.safetensors or model.safetensors.index.json plus the shards its weight_map names.
//
// config.json fields read: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, vocab_size (required); num_key_value_heads (default: heads),
// max_position_embeddings (2048), rope_theta (10000), rms_norm_eps (1e-6),
// tie_word_embeddings (false), bos_token_id (1), eos_token_id (2; a list -> its first entry);
// torch_dtype is informational. Rejected with UnimplementedError: model_type other than
// "llama", non-null rope_scaling, hidden_act other than "silu", attention_bias / mlp_bias,
// head_dim != hidden_size / num_attention_heads.
//
// Tensors may be F32, F16 or BF16 and are widened to fp32. The result has rope_style kHalf.
// Unused tensors (e.g. rotary_emb.inv_freq) are ignored, and so is lm_head.weight when tied.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/model/weights_layout.h"

namespace banyan::engine {

absl::StatusOr<ModelWeights> LoadHfFolder(const std::string& dir);

// Parses the text of a config.json; `source` names the file in messages.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& source);

// Hugging Face tensor name of a slot: "model.layers.3.self_attn.q_proj.weight", ...
std::string HfTensorName(const TensorSlot& slot);

}  // namespace banyan::engine
