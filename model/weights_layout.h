// The list of tensors a ModelConfig implies, with their expected shapes, and validation of a
// loaded ModelWeights against it. Every loader and writer walks this one list, so "which
// tensors exist and what shape they have" is decided in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model.h"

namespace banyan::model {

enum class WeightKind {
  kTokEmbd,    // [vocab, dim]
  kAttnNorm,   // [dim]
  kWq,         // [n_heads * head_dim, dim]
  kWk,         // [n_kv_heads * head_dim, dim]
  kWv,         // [n_kv_heads * head_dim, dim]
  kWo,         // [dim, n_heads * head_dim]
  kFfnNorm,    // [dim]
  kGate,       // [hidden_dim, dim]
  kDown,       // [dim, hidden_dim]
  kUp,         // [hidden_dim, dim]
  kFinalNorm,  // [dim]
  kLmHead,     // [vocab, dim]; only when !tie_embeddings
  kBq,         // [n_heads * head_dim]; only when qkv_bias
  kBk,         // [n_kv_heads * head_dim]; only when qkv_bias
  kBv,         // [n_kv_heads * head_dim]; only when qkv_bias
  kQNorm,      // [head_dim]; only when qk_norm
  kKNorm,      // [head_dim]; only when qk_norm
};

struct TensorSlot {
  WeightKind kind;
  int layer;                   // -1 for tensors outside the blocks
  std::vector<int64_t> shape;  // expected shape, row-major
};

// Every tensor of a model with config `cfg`, in a fixed order: tok_embd, then per layer the
// nine block tensors (then bq, bk, bv when qkv_bias, then q_norm, k_norm when qk_norm), then
// final_norm, then lm_head when untied. Requires a config that passed
// ValidateConfig (head_dim() divides by n_heads).
std::vector<TensorSlot> ListTensorSlots(const ModelConfig& cfg);

// The tensor a slot refers to. Requires w.layers.size() > slot.layer.
Tensor& SlotTensor(ModelWeights& w, const TensorSlot& slot);
const Tensor& SlotTensor(const ModelWeights& w, const TensorSlot& slot);

// True for the seven projection kinds (wq, wk, wv, wo, gate, down, up): the tensors that may be
// held in FP8 (LayerWeights::fp8).
bool IsProjection(WeightKind kind);

// The FP8 form of a slot: the projection's QuantizedTensor (possibly empty), or nullptr for a
// kind that is never quantized.
QuantizedTensor* SlotQuantized(ModelWeights& w, const TensorSlot& slot);
const QuantizedTensor* SlotQuantized(const ModelWeights& w, const TensorSlot& slot);

// True when any projection of `w` is held in FP8.
bool HasQuantizedWeights(const ModelWeights& w);

// Format-neutral name for messages: "tok_embeddings", "layers.3.wq", "lm_head".
std::string SlotName(const TensorSlot& slot);

// "[4096, 11008]".
std::string ShapeString(const std::vector<int64_t>& shape);

// True for a tensor name that changes the forward pass when present (a bias, or a q/k norm
// weight: "*.bias", "*q_norm.weight", "*k_norm.weight"), so that a file holding one the config
// does not ask for must be refused rather than loaded without it.
bool IsBehaviourTensor(const std::string& name);

// Checks sizes are positive, divisible (dim % n_heads unless head_size is set, n_heads %
// n_kv_heads, even head_dim), rope scaling parameters (model/rope.h), and
// within limits that keep every size product far from int64 overflow. InvalidArgument naming
// `source` otherwise.
absl::Status ValidateConfig(const ModelConfig& cfg, const std::string& source);

// Checks the config, the layer count, and every tensor's shape and element count against
// ListTensorSlots (lm_head must be empty when tied). A projection held in FP8 must have an empty
// Tensor and a QuantizedTensor of the slot's shape that passes CheckQuantized. Messages name w.source and the tensor:
// "<source>: tensor shape mismatch for layers.0.wq: expected [64, 64], got [64, 32]".
absl::Status ValidateWeights(const ModelWeights& w);

}  // namespace banyan::model
