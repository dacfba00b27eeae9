// Loader for GGUF files (versions 2 and 3) whose general.architecture is "llama".
//
// Supported tensor types: F32 (0), F16 (1), BF16 (30); any other type on a tensor the model
// needs is an "unsupported tensor type" error naming the tensor. Tensor data starts at the
// header end rounded up to general.alignment (default 32). GGML lists dims innermost first,
// so a [out, in] matrix has ne = {in, out}.
//
// llama.cpp's converter permutes Hugging Face Wq / Wk into the interleaved RoPE order, so the
// result has rope_style kInterleaved. Missing output.weight means tied embeddings.
// Rejected with UnimplementedError: rope scaling (llama.rope.scaling.type other than "none",
// or a rope_freqs.weight tensor), experts (llama.expert_count > 0), partial rotary
// (llama.rope.dimension_count != head_dim).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/vocab.h"

namespace banyan::engine {

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
absl::StatusOr<ModelWeights> LoadGguf(const std::string& path, SpmVocab* vocab_out,
                                      BpeSpec* bpe_out = nullptr,
                                      std::string* chat_template_out = nullptr);

}  // namespace banyan::engine
