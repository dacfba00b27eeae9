// Format-independent entry points: load any supported model, write a Hugging Face folder, and
// convert between the two RoPE row orderings of Wq / Wk.
//
// RoPE orderings, per head of head_dim rows (see model.h):
//   kInterleaved: rotation pairs are rows (2i, 2i + 1)            (Meta, llama2.c, GGUF-llama)
//   kHalf:        rotation pairs are rows (i, i + head_dim / 2)   (Hugging Face)
// The map is half row i <-> interleaved row 2i, half row i + head_dim/2 <-> interleaved 2i + 1,
// exactly the permute() in transformers' convert_llama_weights_to_hf.py.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/weights_layout.h"

namespace banyan::model {

using HfDtype = WeightDtype;

// Reorders the rows of w ([n_heads * head_dim, in]) from `from` to `to`; a no-op when equal.
// Aborts (BANYAN_CHECK) if w is not 2-D with n_heads * head_dim rows or head_dim is odd.
void PermuteQkRows(Tensor& w, int n_heads, int head_dim, RopeStyle from, RopeStyle to);

// The same for FP8 weights: codes move with their rows, and so do per-channel scales. With
// 128 x 128 blocks, only where no row leaves its block (head_dim divides 128);
// UnimplementedError otherwise.
absl::Status PermuteQkRows(QuantizedTensor& q, int n_heads, int head_dim, RopeStyle from,
                           RopeStyle to);

// Permutes every layer's Wq (n_heads) and Wk (n_kv_heads) to `to` and sets config.rope_style.
// Aborts for FP8 block-scaled weights whose rows would change blocks.
void ConvertRopeStyle(ModelWeights& w, RopeStyle to);

// Loads a model in any supported format:
//   a directory                    -> Hugging Face (config.json + safetensors), LoadHfFolder
//   a file starting with "GGUF"    -> LoadGguf (tokenizer metadata discarded)
//   a file ending in ".bin"        -> llama2.c checkpoint, LoadLlama2c
// NotFound for a missing path; InvalidArgument for an unrecognised file. With kFp8
// (--quantization fp8) the projections are quantized to FP8 (QuantizeWeightsFp8; as they are
// read for a Hugging Face folder).
absl::StatusOr<ModelWeights> LoadModel(const std::string& path,
                                       WeightQuantization quantization = WeightQuantization::kNone);

// Writes `w` as a Hugging Face folder of its architecture (LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, MistralForCausalLM, with rope_scaling and the eos list): `dir`/config.json and
// `dir`/model.safetensors (one file, tensors in `dtype`). Wq / Wk are written in the kHalf order
// whatever w.config.rope_style is; `w` itself is not modified. lm_head.weight is omitted when
// the embeddings are tied. Creates `dir` if needed and overwrites both files. FP8 projections
// (LayerWeights::fp8) are written as they are held, F8_E4M3 codes and F32 scales, in the layout
// Fp8SchemeFor picks (model/fp8_checkpoint.h); `dtype` applies to the other tensors.
absl::Status WriteHfFolder(const ModelWeights& w, const std::string& dir,
                           HfDtype dtype = HfDtype::kF32);

}  // namespace banyan::model
