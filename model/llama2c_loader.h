// Loader for llama2.c checkpoints (the "legacy" version-0 export of Karpathy's llama2.c).
//
// Layout (little-endian):
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//     (vocab_size < 0 means an untied classifier follows; |vocab_size| is the vocabulary)
//   fp32 token_embedding [vocab, dim]
//   fp32 rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim],
//        wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
//        w3 [L, hidden, dim], rms_final [dim]
//   fp32 freq_cis_real [seq_len, head_dim / 2], freq_cis_imag (same)   -- skipped
//   fp32 wcls [vocab, dim]   (only when vocab_size < 0)
// The file size must match the header exactly. llama2.c rotates pairs (2i, 2i + 1), so the
// result has rope_style kInterleaved; rope_theta 10000, norm_eps 1e-5, bos 1, eos 2.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace banyan::model {

absl::StatusOr<ModelWeights> LoadLlama2c(const std::string& path);

}  // namespace banyan::model
