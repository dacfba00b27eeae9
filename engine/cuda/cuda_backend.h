// CudaBackend: the LLaMA forward pass on one NVIDIA GPU, over the same StepBatch and
// AttentionPlan as the CPU backend (engine/backend.h).
//
// Numerics: weights in bf16 (or fp16), converted on upload; GEMMs through cuBLAS with fp32
// accumulation and fp32 outputs; the residual stream is fp32 and the residual adds are the
// beta = 1 of the Wo and W_down GEMMs; norm weights stay fp32. Activations are rounded to the
// model dtype only where they feed a GEMM or the KV cache. Logits are fp32.
//
// Per layer: RMSNorm -> one fused QKV GEMM -> RoPE + K/V written into chunk slots (one kernel
// for every token of the step, before any attention of the layer) -> attention (decode rows:
// the TPP kernels; prefill sequences: the tensor-core prefill kernel) -> Wo GEMM (+= x) -> RMSNorm -> one fused gate|up GEMM -> SwiGLU -> W_down
// GEMM (+= x).
//
// KV memory: [layer][chunk][k|v][kv_head][chunk_size][head_dim] in the model dtype, one
// allocation sized at creation (kernels/paged_views.h). Attention modes (backend.h):
//  - kTpp: decode steps whose plan has shared segments run the two-phase-partition kernel
//    (kernels/cuda/tpp/): each plan segment's shared KV is read once for all its rows on the
//    tensor cores, then each row's private tail, merged by log-sum-exp. The TppWorkPlan (host
//    work partition, one int32 image) is rebuilt only when the AttentionPlan's shape changes
//    (its version, rows or chunk lists); otherwise only the span ends AdvanceLengths moved are
//    patched and re-uploaded. Either is done on the host after layer 0's QKV kernels are
//    enqueued and before its attention, so it overlaps GPU work. A plan without segments (nothing
//    shared) runs TPP's paged call: the same work without phase 1, so `tpp` costs what `paged`
//    costs when nothing is shared. Head dims without a compiled TPP family (64 and 128 have
//    one; the bundled model's 8 does not) read every row's segments in phase 2, on TPP's generic
//    kernel: correct, with nothing read once for several rows.
//  - kPaged: TPP's paged call (plans built without segments).
//  - kNone: attention skipped, projections kept.
//
// CUDA graphs (CudaBackendOptions::cuda_graphs): a step whose rows are all decode rows (no
// prefill) is captured once per launch shape and replayed (engine/cuda/decode_graph.h). Its
// inputs and attention tables are copied into fixed device buffers on the stream before the
// replay. The shape is the row count rounded up to a bucket (pad_decode_rows) and the attention
// path; a capture also bakes in the buffer addresses and the attention's launch signature
// (which kernels run, and how). A new TPP plan of the same signature (rows
// that cross chunk boundaries, rows that join or leave within the bucket) does not capture: the
// attention kernel nodes of the cached executable get the new grids and tables
// (cudaGraphExecKernelNodeSetParams, UpdateAttentionNodes). A new shape or signature captures
// again (patched into the cached executable by cudaGraphExecUpdate when the topology allows)
// once it has lasted graph_min_stable_steps steps (the steps before run eagerly). Steps with
// prefill rows run eagerly. cuBLAS runs on a fixed workspace (cublasSetWorkspace) so that
// capture never allocates.
//
// Not thread-safe: the engine thread owns it. Forward and ForwardSample synchronize on the step
// before they return; LaunchSample does not (CollectSample waits). Greedy decoding is sampling
// with temperature 0 (engine/sampler/sampler.h, step 4): there is one step API.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/decode_graph.h"
#include "model/model.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::engine {

// Decode-attention counters (tests and benchmarks read them; ResetAttentionStats clears them).
struct CudaAttentionStats {
  int64_t decode_steps = 0;      // steps with decode rows
  int64_t tpp_steps = 0;         // of which ran the TPP kernels over shared segments
  // The deterministic mode: steps whose decode rows read a shared prefix once (group tiles of
  // SharedPrefixMmaKernel), and the rows they held.
  int64_t invariant_shared_steps = 0;
  int64_t invariant_shared_rows = 0;
  // Work plans of the TPP kernels (also those of their paged call, over plans without segments).
  int64_t tpp_plan_builds = 0;   // TppWorkPlan::Build + whole image uploaded
  int64_t tpp_plan_updates = 0;  // same shape: UpdateSpanEnds + span-end range uploaded
  double build_host_us = 0;      // summed host time of the builds (shape check, Build, copies)
  double update_host_us = 0;     // summed host time of the updates
  int64_t build_upload_bytes = 0;
  int64_t update_upload_bytes = 0;
  // The last TPP step's plan.
  int32_t last_segments = 0;
  int32_t last_p1_items = 0;
  int32_t last_p2_items = 0;
  int32_t last_merge_rows = 0;
  bool last_deferred_merge = false;
  // CUDA graphs of decode-only steps (captures, replays, node updates, host cost).
  cuda::DecodeGraphStats graph;
  // Host time of the steps with decode rows before the device can start on them, summed by part
  // (the device waits for all of it when the step before has finished).
  int64_t host_steps = 0;
  double inputs_host_us = 0;     // PrepareInputs: flatten and check the rows, upload them
  double attention_host_us = 0;  // graph steps: the TPP plan, its upload
  double launch_host_us = 0;     // the graph launch (node updates and captures included), or
                                 // the eager enqueue of every kernel (its attention work too)
  double sample_host_us = 0;     // LaunchSample: pack, upload and launch the sampling kernel
  // Steps launched in two halves (LaunchForward, then LaunchSampling once the host knew the
  // masks): how many, how many of them the device sat waiting for the sampling after the
  // forward pass (over 10 us), and the summed wait (device time, CUDA events).
  int64_t late_steps = 0;
  int64_t late_waits = 0;
  double late_wait_us = 0;
};

struct CudaBackendOptions {
  // KV pool size: num_chunks when > 0; otherwise as many chunks as fit in kv_memory_bytes; when
  // both are 0, what memory_fraction leaves (vLLM's --gpu-memory-utilization: this process may
  // hold that share of the device's memory, so the pool gets fraction x total, less what is in
  // use before the weights load, the weights and the workspace reserve); when that is 0 too,
  // 90% of the device memory left free after the weights and the workspace reserve.
  int32_t num_chunks = 0;
  int64_t kv_memory_bytes = 0;
  double memory_fraction = 0;
  int32_t chunk_size = 64;
  AttentionMode attention = AttentionMode::kTpp;
  kernels::cuda::DType dtype = kernels::cuda::DType::kBf16;
  int device = 0;
  // Memory kept free for activations when the KV pool is sized from free memory, bytes.
  int64_t workspace_reserve_bytes = int64_t{2} << 30;
  // Knobs of the TPP work partition (kTpp); num_sms is replaced by the device's.
  kernels::cuda::tpp::TppOptions tpp;
  // Decode-only steps are captured in CUDA graphs and replayed (see the top of this file).
  bool cuda_graphs = true;
  // A launch shape is captured once its key has been asked for this many steps in a row (the
  // steps before run eagerly); 1 captures at once. engine/cuda/decode_graph.h says why.
  int32_t graph_min_stable_steps = 2;
  // Shapes (row count, logit rows, attention path, fed or not) whose executables are kept, LRU.
  int32_t graph_cache_shapes = 8;
  // In a captured step of at most graph_early_launch_rows rows (0: none), the RMSNorm, RoPE +
  // KV write, QKV bias / norm and SwiGLU kernels are launched as soon as the kernel
  // before them (a GEMM, mostly) has started all its blocks, and wait for it on the device
  // (kernels::cuda::LaunchEarly): their launch overlaps its last wave instead of following its
  // end. sm_90 and newer; results are the same bits either way. It shortens small steps and
  // did not pay at 1,024 rows (docs/benchmarks.md, 2026-12-03, night), hence the row bound.
  int32_t graph_early_launch_rows = 128;
  // Decode-only steps run on a row count rounded up to a bucket (DecodeRowBucket), so that a
  // batch that gains or loses a few rows keeps its graph shape; the padding rows cost GEMM
  // rows only (no attention, no KV write) and their logits are ignored.
  bool pad_decode_rows = true;
  // The QKV and gate/up GEMMs write their outputs in the model dtype instead of fp32 (RoPE and
  // SwiGLU read them; half the bytes both ways), as the weights and KV already are. Off: fp32,
  // one rounding fewer.
  bool narrow_activations = true;
  // CreateDummy: the projections quantized to FP8 per output channel on the device (the rule of
  // --quantization fp8) and run as W8A8 GEMMs on the FP8 tensor cores (engine/cuda/fp8_gemm.h).
  // Loaded weights need no option: FP8 projections (an FP8 checkpoint, --quantization fp8) stay
  // FP8 on the device whenever cuda::Fp8PlanFor allows and the GPU is Hopper or newer, and are
  // dequantized to `dtype` at upload otherwise (fp8_fallback() says why).
  bool fp8_dummy = false;
  // FP8 products of at most this many tokens run as the weight-streaming GEMV on the FP8 tensor
  // cores (kernels/cuda/fp8_gemv.h; at most kFp8GemvMaxRows), larger ones through cuBLASLt; 0:
  // all through cuBLASLt. On an H100 (2026-12-06) the 8B shape's FP8 projections of 1 and 8 rows
  // took 3.38 and 3.43 ms a step through it against 4.57 and 4.41 ms through cuBLASLt
  // (docs/benchmarks.md section 11).
  int fp8_gemv_max_rows = 8;
  // The KV cache in FP8 (E4M3 codes with one power-of-two scale per token, kv head and K or V:
  // kernels/kv_fp8.h): about half the bytes per token of a bf16 / fp16 cache, so about twice the
  // tokens fit. The attention kernels dequantize into the model dtype as they load (exactly);
  // head_dim at most 256 and a chunk size that is a multiple of 8.
  bool kv_fp8 = false;
  // Batch-invariant decoding (banyand --deterministic on): every GEMM through cuBLASLt with one
  // algorithm pinned per shape and checked at start-up (engine/cuda/pinned_gemm.h), or through
  // InvariantGemm (kernels/cuda/invariant_gemm.h) where that check fails, and every token's
  // attention, decode rows and prefill tokens alike, through InvariantAttention
  // (kernels/cuda/prefill/attention.h; decode rows that share a prefix read it once, for head
  // dims 64 and 128; decode-only steps in CUDA graphs too), so a request's logits are
  // the same bits alone or in any batch, with its prefix shared or not, cached or computed, in
  // any cut into prefill chunks. Models with 16-bit projections (FP8 ones are refused); the KV
  // cache may be FP8.
  bool batch_invariant = false;
};

// The row count a decode-only step of `rows` rows runs at with pad_decode_rows: multiples of 8
// up to 64, 16 up to 256, 32 up to 1024, then 64.
int DecodeRowBucket(int rows);

class CudaBackend final : public Backend {
 public:
  // Uploads `weights` (narrowed to options.dtype). The host weights are not kept.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const model::ModelWeights* weights,
                                                             const CudaBackendOptions& options);
  // Synthetic weights generated on the device, equal (before rounding to the dtype) to
  // MakeDummyWeights(config, seed): any shape, no host copy.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateDummy(const model::ModelConfig& config,
                                                                  uint64_t seed,
                                                                  const CudaBackendOptions& options);
  // Bytes of KV memory one chunk takes (every layer, K and V).
  static int64_t ChunkBytes(const model::ModelConfig& config, int32_t chunk_size,
                            kernels::cuda::DType dtype, bool kv_fp8 = false);
  // Whether a CUDA device is present (false on machines without a GPU or driver).
  static bool DeviceAvailable();

  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  bool batch_invariant() const override { return options_.batch_invariant; }
  bool shared_prefix_plans() const override;
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> copies) override;
  double device_seconds() const override;
  absl::Status Forward(const StepBatch& batch, std::vector<float>* logits) override;

  // Runs the model and samples every spec on the device (kernels/cuda/sampling.h, the contract
  // of engine/sampler/sampler.h); only tokens, logprobs and the asked-for top entries come back,
  // in one copy. Greedy specs (temperature 0) take the argmax, the lowest id on ties.
  absl::Status ForwardSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                             std::vector<SampleResult>* out) override;
  // The same in two halves: LaunchSample enqueues the step, its sampling and the copy of the
  // results into pinned memory, records an event and returns; CollectSample waits for the
  // oldest step's event only (no device-wide or stream sync). Two may be in flight; a fed row
  // reads the sampled token on the device (each sampled step also leaves its tokens, one per
  // spec, in out_tokens). Before refilling the staging buffers, a launch waits only for the
  // uploads of the step in flight.
  using Backend::LaunchSample;
  absl::Status LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                            std::span<const int32_t> feed) override;
  absl::Status CollectSample(std::vector<SampleResult>* out) override;
  // The step's layers are enqueued by LaunchForward, its sampling (with the masks the host
  // worked out meanwhile) by LaunchSampling, in stream order behind them.
  absl::Status LaunchForward(const StepBatch& batch, int32_t num_specs,
                             std::span<const int32_t> feed) override;
  absl::Status LaunchSampling(std::span<const SampleSpec> specs) override;
  // The awaiting step's sampler's upload (DeviceSampler::MaskStaging); empty without such a
  // step or when the pinned memory cannot grow.
  std::span<uint64_t> MaskStaging(int32_t count, int64_t words) override;
  bool launches_async() const override { return true; }
  // Token masks (SampleSpec::allowed) go to the device with the samples' parameters; the
  // sampling kernel applies them (kernels/cuda/sampling.h).
  // Copies the rows from the device (call after CollectSample: the step is done).
  absl::Status HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const override;
  // The heads run on the device over the last step's hidden states (device_draft_heads.h); the
  // first call with a head set uploads it.
  absl::Status DraftTrees(const DraftHeads& heads, std::span<const int32_t> rows,
                          std::span<const int32_t> roots, std::span<const int32_t> branching,
                          std::vector<DraftHeads::Tree>* out) override;

  // Steps launched ahead (LaunchSample) and not collected yet. While any is in flight, Forward,
  // ForwardSample and the other calls that run a step are refused (FailedPrecondition).
  int steps_in_flight() const;

  const CudaAttentionStats& attention_stats() const { return stats_; }
  AttentionMode attention_mode() const { return options_.attention; }
  void ResetAttentionStats() { stats_ = {}; }
  // True when decode rows run on the TPP kernels (attention on): two-phase where the plan has
  // shared segments (kTpp) and the head dim a compiled family, phase 2 alone otherwise.
  bool uses_tpp_kernel() const;
  // Turns the graph path on or off for the following steps (off drops the cached graphs). It
  // also turns off by itself if a capture fails (stats: graph.fallbacks, graph_error()).
  void SetCudaGraphs(bool on);
  bool cuda_graphs() const;
  // Why the graph path was turned off after a failure; empty if it never failed.
  const std::string& graph_error() const { return graph_error_; }
  // Why the last attention-node update of a cached graph failed (empty if none did).
  const std::string& graph_update_error() const;
  // Why graphs stopped launching kernels early (the driver refused the edges); empty if not.
  const std::string& graph_early_error() const;

  const model::ModelConfig& config() const { return cfg_; }
  int32_t num_chunks() const override { return num_chunks_; }
  int32_t chunk_size() const override { return options_.chunk_size; }
  bool kv_fp8() const override { return options_.kv_fp8; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t kv_bytes() const { return kv_bytes_; }
  // "" when the projections run in the model dtype, else how they run as FP8 ("FP8 W8A8,
  // per-channel weight and per-token activation scales" or the block-scaled form).
  const std::string& fp8_projections() const { return fp8_projections_; }
  // Why FP8 projections were dequantized to the model dtype instead; "" when they were not.
  const std::string& fp8_fallback() const { return fp8_fallback_; }
  // batch_invariant: how each GEMM shape of the model runs (engine/cuda/pinned_gemm.h:
  // cuBLASLt with a pinned algorithm, or InvariantGemm where the check refused it).
  const std::string& deterministic_gemms() const { return deterministic_gemms_; }

 private:
  struct Impl;
  struct StepInputs;
  CudaBackend(const model::ModelConfig& config, const CudaBackendOptions& options);
  absl::Status Init(const model::ModelWeights* weights, uint64_t dummy_seed);
  // batch_invariant: Impl::pinned_gemm with every GEMM shape of the model checked.
  absl::Status PrepareDeterministicGemms();
  // The QKV GEMM writes the model dtype (narrow_activations, when no bias or norm follows it).
  bool NarrowQkv() const {
    return options_.narrow_activations && !cfg_.qkv_bias && !cfg_.qk_norm;
  }
  // Runs the model up to the logits, left on the device; *rows receives their number.
  // Decode-only steps go through a CUDA graph when enabled. `feed`: LaunchSample's. `samples`:
  // the specs a sampled step will leave in out_tokens (what a later fed step may read).
  absl::Status Run(const StepBatch& batch, int32_t* rows, std::span<const int32_t> feed = {},
                   int32_t samples = 0);
  // Flattens and checks the step's inputs, sizes the workspace, uploads the inputs.
  absl::Status PrepareInputs(const StepBatch& batch, int32_t samples,
                             std::span<const int32_t> feed, StepInputs* in);
  // FailedPrecondition while steps launched ahead are in flight (for the other calls).
  absl::Status NoStepInFlight() const;
  // The flight ring of LaunchSample (cuda_backend.cc).
  absl::Status BeginFlight();
  void EndFlightRun();
  absl::Status FinishFlight(int* slot_index);
  // LaunchSample's and LaunchSampling's second half (`feed`: a fed step's, for pending tokens).
  absl::Status EnqueueSampling(std::span<const SampleSpec> specs, std::span<const int32_t> feed);
  // Builds the attention work of the step (TPP plan, prefill tiles), uploads it,
  // and fills the launch arguments. `fixed_layout`: tables at offsets that change only when a
  // capacity bucket grows (the graph path).
  // The batch-invariant mode's attention sequences (Impl::invariant_seqs): the decode rows, each
  // as a sequence of one new token over its plan row's spans, then the prefill sequences.
  absl::Status InvariantSeqs(const StepBatch& batch, const StepInputs& in);
  absl::Status PrepareAttention(const StepBatch& batch, const StepInputs& in, bool fixed_layout);
  // Enqueues the model on the stream: embedding, layers, final norm, LM head. With
  // `prepare_in_layer0`, PrepareAttention runs on the host after layer 0's QKV work is
  // enqueued (the eager path); otherwise it must have run before (the graph path).
  absl::Status Enqueue(const StepBatch& batch, const StepInputs& in, bool prepare_in_layer0);
  // What the captured launches of this step depend on (decode_graph.h).
  cuda::DecodeGraphKey GraphKey(const StepInputs& in) const;
  // Moves the attention nodes of a captured step to this step's work partition (the TPP plan);
  // fails unless every layer's nodes were found.
  absl::Status UpdateAttentionNodes(const std::vector<kernels::cuda::KernelNode>& kernels,
                                    cudaGraphExec_t exec, int* nodes);
  // Brings the TPP work plan and its device image up to date with `plan` (host work + async
  // copies on the stream).
  absl::Status PrepareTpp(const kvcache::AttentionPlan& plan);

  model::ModelConfig cfg_;
  CudaBackendOptions options_;
  int32_t num_chunks_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t kv_bytes_ = 0;
  CudaAttentionStats stats_;
  std::string graph_error_;
  std::string fp8_projections_, fp8_fallback_, deterministic_gemms_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace banyan::engine
