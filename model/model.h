// The in-memory representation every model format loads into.
//
// Conventions (all loaders and writers obey them):
//  - Weight matrices are row-major [out_features, in_features], as in PyTorch / Hugging Face.
//  - Every tensor is fp32 on the host; fp16/bf16 sources are widened on load. Backends convert
//    on upload (the CUDA backend narrows to bf16). The one exception: a block's seven
//    projections may instead be FP8 (LayerWeights::fp8, model/quantized.h), loaded from an FP8
//    checkpoint or quantized at load (--quantization fp8). A projection then holds exactly one
//    form: its Tensor is empty (no shape, no data) and its QuantizedTensor is not. Embeddings,
//    norms, biases and the LM head are always fp32 Tensors.
//  - `rope_style` records how Wq/Wk rows are ordered. kHalf is Hugging Face's rotate-half
//    (pairs (i, i + head_dim/2)); kInterleaved is GPT-J / llama2.c / GGUF-llama (pairs
//    (2i, 2i + 1)). The forward pass honours either; converting between them is an exact row
//    permutation of Wq and Wk (see PermuteQkRows in model_io.h).
//  - Architectures beyond plain Llama are described by flags both backends read from here, never
//    by an architecture name: `qkv_bias` (Qwen 2.5: biases on the q/k/v projections),
//    `qk_norm` (Qwen 3: RMSNorm over each q and k head, weight [head_dim], before RoPE),
//    `head_size` (Qwen 3: head_dim not equal to dim / n_heads), `rope_scaling` (Llama 3.x:
//    frequency-dependent scaling of the RoPE inverse frequencies, see model/rope.h),
//    `stop_ids` (every end-of-sequence id; Llama 3 instruct models list several).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/quantized.h"

namespace banyan::model {

enum class RopeStyle { kHalf, kInterleaved };

// RoPE frequency scaling. kLlama3 is Llama 3.1's rule (rope_type "llama3" in config.json): with
// wavelength w_i = 2 pi / inv_freq_i, frequencies with w_i < original_max_pos / high_freq_factor
// stay, those with w_i > original_max_pos / low_freq_factor are divided by `factor`, and those
// between blend the two linearly in original_max_pos / w_i.
enum class RopeScalingType { kNone, kLlama3 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_pos = 8192;  // original_max_position_embeddings
  // Per-frequency divisors ([head_dim / 2]) applied after the rule above: GGUF files of Llama 3.1
  // carry the llama3 rule precomputed as a rope_freqs.weight tensor. Empty: none.
  std::vector<float> freq_divisors;
};

struct ModelConfig {
  int dim = 0;         // hidden size
  int hidden_dim = 0;  // MLP intermediate size
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int vocab_size = 0;
  int max_seq_len = 0;  // context length, tokens
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;  // LM head shares tok_embeddings
  RopeStyle rope_style = RopeStyle::kHalf;
  int bos_id = 1;
  int eos_id = 2;
  // Every id that ends a sequence (eos_id among them when eos_id >= 0); empty means {eos_id}.
  std::vector<int> stop_ids;
  int head_size = 0;       // explicit head_dim; 0 means dim / n_heads
  bool qkv_bias = false;   // LayerWeights::bq/bk/bv present
  bool qk_norm = false;    // LayerWeights::q_norm/k_norm present
  RopeScaling rope_scaling;
  std::string arch = "llama";  // for messages and logs only

  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  // The ids that end a sequence: stop_ids, or {eos_id} when it is empty.
  std::vector<int> StopIds() const { return stop_ids.empty() ? std::vector<int>{eos_id} : stop_ids; }
  bool IsStop(int token) const {
    if (stop_ids.empty()) return token == eos_id;
    for (int id : stop_ids) {
      if (id == token) return true;
    }
    return false;
  }
};

// A dense fp32 tensor, row-major.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

struct LayerWeights {
  Tensor attn_norm;  // [dim]
  Tensor wq;         // [n_heads * head_dim, dim]
  Tensor wk;         // [n_kv_heads * head_dim, dim]
  Tensor wv;         // [n_kv_heads * head_dim, dim]
  Tensor wo;         // [dim, n_heads * head_dim]
  Tensor ffn_norm;   // [dim]
  Tensor w_gate;     // [hidden_dim, dim]   (HF gate_proj, llama2.c w1)
  Tensor w_down;     // [dim, hidden_dim]   (HF down_proj, llama2.c w2)
  Tensor w_up;       // [hidden_dim, dim]   (HF up_proj,   llama2.c w3)
  Tensor bq, bk, bv;       // [n_heads * head_dim], [n_kv_heads * head_dim] x 2; qkv_bias only
  Tensor q_norm, k_norm;   // [head_dim]; qk_norm only
  // FP8 forms of the projections above, same shapes; each one non-empty only where its Tensor
  // is empty (see the conventions at the top). Reach them through SlotQuantized
  // (model/weights_layout.h) rather than by name where code walks every slot.
  struct Fp8 {
    QuantizedTensor wq, wk, wv, wo, w_gate, w_down, w_up;
  } fp8;
};

struct ModelWeights {
  ModelConfig config;
  Tensor tok_embeddings;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [dim]
  Tensor lm_head;     // [vocab, dim]; empty when config.tie_embeddings
  std::string source;  // file or folder it was loaded from, for messages

  const Tensor& output_matrix() const {
    return config.tie_embeddings ? tok_embeddings : lm_head;
  }
};

}  // namespace banyan::model
