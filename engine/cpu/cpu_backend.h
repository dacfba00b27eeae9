// CpuBackend: the fp32 LLaMA forward pass on the CPU (with the variants ModelConfig describes:
// q/k/v biases, per-head q/k RMSNorm before RoPE, scaled RoPE frequencies), the reference backend and the default on
// machines without a GPU. Matrix products go through OpenBLAS (threaded); attention through
// kernels/cpu (TPP for decode rows, causal prefill attention for prefill sequences).
//
// KV memory: [layer][chunk][k|v][kv_head][chunk_size][head_dim] fp32, sized at creation.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model/model.h"

namespace banyan::engine {

struct CpuBackendOptions {
  int32_t num_chunks = 1024;
  int32_t chunk_size = 64;
  AttentionMode attention = AttentionMode::kTpp;
};

class CpuBackend final : public Backend {
 public:
  // `weights` must outlive the backend.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const ModelWeights* weights,
                                                            const CpuBackendOptions& options);
  // Chunks that fit in `bytes` of KV memory for this model and chunk size.
  static int64_t ChunksForBudget(const ModelConfig& config, int32_t chunk_size, int64_t bytes);

  std::string_view name() const override { return "cpu"; }
  int32_t num_chunks() const override { return options_.num_chunks; }
  int32_t chunk_size() const override { return options_.chunk_size; }
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> copies) override;
  absl::Status Forward(const StepBatch& batch, std::vector<float>* logits) override;
  // The final-norm hidden states of the last Forward's logit rows, [rows][dim]: what the LM head
  // multiplies, and what draft heads (engine/speculative/draft_heads.h) read.
  const std::vector<float>& last_hidden() const { return hidden_; }
  absl::Status HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const override;

 private:
  CpuBackend(const ModelWeights* weights, const CpuBackendOptions& options);
  void ApplyRope(float* x, int heads, int32_t pos) const;
  void Attention(const StepBatch& batch, int layer, const float* q, float* out);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  CpuBackendOptions options_;
  int64_t layer_stride_;  // floats per layer of KV memory
  int64_t chunk_stride_;  // floats per chunk within a layer
  std::vector<float> kv_;
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE frequencies
  // Scratch, reused across steps.
  std::vector<float> x_, xb_, q_, k_, v_, att_, h1_, h3_, partial_o_, partial_lse_;
  std::vector<float> hidden_;  // last_hidden()
};

}  // namespace banyan::engine
