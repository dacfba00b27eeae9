// The tiny model of the loader seeds: make_seeds writes it in every format, and
// safetensors_fuzzer loads its fuzzed model.safetensors with this config.json.
#pragma once

namespace banyan::fuzz {

// 1 layer, dim 8, 2 query heads sharing 1 kv head, MLP 16, vocab 16, context 32.
inline constexpr char kTinyHfConfig[] =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 16, "max_position_embeddings": 32,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu"})";

}  // namespace banyan::fuzz
