// Loader for GGUF files (versions 2 and 3) whose general.architecture is "llama" (Llama 2/3,
// Mistral), "qwen2" or "qwen3"; metadata keys are read under that prefix ("qwen3.block_count").
//
// Supported tensor types: F32 (0), F16 (1), BF16 (30), and the block-quantized Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, dequantized to fp32 at load (model/gguf_quant.h; the load log states
// the memory this costs); any other type on a tensor the model needs is an "unsupported tensor
// type" error naming the tensor, and a quantized tensor whose rows do not split into blocks is
// refused. Tensor data starts at the header end rounded up to general.alignment (default 32).
// GGML lists dims innermost first, so a [out, in] matrix has ne = {in, out}.
//
// llama.cpp's converter permutes Llama's Wq / Wk into the interleaved RoPE order, so "llama"
// loads with rope_style kInterleaved; qwen2 / qwen3 stay rotate-half (kHalf). Missing
// output.weight means tied embeddings. qwen2 reads blk.N.attn_{q,k,v}.bias, qwen3
// blk.N.attn_{q,k}_norm.weight and <arch>.attention.key_length as head_dim. A rope_freqs.weight
// tensor (Llama 3.1's scaling, precomputed) divides the RoPE frequencies. tokenizer.ggml.eot /
// eom_token_id stop generation like eos. <arch>.attention.sliding_window smaller than the
// context limits the context to it, with a warning.
// Rejected with UnimplementedError: <arch>.rope.scaling.type other than "none", experts
// (<arch>.expert_count > 0), partial rotary (<arch>.rope.dimension_count != head_dim),
// value_length != key_length, a bias or q/k norm tensor the architecture does not read.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "text/tokenizer/bpe_spec.h"
#include "text/tokenizer/vocab.h"

namespace banyan::model {

// When vocab_out is non-null, also fills it from tokenizer.ggml.* (which must then describe a
// SentencePiece vocabulary, tokenizer.ggml.model == "llama"):
//   tokens -> pieces, scores (default 0), token_type -> types (0 "undefined" -> kNormal),
//   unknown/bos/eos/padding_token_id (ids >= vocab size, e.g. 0xffffffff, become -1 for pad),
//   add_space_prefix -> add_dummy_prefix (default true),
//   remove_extra_whitespaces (default false: llama.cpp never collapses whitespace, and Meta's
//   Llama tokenizers set it false), byte_fallback = any piece of type kByte.
// model_type is kBpe: llama.cpp's SPM tokenizer is score-driven BPE.
// When bpe_out is non-null and tokenizer.ggml.model is "gpt2", fills bpe_out instead (vocab_out
// is left untouched) with the byte-level BPE the file describes: tokens of token_type 3
// (control) become special added tokens and 4 (user-defined) plain added tokens, the others the
// vocabulary; merges ("a b") in rank order; tokenizer.ggml.pre names the pre-tokenizer
// (ApplyGgufPreTokenizer in hf_json_reader.h: "llama-bpe" also sets ignore_merges, as Llama 3's
// tokenizer.json does); bos/eos/unknown_token_id; add_bos_token (default: true for llama-bpe)
// and add_eos_token decide the ids Encode adds.
// When chat_template_out is non-null, sets it to tokenizer.chat_template (empty when absent).
absl::StatusOr<ModelWeights> LoadGguf(const std::string& path, text::SpmVocab* vocab_out,
                                      text::BpeSpec* bpe_out = nullptr,
                                      std::string* chat_template_out = nullptr);

}  // namespace banyan::model
