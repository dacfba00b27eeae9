// The small LLaMA-shaped model the GPU backend tests run (on dummy weights): dim = head_dim x
// heads, an MLP three times as wide.
#pragma once

#include "model/model.h"

namespace banyan::testing {

inline model::ModelConfig SmallModelConfig(int head_dim, int heads, int kv_heads, int layers = 2,
                                            int vocab = 512, int max_seq_len = 1024) {
  model::ModelConfig c;
  c.dim = head_dim * heads;
  c.hidden_dim = 3 * c.dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.max_seq_len = max_seq_len;
  return c;
}

}  // namespace banyan::testing
