// The in-memory representation every model format loads into.
//
// Conventions (all loaders and writers obey them):
//  - Weight matrices are row-major [out_features, in_features], as in PyTorch / Hugging Face.
//  - Every tensor is fp32 on the host; fp16/bf16 sources are widened on load. Backends convert
//    on upload (the CUDA backend narrows to bf16).
//  - `rope_style` records how Wq/Wk rows are ordered. kHalf is Hugging Face's rotate-half
//    (pairs (i, i + head_dim/2)); kInterleaved is GPT-J / llama2.c / GGUF-llama (pairs
//    (2i, 2i + 1)). The forward pass honours either; converting between them is an exact row
//    permutation of Wq and Wk (see PermuteQkRows in model_io.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace banyan::engine {

enum class RopeStyle { kHalf, kInterleaved };

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

  int head_dim() const { return dim / n_heads; }
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

}  // namespace banyan::engine
