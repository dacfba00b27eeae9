// CpuBackend: the fp32 LLaMA forward pass on the CPU (with the variants ModelConfig describes:
// q/k/v biases, per-head q/k RMSNorm before RoPE, scaled RoPE frequencies), the reference backend and the default on
// machines without a GPU. Matrix products go through OpenBLAS (threaded); attention through
// kernels/cpu (TPP for decode rows, causal prefill attention for prefill sequences).
//
// KV memory: [layer][chunk][k|v][kv_head][chunk_size][head_dim] fp32, sized at creation.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "model/model.h"

namespace banyan::engine {

struct CpuBackendOptions {
  int32_t num_chunks = 1024;
  int32_t chunk_size = 64;
  AttentionMode attention = AttentionMode::kTpp;
  // Every row computed on its own: one matrix-vector product per row and weight instead of one
  // GEMM per step, so that a row's logits do not depend on what else the step holds (a GEMM's
  // blocking does, in the last bits, and a seeded sample near a tie then flips); and attention
  // with one softmax max per context (DecodeAttentionParams::fixed_max), so that they do not
  // depend on how the tree cut the context into chunks and nodes either. With paged attention,
  // a request then gets the same bits in any batch and any cache state as alone. It reads the
  // weights once per row: for tests that compare batched runs with solo runs, not for serving.
  bool row_invariant = false;
  // The W8A8 GEMMs' activation rounding (the CUDA backend's FP8 projections): each projection's
  // input rounded as kernels/cuda/fp8_quant.h says -- per group of `fp8_activation_group`
  // elements of a token (a value at least the widest input for one scale per token, 128 for the
  // block-scaled checkpoints' groups), scale = amax / 448 (1 for a group of zeros), value = E4M3(x / scale) *
  // scale -- before the product with the (dequantized) weights. 0: inputs as they are. The
  // reference the CUDA backend's FP8 path is checked against; the LM head is not rounded.
  int32_t fp8_activation_group = 0;
  // The FP8 KV cache's rounding (CudaBackendOptions::kv_fp8): each K / V row written is replaced
  // by its dequantized FP8 form (kernels/kv_fp8.h), exactly the values the CUDA kernels read.
  bool kv_fp8 = false;
  // Threads of the BLAS products (OpenBLAS's pool, one per process: the last backend created
  // sets it). 0: automatic, CpuBackend::AutoThreads.
  int32_t threads = 0;
};

// A K or V row of `n` values replaced by what an FP8 KV cache holds of it (kernels/kv_fp8.h).
void RoundKvRowFp8(float* row, int n);

class CpuBackend final : public Backend {
 public:
  // `weights` must outlive the backend. FP8 projections are dequantized to fp32 here.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const model::ModelWeights* weights,
                                                            const CpuBackendOptions& options);
  // The BLAS threads for `config` when CpuBackendOptions::threads is 0: one where the largest
  // weight matrix has fewer than kThreadedProductMacs multiply-adds per token, else
  // `default_threads` (OpenBLAS's own default: the cores, or OPENBLAS_NUM_THREADS). OpenBLAS's
  // threads hand work off by spinning and yielding, which only pays on big products: on the
  // bundled model (64 wide, 512 tokens of vocabulary) a step is a few hundred products of at most
  // 32K multiply-adds. On a 2-core machine with both cores kept busy by a compiler,
  // tests/e2e/deterministic.test.js took 318 s with OpenBLAS's two threads and 8.8 s with one
  // (6 s on the idle machine): each threaded product waited for a thread that had yielded its
  // core to the compiler.
  static constexpr int64_t kThreadedProductMacs = int64_t{1} << 22;
  static int32_t AutoThreads(const model::ModelConfig& config, int32_t default_threads);
  // Chunks that fit in `bytes` of KV memory for this model and chunk size.
  static int64_t ChunksForBudget(const model::ModelConfig& config, int32_t chunk_size, int64_t bytes);

  std::string_view name() const override { return "cpu"; }
  int32_t threads() const { return threads_; }  // the BLAS threads it runs with
  int32_t num_chunks() const override { return options_.num_chunks; }
  int32_t chunk_size() const override { return options_.chunk_size; }
  bool kv_fp8() const override { return options_.kv_fp8; }
  // Row-invariant products with paged attention (see row_invariant).
  bool batch_invariant() const override {
    return options_.row_invariant && options_.attention == AttentionMode::kPaged;
  }
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> copies) override;
  absl::Status Forward(const StepBatch& batch, std::vector<float>* logits) override;
  // The final-norm hidden states of the last Forward's logit rows, [rows][dim]: what the LM head
  // multiplies, and what draft heads (engine/speculative/draft_heads.h) read.
  const std::vector<float>& last_hidden() const { return hidden_; }
  absl::Status HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const override;

 private:
  CpuBackend(const model::ModelWeights* weights, const CpuBackendOptions& options);
  void ApplyRope(float* x, int heads, int32_t pos) const;
  void Attention(const StepBatch& batch, int layer, const float* q, float* out);

  // A block's projection matrices as the forward pass multiplies them: the model's own fp32
  // Tensor, or the fp32 copy in dequantized_ of a projection held in FP8 (LayerWeights::fp8),
  // dequantized once at Create: the CPU backend is the reference, so it computes with exactly
  // the values model::Dequantize defines.
  struct Projections {
    const model::Tensor *wq, *wk, *wv, *wo, *w_gate, *w_down, *w_up;
  };

  const model::ModelWeights& w_;
  const model::ModelConfig& cfg_;
  std::vector<model::Tensor> dequantized_;  // reserved up front: proj_ points into it
  std::vector<Projections> proj_;           // [n_layers]
  CpuBackendOptions options_;
  int32_t threads_ = 1;
  int64_t layer_stride_;  // floats per layer of KV memory
  int64_t chunk_stride_;  // floats per chunk within a layer
  // The KV pool, zero-filled by calloc: a pool this large comes from fresh anonymous pages that
  // the kernel zeroes on first touch, so a process pays only for the chunks it uses (a 256 MiB
  // std::vector was memset at construction: half of a short `banyan generate`'s time).
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], FreeDeleter> kv_;
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE frequencies
  // Scratch, reused across steps.
  std::vector<float> x_, xb_, q_, k_, v_, att_, h1_, h3_, partial_o_, partial_lse_;
  std::vector<float> a8_;  // a projection input rounded as FP8 (fp8_activation_group)
  std::vector<float> hidden_;  // last_hidden()
};

}  // namespace banyan::engine
