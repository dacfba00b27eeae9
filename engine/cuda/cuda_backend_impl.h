// Internals of the CUDA backend shared by its source files (cuda_backend.cc: set-up, the layer
// loop and the graph path; cuda_backend_step.cc: a step's inputs and attention work). Not a
// public header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublas_gemm.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/decode_graph.h"
#include "engine/cuda/device_draft_heads.h"
#include "engine/cuda/device_memory.h"
#include "engine/cuda/device_sampler.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/pinned_gemm.h"
#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/prefill/attention_work.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/layer_kernels.h"
#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::engine {
namespace cuda_internal {

namespace kc = kernels::cuda;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::StagedInts;

inline double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

using cuda::CublasStatus;
using cuda::RowMajorGemm;

inline double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Launch arguments of the step's attention (PrepareAttention fills them; the layers copy them
// and set the layer's KV view).
struct AttentionArgs {
  bool use_tpp = false;  // decode rows through the TPP kernel
  // Prefill rows through the prefill kernel; with CudaBackendOptions::batch_invariant, pp's work
  // list holds every token of the step (decode rows as sequences of one new token) for
  // InvariantAttention, and this is set when there is any.
  bool prefill = false;
  kc::tpp::TppRunArgs ta;
  kc::PrefillParams pp;
};

// The smallest power of two >= n (at least 16).
inline int64_t RoundUpPow2(int64_t n) {
  int64_t p = 16;
  while (p < n) p *= 2;
  return p;
}


}  // namespace cuda_internal

using namespace cuda_internal;  // NOLINT: the backend's own source files only include this
struct CudaBackend::Impl {
  using AttentionArgs = cuda_internal::AttentionArgs;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  int num_sms = 0;
  cuda::DeviceWeights weights;
  DeviceBuffer inv_freq;  // [head_dim / 2] fp32
  DeviceBuffer kv;
  int64_t layer_stride = 0;  // KV elements per layer (bytes in an FP8 cache)
  kernels::cuda::KvViewDev kv0;  // layer 0 of the KV cache; layer l is l * layer_stride further
  int kv_elem_bytes = 2;         // 1 in an FP8 cache
  // Workspace, grown on demand.
  DeviceBuffer x, xb, q, att, scratch, h, xo, logits, out_tokens;
  // FP8 projections (DeviceWeights::fp8()): the GEMMs, and one projection input at a time
  // quantized to FP8 ([T, K] codes, [T, ceil(K / 128)] or [T] scales).
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm;
  // The batch-invariant mode's GEMMs (CudaBackendOptions::batch_invariant).
  std::unique_ptr<cuda::PinnedGemm> pinned_gemm;
  DeviceBuffer act8, act8_scales;
  int last_out_rows = 0;  // real output rows of the last step (xo holds their hidden states)
  StagedInts step_ints, attn_ints;
  PinnedBuffer host_out;
  // Steps launched ahead of their results (LaunchSample): a ring of slots, the oldest at
  // flight_head.
  static constexpr int kFlightDepth = Backend::kMaxStepsInFlight;
  // One sampler per flight slot: a step's packed samples, uploads and results stay its own while
  // the next step is launched.
  cuda::DeviceSampler sampler[kFlightDepth];
  cuda::DeviceDraftHeads draft_heads;  // DraftTrees
  AttentionArgs attn;
  kc::PrefillWork prefill_work;
  // The batch-invariant mode's sequences (decode rows first) and the decode rows' spans, each
  // row's segments' spans then its own, in position order.
  std::vector<kc::PrefillSeq> invariant_seqs;
  std::vector<int32_t> invariant_chunk, invariant_begin, invariant_end;
  std::vector<size_t> invariant_first;  // per decode row: its first span in invariant_*, then the end
  // Decode rows grouped by the deepest shared segment of their plan, each group's whole pieces
  // read once (kc::AddSharedPrefixGroups), and the piece states of the rows whose pieces run
  // in CTAs of their own (kc::AddInvariantPieces), folded by the merge kernel.
  std::vector<kc::SharedPrefix> invariant_groups;
  DeviceBuffer invariant_state;

  // TPP decode attention (every mode but kNone; every supported head_dim).
  bool tpp = false;
  std::optional<kc::tpp::TppWorkPlan> tpp_plan;
  // AttentionPlan::build_id of the plan tpp_plan was built from: a step's plan with the same
  // build_id was only advanced since (its span ends moved), anything else is a new shape.
  uint64_t tpp_plan_build_id = 0;
  int64_t tpp_plan_generation = 0;  // TppWorkPlan builds so far (a graph key part)
  PinnedBuffer tpp_host_image;     // staging of the image for the async copies
  DeviceBuffer tpp_image, tpp_workspace;
  // Deferred-merge plans run phase 2 on side_stream beside phase 1 (fork / join events).
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  // The begin event Run records outside the flights (Forward's steps: their device time is not
  // counted). Launched steps time themselves from their slot's begin to its end event.
  cudaEvent_t step_begin = nullptr;
  double device_seconds = 0;
  bool step_begin_recorded = false;  // by Run, for this step
  cudaEvent_t cur_begin = nullptr;   // the begin event Run records (step_begin or a slot's)
  // Recorded after the uploads (inputs, attention tables) of a step launched ahead
  // (LaunchSample): the next launch may write the staging buffers again once it has completed.
  // Other steps never overlap the next one's host work, so they skip it.
  cudaEvent_t uploaded = nullptr;
  bool record_uploaded = false;  // set around Run by the launches ahead
  std::vector<int32_t> feed_rows;  // PrepareInputs' staging of a feed, kept across steps
  struct FlightSlot {  // a step's results are its sampler's (sampler[slot])
    cudaEvent_t begin = nullptr, end = nullptr;
    // A step launched by LaunchForward: where its forward pass ended and where its sampling,
    // enqueued later by LaunchSampling, began (the device's wait for the host between them).
    cudaEvent_t forward_end = nullptr, sampling_begin = nullptr;
    bool begin_recorded = false;
    bool late = false;  // both recorded
  };
  FlightSlot flights[kFlightDepth];
  int flight_head = 0, flight_count = 0;
  // The newest slot's step when LaunchForward launched it without its sampling (its end event is
  // recorded by LaunchSampling): the slot, the step's logits rows, the samples it was launched
  // for, and whether it had decode rows (for the host-time stats).
  struct ForwardOnly {
    int index = 0;
    int32_t rows = 0;
    int32_t num_specs = 0;
    bool decode = false;
  };
  std::optional<ForwardOnly> forward_only;
  int NextFlight() const { return (flight_head + flight_count) % kFlightDepth; }
  // out_tokens holds the tokens of the last step launched, one per spec, until a step that leaves
  // none there runs: what a fed step may read.
  bool feedable_valid = false;
  int32_t feedable_count = 0;

  // CUDA graphs of decode-only steps; cuBLAS runs on cublas_workspace so capture never allocates.
  bool graphs_on = false;
  std::unique_ptr<cuda::DecodeGraphCache> graphs;
  DeviceBuffer cublas_workspace;

  ~Impl() {
    // Steps may still be in flight (LaunchSample): let them finish before their
    // buffers, events and stream go.
    if (stream != nullptr) cudaStreamSynchronize(stream);
    graphs.reset();
    if (step_begin != nullptr) cudaEventDestroy(step_begin);
    if (uploaded != nullptr) cudaEventDestroy(uploaded);
    for (FlightSlot& s : flights) {
      if (s.begin != nullptr) cudaEventDestroy(s.begin);
      if (s.end != nullptr) cudaEventDestroy(s.end);
      if (s.forward_end != nullptr) cudaEventDestroy(s.forward_end);
      if (s.sampling_begin != nullptr) cudaEventDestroy(s.sampling_begin);
    }
    if (fork_event != nullptr) cudaEventDestroy(fork_event);
    if (join_event != nullptr) cudaEventDestroy(join_event);
    if (side_stream != nullptr) cudaStreamDestroy(side_stream);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The host side of one step: the flattened int32 inputs and where they sit in step_ints.
struct CudaBackend::StepInputs {
  std::vector<int32_t> tokens, positions, slot_chunk, slot_index, writes, logit_rows;
  std::vector<kc::PrefillSeq> prefill_seqs;
  int num_decode = 0;
  int T = 0;      // tokens of the step: decode rows, then prefill tokens
  int n_out = 0;  // rows of logits (padding rows included)
  int n_real_out = 0;  // of which the batch asked for (the first ones)
  int64_t o_tokens = 0, o_pos = 0, o_chunk = 0, o_slot = 0, o_write = 0, o_rows = 0;
  int64_t o_feed = -1;  // the fed rows (LaunchSample's feed), -1 for none
  bool use_tpp = false;
};

}  // namespace banyan::engine
