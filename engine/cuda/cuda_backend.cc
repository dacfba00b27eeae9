#include "engine/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/device_memory.h"
#include "engine/cuda/device_sampler.h"
#include "engine/cuda/device_weights.h"
#include "engine/model/weights_layout.h"
#include "engine/plan_view.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_work.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/layer_kernels.h"
#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::engine {
namespace {

namespace kc = kernels::cuda;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::StagedInts;

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

absl::Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(st), " (",
                                          cublasGetStatusString(st), ")"));
}

// True when `a` and `b` have the same shape: everything a TppWorkPlan depends on except the
// span ends (AdvanceLengths moves those; the work partition stays valid, see tpp_attention.h).
// The version and rows are compared first (what the StepRunner keys plan reuse on); the arrays
// as well, so that plans of another tree with a colliding version are never mistaken.
bool SameShape(const kvcache::AttentionPlan& a, const kvcache::AttentionPlan& b) {
  return a.version == b.version && a.chunk_size == b.chunk_size && a.rows == b.rows &&
         a.span_chunk == b.span_chunk && a.span_begin == b.span_begin &&
         a.span_end.size() == b.span_end.size() && a.seg_row_begin == b.seg_row_begin &&
         a.seg_row_end == b.seg_row_end && a.seg_span_begin == b.seg_span_begin &&
         a.seg_span_end == b.seg_span_end && a.row_span_begin == b.row_span_begin &&
         a.row_span_end == b.row_span_end && a.row_seg_begin == b.row_seg_begin &&
         a.row_seg_end == b.row_seg_end && a.row_seg_ids == b.row_seg_ids;
}

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Launch arguments of the step's attention (PrepareAttention fills them; the layers copy them
// and set the layer's KV view).
struct AttentionArgs {
  bool use_tpp = false;  // decode rows through the TPP kernel
  bool paged = false;    // decode rows through the paged kernel
  bool prefill = false;  // prefill rows through the prefill kernel
  kc::tpp::TppRunArgs ta;
  kc::PagedDecodeParams dp;
  kc::PrefillParams pp;
};

// The smallest power of two >= n (at least 16).
int64_t RoundUpPow2(int64_t n) {
  int64_t p = 16;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

struct CudaBackend::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  int num_sms = 0;
  cuda::DeviceWeights weights;
  DeviceBuffer inv_freq;  // [head_dim / 2] fp32
  DeviceBuffer kv;
  int64_t layer_stride = 0;  // KV elements per layer
  // Workspace, grown on demand.
  DeviceBuffer x, xb, q, att, scratch, h, xo, logits, partial_o, partial_lse, out_tokens;
  StagedInts step_ints, attn_ints;
  PinnedBuffer host_out;
  cuda::DeviceSampler sampler;  // ForwardSample
  AttentionArgs attn;
  kc::DecodeWork decode_work;
  kc::PrefillWork prefill_work;

  // TPP decode attention (kTpp mode, head_dim 64/128).
  bool tpp = false;
  std::optional<kc::tpp::TppWorkPlan> tpp_plan;
  kvcache::AttentionPlan tpp_key;  // the plan tpp_plan was built from (its shape)
  int64_t tpp_plan_generation = 0;  // TppWorkPlan builds so far (a graph key part)
  PinnedBuffer tpp_host_image;     // staging of the image for the async copies
  DeviceBuffer tpp_image, tpp_workspace;
  // Deferred-merge plans run phase 2 on side_stream beside phase 1 (fork / join events).
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  // Timing of ForwardSample steps on the device: from the first kernel to the sampled tokens.
  cudaEvent_t step_begin = nullptr, step_end = nullptr;
  double device_seconds = 0;
  bool step_begin_recorded = false;  // by Run, for this step

  // CUDA graphs of decode-only steps; cuBLAS runs on cublas_workspace so capture never allocates.
  bool graphs_on = false;
  std::unique_ptr<cuda::DecodeGraphCache> graphs;
  DeviceBuffer cublas_workspace;

  ~Impl() {
    graphs.reset();
    if (step_begin != nullptr) cudaEventDestroy(step_begin);
    if (step_end != nullptr) cudaEventDestroy(step_end);
    if (fork_event != nullptr) cudaEventDestroy(fork_event);
    if (join_event != nullptr) cudaEventDestroy(join_event);
    if (side_stream != nullptr) cudaStreamDestroy(side_stream);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

bool CudaBackend::DeviceAvailable() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

int64_t CudaBackend::ChunkBytes(const ModelConfig& c, int32_t chunk_size, kc::DType dtype) {
  return int64_t{2} * c.n_layers * c.n_kv_heads * chunk_size * c.head_dim() * kc::DTypeBytes(dtype);
}

CudaBackend::CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
    : cfg_(config), options_(options), impl_(std::make_unique<Impl>()) {}

CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const ModelWeights* weights, const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(weights->config, options));
  BANYAN_RETURN_IF_ERROR(b->Init(weights, 0));
  return b;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateDummy(
    const ModelConfig& config, uint64_t seed, const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(config, options));
  BANYAN_RETURN_IF_ERROR(b->Init(nullptr, seed));
  return b;
}

absl::Status CudaBackend::Init(const ModelWeights* weights, uint64_t dummy_seed) {
  const ModelConfig& c = cfg_;
  BANYAN_RETURN_IF_ERROR(ValidateConfig(c, weights ? weights->source : "dummy config"));
  const int d = c.head_dim();
  if (d % 8 != 0 || d > kc::kMaxGenericHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend needs head_dim to be a multiple of 8 and at most ",
        kc::kMaxGenericHeadDim, "; this model has ", d));
  }
  if (options_.chunk_size < 1) {
    return absl::InvalidArgumentError("the CUDA backend needs a positive chunk size");
  }
  if (!DeviceAvailable()) return absl::FailedPreconditionError("no CUDA device is available");
  Impl& m = *impl_;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaDeviceProp prop;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device));
  m.num_sms = prop.multiProcessorCount;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  BANYAN_RETURN_IF_ERROR(CublasStatus(cublasCreate(&m.cublas), "cublasCreate"));
  BANYAN_RETURN_IF_ERROR(CublasStatus(cublasSetStream(m.cublas, m.stream), "cublasSetStream"));
  // An explicit workspace (the size cuBLAS recommends for Hopper), used by eager and captured
  // GEMMs alike: capture must not allocate, and both paths then pick the same algorithms.
  constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;
  BANYAN_RETURN_IF_ERROR(m.cublas_workspace.Reserve(kCublasWorkspaceBytes, "cuBLAS workspace"));
  BANYAN_RETURN_IF_ERROR(CublasStatus(
      cublasSetWorkspace(m.cublas, m.cublas_workspace.get(), kCublasWorkspaceBytes),
      "cublasSetWorkspace"));
  m.graphs_on = options_.cuda_graphs;
  m.graphs = std::make_unique<cuda::DecodeGraphCache>(options_.graph_cache_shapes,
                                                      options_.graph_min_stable_steps);
  m.tpp = options_.attention == AttentionMode::kTpp && kc::tpp::TppSupportsHeadDim(d);
  if (m.tpp) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m.side_stream, cudaStreamNonBlocking));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m.fork_event, cudaEventDisableTiming));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m.join_event, cudaEventDisableTiming));
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m.step_begin));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m.step_end));

  // Memory plan, checked before anything big is allocated.
  size_t free_b = 0, total_b = 0;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  const int64_t free_bytes = static_cast<int64_t>(free_b);
  weight_bytes_ = cuda::DeviceWeights::Bytes(c, options_.dtype);
  const int64_t chunk_bytes = ChunkBytes(c, options_.chunk_size, options_.dtype);
  int64_t chunks = options_.num_chunks;
  if (chunks <= 0) {
    int64_t budget = options_.kv_memory_bytes;
    if (budget <= 0) {
      budget = static_cast<int64_t>(
          0.9 * static_cast<double>(free_bytes - weight_bytes_ - options_.workspace_reserve_bytes));
    }
    chunks = budget > 0 ? budget / chunk_bytes : 0;
  }
  chunks = std::min<int64_t>(chunks, INT32_MAX);
  kv_bytes_ = chunks * chunk_bytes;
  const std::string plan = absl::StrFormat(
      "model weights %.2f GiB (%s) + KV cache %.2f GiB (%d chunks of %d tokens, %.1f MiB each) "
      "on a GPU with %.2f GiB free of %.2f GiB",
      GiB(weight_bytes_), kc::DTypeName(options_.dtype), GiB(kv_bytes_), chunks,
      options_.chunk_size, static_cast<double>(chunk_bytes) / (1 << 20), GiB(free_bytes),
      GiB(static_cast<int64_t>(total_b)));
  if (chunks < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough GPU memory for even one KV chunk: ", plan));
  }
  if (weight_bytes_ + kv_bytes_ > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory: ", plan));
  }
  num_chunks_ = static_cast<int32_t>(chunks);

  if (weights != nullptr) {
    BANYAN_RETURN_IF_ERROR(m.weights.Upload(*weights, options_.dtype, m.stream));
  } else {
    BANYAN_RETURN_IF_ERROR(m.weights.Generate(c, dummy_seed, options_.dtype, m.stream));
  }
  BANYAN_RETURN_IF_ERROR(m.kv.Reserve(kv_bytes_, "the KV cache"));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.kv.get(), 0, kv_bytes_, m.stream));
  m.layer_stride = int64_t{num_chunks_} * 2 * c.n_kv_heads * options_.chunk_size * d;

  std::vector<float> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) {  // the CPU backend's expression
    inv_freq[i] = static_cast<float>(
        std::pow(static_cast<double>(c.rope_theta), -2.0 * i / static_cast<double>(d)));
  }
  BANYAN_RETURN_IF_ERROR(m.inv_freq.Reserve(d / 2 * 4, "RoPE table"));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.inv_freq.get(), inv_freq.data(), d / 2 * 4,
                                              cudaMemcpyHostToDevice, m.stream));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return absl::OkStatus();
}

bool CudaBackend::uses_tpp_kernel() const { return impl_->tpp; }

absl::Status CudaBackend::PrepareTpp(const kvcache::AttentionPlan& plan) {
  namespace tpp = kc::tpp;
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (m.tpp_plan.has_value() && SameShape(plan, m.tpp_key)) {
    // Same shape: only span ends moved. Patch them and upload that range of the image.
    tpp::TppWorkPlan& wp = *m.tpp_plan;
    wp.UpdateSpanEnds(plan.span_end.data());
    const size_t off = wp.span_end_offset_bytes(), n = wp.span_end_bytes();
    if (n > 0) {
      char* host = m.tpp_host_image.as<char>();
      std::memcpy(host + off, reinterpret_cast<const char*>(wp.image().data()) + off, n);
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.tpp_image.as<char>() + off, host + off, n,
                                                  cudaMemcpyHostToDevice, m.stream));
    }
    ++stats_.tpp_plan_updates;
    stats_.update_upload_bytes += static_cast<int64_t>(n);
    stats_.update_host_us += MicrosSince(t0);
    return absl::OkStatus();
  }
  m.tpp_plan.reset();
  tpp::TppProblem problem;
  problem.num_q_heads = cfg_.n_heads;
  problem.num_kv_heads = cfg_.n_kv_heads;
  problem.head_dim = cfg_.head_dim();
  problem.chunk_size = options_.chunk_size;
  tpp::TppOptions topt = options_.tpp;
  topt.num_sms = m.num_sms;
  absl::StatusOr<tpp::TppWorkPlan> built = tpp::TppWorkPlan::Build(ViewOf(plan), problem, topt);
  if (!built.ok()) return built.status();
  const int64_t bytes = static_cast<int64_t>(built->image_bytes());
  const int64_t ws = static_cast<int64_t>(built->workspace_bytes());
  // Growing reallocates, and cudaFree waits for the device, i.e. for the layer-0 work queued
  // before this point (measured: ~0.34 ms at B = 1024 on the 7B shape). So grow with headroom:
  // a quarter, and for the workspace room for one more partial state per row, which is what the
  // plan needs when its schedule switches from fused to deferred merge as private tails grow.
  if (bytes > m.tpp_image.capacity()) {
    BANYAN_RETURN_IF_ERROR(m.tpp_image.Reserve(bytes + bytes / 4, "TPP work plan"));
  }
  BANYAN_RETURN_IF_ERROR(m.tpp_host_image.Reserve(bytes, "TPP work plan (host)"));
  if (ws > m.tpp_workspace.capacity()) {
    const int64_t per_row = int64_t{cfg_.n_heads} * (cfg_.head_dim() + 1) * 4;
    const int64_t want = ws + int64_t{built->num_rows()} * per_row + 512;
    BANYAN_RETURN_IF_ERROR(m.tpp_workspace.Reserve(want + want / 4, "TPP partial states"));
  }
  std::memcpy(m.tpp_host_image.get(), built->image().data(), static_cast<size_t>(bytes));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.tpp_image.get(), m.tpp_host_image.get(),
                                              static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                              m.stream));
  m.tpp_plan = std::move(*built);
  ++m.tpp_plan_generation;
  m.tpp_key = plan;
  ++stats_.tpp_plan_builds;
  stats_.build_upload_bytes += bytes;
  stats_.build_host_us += MicrosSince(t0);
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyChunks(std::span<const kvcache::ChunkCopy> copies) {
  Impl& m = *impl_;
  for (const kvcache::ChunkCopy& cp : copies) {
    if (cp.src < 0 || cp.src >= num_chunks_ || cp.dst < 0 || cp.dst >= num_chunks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk copy ", cp.src, " -> ", cp.dst, " outside the KV pool"));
    }
    kc::CopyKvSlotsParams p;
    p.kv.base = m.kv.get();
    p.kv.chunk_stride = 2 * int64_t{cfg_.n_kv_heads} * options_.chunk_size * cfg_.head_dim();
    p.kv.v_offset = p.kv.chunk_stride / 2;
    p.kv.chunk_size = options_.chunk_size;
    p.kv.num_kv_heads = cfg_.n_kv_heads;
    p.kv.head_dim = cfg_.head_dim();
    p.layer_stride = m.layer_stride;
    p.num_layers = cfg_.n_layers;
    p.src = cp.src;
    p.dst = cp.dst;
    p.slot_begin = cp.slot_begin;
    p.slot_end = cp.slot_end;
    BANYAN_RETURN_IF_ERROR(kc::CopyKvSlots(p, m.stream));
  }
  return absl::OkStatus();
}

// The host side of one step: the flattened int32 inputs and where they sit in step_ints.
struct CudaBackend::StepInputs {
  std::vector<int32_t> tokens, positions, slot_chunk, slot_index, writes, logit_rows;
  std::vector<kc::PrefillSeq> prefill_seqs;
  int num_decode = 0;
  int T = 0;      // tokens of the step: decode rows, then prefill tokens
  int n_out = 0;  // rows of logits
  int64_t o_tokens = 0, o_pos = 0, o_chunk = 0, o_slot = 0, o_write = 0, o_rows = 0;
  bool use_tpp = false;
};

absl::Status CudaBackend::PrepareInputs(const StepBatch& batch, bool greedy, StepInputs* in) {
  Impl& m = *impl_;
  const ModelConfig& c = cfg_;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int hidden = c.hidden_dim, vocab = c.vocab_size;
  const int qkv_cols = (hq + 2 * hkv) * d;
  const int64_t es = kc::DTypeBytes(options_.dtype);
  if (!batch.decode.empty() &&
      (batch.plan == nullptr || batch.plan->num_rows() != static_cast<int>(batch.decode.size()))) {
    return absl::InvalidArgumentError("decode rows and attention plan disagree");
  }

  // ---- flatten the step's tokens: decode rows first, then prefill tokens.
  auto add_work = [&](const SeqWork& s) -> absl::Status {
    if (s.tokens.empty() || s.slots.size() != s.tokens.size() ||
        s.write_kv.size() != s.tokens.size()) {
      return absl::InvalidArgumentError("a sequence's tokens, slots and write flags disagree");
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.tokens[i] < 0 || s.tokens[i] >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", s.tokens[i], " outside the vocabulary of ", vocab));
      }
      if (s.slots[i].chunk < 0 || s.slots[i].chunk >= num_chunks_ || s.slots[i].slot < 0 ||
          s.slots[i].slot >= options_.chunk_size) {
        return absl::InvalidArgumentError(absl::StrCat("slot (", s.slots[i].chunk, ", ",
                                                       s.slots[i].slot, ") outside the KV pool"));
      }
      in->tokens.push_back(s.tokens[i]);
      in->positions.push_back(s.pos0 + static_cast<int32_t>(i));
      in->slot_chunk.push_back(s.slots[i].chunk);
      in->slot_index.push_back(s.slots[i].slot);
      in->writes.push_back(s.write_kv[i] ? 1 : 0);
    }
    if (s.want_logits) in->logit_rows.push_back(static_cast<int32_t>(in->tokens.size()) - 1);
    return absl::OkStatus();
  };
  for (const SeqWork& s : batch.decode) BANYAN_RETURN_IF_ERROR(add_work(s));
  in->num_decode = static_cast<int>(in->tokens.size());
  for (const SeqWork& s : batch.prefill) {
    const int32_t q_row = static_cast<int32_t>(in->tokens.size());
    BANYAN_RETURN_IF_ERROR(add_work(s));
    if (s.span_chunk.size() != s.span_begin.size() || s.span_chunk.size() != s.span_end.size()) {
      return absl::InvalidArgumentError("a prefill sequence's span arrays disagree");
    }
    int64_t span_tokens = 0;
    for (size_t k = 0; k < s.span_chunk.size(); ++k) {
      if (s.span_chunk[k] < 0 || s.span_chunk[k] >= num_chunks_ || s.span_begin[k] < 0 ||
          s.span_end[k] > options_.chunk_size || s.span_begin[k] > s.span_end[k]) {
        return absl::InvalidArgumentError("a prefill span lies outside the KV pool");
      }
      span_tokens += s.span_end[k] - s.span_begin[k];
    }
    if (span_tokens < s.pos0 + static_cast<int64_t>(s.tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat("a prefill sequence's spans hold ",
                                                     span_tokens, " tokens, it needs ",
                                                     s.pos0 + s.tokens.size()));
    }
    in->prefill_seqs.push_back(kc::PrefillSeq{s.span_chunk, s.span_begin, s.span_end, s.pos0,
                                              static_cast<int32_t>(s.tokens.size()), q_row});
  }
  const int T = in->T = static_cast<int>(in->tokens.size());
  const int n_out = in->n_out = static_cast<int>(in->logit_rows.size());
  // Decode rows through the TPP kernel (kTpp, head_dim 64/128, shared segments in the plan); the
  // paged kernel otherwise (a plan without segments is paged work).
  in->use_tpp = m.tpp && in->num_decode > 0 && batch.plan->num_segments() > 0;
  if (T == 0) return absl::OkStatus();

  // ---- workspace.
  BANYAN_RETURN_IF_ERROR(m.x.Reserve(int64_t{T} * dim * 4, "activations"));
  BANYAN_RETURN_IF_ERROR(m.xb.Reserve(int64_t{T} * dim * es, "activations"));
  BANYAN_RETURN_IF_ERROR(m.q.Reserve(int64_t{T} * hq * d * es, "queries"));
  BANYAN_RETURN_IF_ERROR(m.att.Reserve(int64_t{T} * hq * d * es, "attention output"));
  BANYAN_RETURN_IF_ERROR(
      m.scratch.Reserve(int64_t{T} * std::max(qkv_cols, 2 * hidden) * 4, "GEMM outputs"));
  BANYAN_RETURN_IF_ERROR(m.h.Reserve(int64_t{T} * hidden * es, "MLP activations"));
  BANYAN_RETURN_IF_ERROR(m.xo.Reserve(std::max(1, n_out) * int64_t{dim} * es, "final norm"));
  BANYAN_RETURN_IF_ERROR(m.logits.Reserve(std::max(1, n_out) * int64_t{vocab} * 4, "logits"));
  if (greedy) {
    BANYAN_RETURN_IF_ERROR(m.out_tokens.Reserve(std::max(1, n_out) * 4, "sampled tokens"));
  }

  m.step_ints.Clear();
  in->o_tokens = m.step_ints.Add(in->tokens);
  in->o_pos = m.step_ints.Add(in->positions);
  in->o_chunk = m.step_ints.Add(in->slot_chunk);
  in->o_slot = m.step_ints.Add(in->slot_index);
  in->o_write = m.step_ints.Add(in->writes);
  in->o_rows = m.step_ints.Add(in->logit_rows);
  return m.step_ints.Upload(m.stream, "step inputs");
}

absl::Status CudaBackend::PrepareAttention(const StepBatch& batch, const StepInputs& in,
                                           bool fixed_layout) {
  Impl& m = *impl_;
  const int d = cfg_.head_dim(), hq = cfg_.n_heads, hkv = cfg_.n_kv_heads;
  const kc::DType dt = options_.dtype;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  AttentionArgs& a = m.attn;
  a = {};
  if (options_.attention == AttentionMode::kNone) return absl::OkStatus();
  // With a fixed layout every table gets a power-of-two capacity, so offsets inside attn_ints
  // (and so the graph's kernel arguments) only move when a table outgrows its bucket.
  auto add = [&](const std::vector<int32_t>& v) {
    return fixed_layout ? m.attn_ints.Add(v, RoundUpPow2(static_cast<int64_t>(v.size())))
                        : m.attn_ints.Add(v);
  };
  m.attn_ints.Clear();
  int64_t od[10] = {};
  a.use_tpp = in.use_tpp;
  a.paged = in.num_decode > 0 && !in.use_tpp;
  a.prefill = !in.prefill_seqs.empty();
  if (a.use_tpp) {
    BANYAN_RETURN_IF_ERROR(PrepareTpp(*batch.plan));
    const kc::tpp::TppWorkPlan& wp = *m.tpp_plan;
    ++stats_.tpp_steps;
    stats_.last_segments = wp.num_segments();
    stats_.last_p1_items = wp.num_p1_items();
    stats_.last_p2_items = wp.num_p2_items();
    stats_.last_merge_rows = wp.num_merge_rows();
    stats_.last_deferred_merge = wp.deferred_merge();
    kc::tpp::TppRunArgs& ta = a.ta;
    ta.q = m.q.get();
    ta.out = m.att.get();
    ta.dtype = dt == kc::DType::kBf16 ? kc::tpp::KvDType::kBf16 : kc::tpp::KvDType::kFp16;
    ta.scale = scale;
    ta.image = m.tpp_image.as<int32_t>();
    ta.workspace = m.tpp_workspace.get();
    ta.side_stream = m.side_stream;
    ta.fork_event = m.fork_event;
    ta.join_event = m.join_event;
  } else if (a.paged) {
    kc::BuildDecodeWork(ViewOf(*batch.plan), kc::kDefaultItemTokens, &m.decode_work);
    const kc::DecodeWork& w = m.decode_work;
    od[0] = add(w.span_chunk);
    od[1] = add(w.span_begin);
    od[2] = add(w.span_end);
    od[3] = add(w.item_row);
    od[4] = add(w.item_span_begin);
    od[5] = add(w.item_span_end);
    od[6] = add(w.item_partial);
    od[7] = add(w.merge_row);
    od[8] = add(w.merge_partial_begin);
    od[9] = add(w.merge_count);
    BANYAN_RETURN_IF_ERROR(m.partial_o.Reserve(std::max(1, w.num_partials) * int64_t{hq} * d * 4,
                                               "attention partials"));
    BANYAN_RETURN_IF_ERROR(m.partial_lse.Reserve(std::max(1, w.num_partials) * int64_t{hq} * 4,
                                                 "attention partials"));
  }
  int64_t op[12] = {};
  if (a.prefill) {
    kc::BuildPrefillWork(in.prefill_seqs, hq / hkv, kc::kPrefillBlockM, &m.prefill_work);
    const kc::PrefillWork& w = m.prefill_work;
    op[0] = add(w.span_chunk);
    op[1] = add(w.span_begin);
    op[2] = add(w.span_end);
    op[3] = add(w.span_pos);
    op[4] = add(w.seq_span_begin);
    op[5] = add(w.seq_span_end);
    op[6] = add(w.seq_pos0);
    op[7] = add(w.seq_num_q);
    op[8] = add(w.seq_q_row);
    op[9] = add(w.tile_seq);
    op[10] = add(w.tile_m0);
    op[11] = add(w.token_seq);
  }
  BANYAN_RETURN_IF_ERROR(m.attn_ints.Upload(m.stream, "attention work"));
  if (a.paged) {
    const kc::DecodeWork& w = m.decode_work;
    kc::PagedDecodeParams& dp = a.dp;
    dp.q = m.q.get();
    dp.out = m.att.get();
    dp.span_chunk = m.attn_ints.Dev(od[0]);
    dp.span_begin = m.attn_ints.Dev(od[1]);
    dp.span_end = m.attn_ints.Dev(od[2]);
    dp.item_row = m.attn_ints.Dev(od[3]);
    dp.item_span_begin = m.attn_ints.Dev(od[4]);
    dp.item_span_end = m.attn_ints.Dev(od[5]);
    dp.item_partial = m.attn_ints.Dev(od[6]);
    dp.merge_row = m.attn_ints.Dev(od[7]);
    dp.merge_partial_begin = m.attn_ints.Dev(od[8]);
    dp.merge_count = m.attn_ints.Dev(od[9]);
    dp.num_items = w.num_items();
    dp.num_merge_rows = w.num_merge_rows();
    dp.num_q_heads = hq;
    dp.scale = scale;
    dp.partial_o = m.partial_o.as<float>();
    dp.partial_lse = m.partial_lse.as<float>();
  }
  if (a.prefill) {
    const kc::PrefillWork& w = m.prefill_work;
    kc::PrefillParams& pp = a.pp;
    pp.q = m.q.get();
    pp.out = m.att.get();
    pp.span_chunk = m.attn_ints.Dev(op[0]);
    pp.span_begin = m.attn_ints.Dev(op[1]);
    pp.span_end = m.attn_ints.Dev(op[2]);
    pp.span_pos = m.attn_ints.Dev(op[3]);
    pp.seq_span_begin = m.attn_ints.Dev(op[4]);
    pp.seq_span_end = m.attn_ints.Dev(op[5]);
    pp.seq_pos0 = m.attn_ints.Dev(op[6]);
    pp.seq_num_q = m.attn_ints.Dev(op[7]);
    pp.seq_q_row = m.attn_ints.Dev(op[8]);
    pp.tile_seq = m.attn_ints.Dev(op[9]);
    pp.tile_m0 = m.attn_ints.Dev(op[10]);
    pp.token_seq = m.attn_ints.Dev(op[11]);
    pp.num_tiles = w.num_tiles();
    pp.num_tokens = w.num_tokens;
    pp.q_row_begin = w.q_row_begin;
    pp.num_q_heads = hq;
    pp.scale = scale;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Enqueue(const StepBatch& batch, const StepInputs& in, bool greedy,
                                  bool prepare_in_layer0) {
  Impl& m = *impl_;
  const ModelConfig& c = cfg_;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int hidden = c.hidden_dim, vocab = c.vocab_size;
  const int qkv_cols = (hq + 2 * hkv) * d;
  const kc::DType dt = options_.dtype;
  const int64_t es = kc::DTypeBytes(dt);
  const int T = in.T, n_out = in.n_out;

  const float alpha = 1.0f, zero = 0.0f, one = 1.0f;
  const cudaDataType_t ctype = dt == kc::DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  // out[M, N] (fp32) = a[M, K] * w[N, K]^T + beta * out.
  auto gemm = [&](const void* w, const void* a, float* out, int M, int N, int K,
                  const float* beta) {
    return CublasStatus(cublasGemmEx(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, ctype,
                                     K, a, ctype, K, beta, out, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
  };

  kc::EmbeddingParams ep;
  ep.table = m.weights.embeddings;
  ep.tokens = m.step_ints.Dev(in.o_tokens);
  ep.x = m.x.as<float>();
  ep.rows = T;
  ep.dim = dim;
  BANYAN_RETURN_IF_ERROR(kc::EmbeddingGather(dt, ep, m.stream));
  if (options_.attention == AttentionMode::kNone) {
    BANYAN_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(m.att.get(), 0, static_cast<size_t>(T) * hq * d * es, m.stream));
  }

  kc::KvViewDev kv0;
  kv0.base = m.kv.get();
  kv0.chunk_stride = 2 * int64_t{hkv} * options_.chunk_size * d;
  kv0.v_offset = kv0.chunk_stride / 2;
  kv0.chunk_size = options_.chunk_size;
  kv0.num_kv_heads = hkv;
  kv0.head_dim = d;
  const AttentionArgs& a = m.attn;

  for (int l = 0; l < c.n_layers; ++l) {
    const cuda::DeviceLayer& lw = m.weights.layers[l];
    kc::KvViewDev kv = kv0;
    kv.base = static_cast<char*>(m.kv.get()) + l * m.layer_stride * es;

    kc::RmsNormParams np;
    np.x = m.x.as<float>();
    np.weight = lw.attn_norm;
    np.out = m.xb.get();
    np.rows = T;
    np.dim = dim;
    np.eps = c.norm_eps;
    BANYAN_RETURN_IF_ERROR(kc::RmsNorm(dt, np, m.stream));
    BANYAN_RETURN_IF_ERROR(gemm(lw.wqkv, m.xb.get(), m.scratch.as<float>(), T, qkv_cols, dim, &zero));

    kc::RopeKvParams rp;
    rp.qkv = m.scratch.as<float>();
    rp.q_out = m.q.get();
    rp.kv = kv;
    rp.positions = m.step_ints.Dev(in.o_pos);
    rp.slot_chunk = m.step_ints.Dev(in.o_chunk);
    rp.slot_index = m.step_ints.Dev(in.o_slot);
    rp.write_kv = m.step_ints.Dev(in.o_write);
    rp.inv_freq = m.inv_freq.as<float>();
    rp.tokens = T;
    rp.num_q_heads = hq;
    rp.interleaved = c.rope_style == RopeStyle::kInterleaved;
    BANYAN_RETURN_IF_ERROR(kc::RopeWriteKv(dt, rp, m.stream));

    // Built on the host while the GPU runs layer 0 up to here.
    if (l == 0 && prepare_in_layer0) BANYAN_RETURN_IF_ERROR(PrepareAttention(batch, in, false));
    if (a.use_tpp) {
      kc::tpp::TppRunArgs ta = a.ta;
      ta.kv = kv;
      BANYAN_RETURN_IF_ERROR(kc::tpp::TppDecodeAttention(*m.tpp_plan, ta, m.stream));
    } else if (a.paged) {
      kc::PagedDecodeParams dp = a.dp;
      dp.kv = kv;
      BANYAN_RETURN_IF_ERROR(kc::PagedDecodeAttention(dt, dp, m.stream));
    }
    if (a.prefill) {
      kc::PrefillParams pp = a.pp;
      pp.kv = kv;
      BANYAN_RETURN_IF_ERROR(kc::PrefillAttention(dt, pp, m.stream));
    }
    BANYAN_RETURN_IF_ERROR(gemm(lw.wo, m.att.get(), m.x.as<float>(), T, dim, hq * d, &one));

    np.weight = lw.ffn_norm;
    BANYAN_RETURN_IF_ERROR(kc::RmsNorm(dt, np, m.stream));
    BANYAN_RETURN_IF_ERROR(
        gemm(lw.w13, m.xb.get(), m.scratch.as<float>(), T, 2 * hidden, dim, &zero));
    kc::SwiGluParams sp;
    sp.gate_up = m.scratch.as<float>();
    sp.out = m.h.get();
    sp.rows = T;
    sp.hidden = hidden;
    BANYAN_RETURN_IF_ERROR(kc::SwiGlu(dt, sp, m.stream));
    BANYAN_RETURN_IF_ERROR(gemm(lw.w2, m.h.get(), m.x.as<float>(), T, dim, hidden, &one));
  }
  if (n_out == 0) return absl::OkStatus();
  kc::RmsNormParams fp;
  fp.x = m.x.as<float>();
  fp.row_index = m.step_ints.Dev(in.o_rows);
  fp.weight = m.weights.final_norm;
  fp.out = m.xo.get();
  fp.rows = n_out;
  fp.dim = dim;
  fp.eps = c.norm_eps;
  BANYAN_RETURN_IF_ERROR(kc::RmsNorm(dt, fp, m.stream));
  BANYAN_RETURN_IF_ERROR(
      gemm(m.weights.output, m.xo.get(), m.logits.as<float>(), n_out, vocab, dim, &zero));
  if (!greedy) return absl::OkStatus();
  kc::ArgmaxParams ap;
  ap.logits = m.logits.as<float>();
  ap.out = m.out_tokens.as<int32_t>();
  ap.rows = n_out;
  ap.vocab = vocab;
  return kc::ArgmaxRows(ap, m.stream);
}

cuda::DecodeGraphKey CudaBackend::GraphKey(const StepInputs& in, bool greedy) const {
  const Impl& m = *impl_;
  const AttentionArgs& a = m.attn;
  cuda::DecodeGraphKey k;
  k.shape = {in.T, in.n_out, greedy ? 1 : 0, a.use_tpp ? 1 : 0, a.paged ? 1 : 0};
  auto ptr = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); };
  // Buffers a launch points into (they move when they grow); the step_ints offsets follow from
  // T and n_out.
  k.params = {ptr(m.x.get()),       ptr(m.xb.get()),      ptr(m.q.get()),
              ptr(m.att.get()),     ptr(m.scratch.get()), ptr(m.h.get()),
              ptr(m.xo.get()),      ptr(m.logits.get()),  ptr(m.step_ints.Dev(0)),
              ptr(m.attn_ints.Dev(0))};
  if (greedy) k.params.push_back(ptr(m.out_tokens.get()));
  if (a.use_tpp) {
    // The TPP launches bake in the plan's geometry (grid sizes, kernel variants, schedule, table
    // offsets inside the image, the split of the workspace): every build counts as a change, so
    // nothing the plan may add later can be missed. Span-end updates keep the geometry.
    k.params.insert(k.params.end(),
                    {ptr(a.ta.image), ptr(a.ta.workspace), m.tpp_plan_generation});
  } else if (a.paged) {
    const kc::PagedDecodeParams& dp = a.dp;
    k.params.insert(k.params.end(),
                    {dp.num_items, dp.num_merge_rows, ptr(dp.partial_o), ptr(dp.partial_lse),
                     ptr(dp.span_chunk), ptr(dp.span_begin), ptr(dp.span_end), ptr(dp.item_row),
                     ptr(dp.item_span_begin), ptr(dp.item_span_end), ptr(dp.item_partial),
                     ptr(dp.merge_row), ptr(dp.merge_partial_begin), ptr(dp.merge_count)});
  }
  return k;
}

absl::Status CudaBackend::Run(const StepBatch& batch, bool greedy, int32_t* out_rows) {
  Impl& m = *impl_;
  StepInputs in;
  BANYAN_RETURN_IF_ERROR(PrepareInputs(batch, greedy, &in));
  *out_rows = in.n_out;
  if (in.T == 0) return absl::OkStatus();
  if (in.num_decode > 0) ++stats_.decode_steps;
  const bool graph = m.graphs_on && batch.prefill.empty() && in.num_decode > 0;
  if (!graph) {
    // (The host work of PrepareAttention inside layer 0 counts as device time here.)
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.step_begin, m.stream));
    m.step_begin_recorded = true;
    return Enqueue(batch, in, greedy, /*prepare_in_layer0=*/true);
  }

  // The graph path: all host work and uploads first, then one launch.
  BANYAN_RETURN_IF_ERROR(PrepareAttention(batch, in, /*fixed_layout=*/true));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.step_begin, m.stream));
  m.step_begin_recorded = true;
  bool launched = false;
  const absl::Status s =
      m.graphs->Launch(GraphKey(in, greedy), m.stream,
                      [&] { return Enqueue(batch, in, greedy, false); }, &stats_.graph, &launched);
  if (s.ok() && launched) return s;
  if (!s.ok()) {
    // Nothing of this step was launched: turn graphs off and run it eagerly.
    graph_error_ = std::string(s.message());
    ++stats_.graph.fallbacks;
    SetCudaGraphs(false);
  }
  return Enqueue(batch, in, greedy, false);
}

void CudaBackend::SetCudaGraphs(bool on) {
  impl_->graphs_on = on;
  if (!on && impl_->graphs != nullptr) impl_->graphs->Clear();
}

bool CudaBackend::cuda_graphs() const { return impl_->graphs_on; }

absl::Status CudaBackend::Forward(const StepBatch& batch, std::vector<float>* logits) {
  Impl& m = *impl_;
  int32_t rows = 0;
  absl::Status s = Run(batch, /*greedy=*/false, &rows);
  if (!s.ok()) {
    cudaStreamSynchronize(m.stream);  // leave no work in flight on a failed step
    return s;
  }
  const int64_t bytes = int64_t{rows} * cfg_.vocab_size * 4;
  BANYAN_RETURN_IF_ERROR(m.host_out.Reserve(std::max<int64_t>(bytes, 4), "logits (host)"));
  if (bytes > 0) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_out.get(), m.logits.get(), bytes,
                                                cudaMemcpyDeviceToHost, m.stream));
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  logits->resize(static_cast<size_t>(rows) * cfg_.vocab_size);
  if (bytes > 0) std::memcpy(logits->data(), m.host_out.get(), bytes);
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                        std::vector<SampleResult>* out) {
  Impl& m = *impl_;
  int32_t rows = 0;
  m.step_begin_recorded = false;
  absl::Status s = Run(batch, /*greedy=*/false, &rows);
  if (s.ok()) s = m.sampler.Enqueue(m.logits.as<float>(), rows, cfg_.vocab_size, specs, m.stream);
  if (!s.ok()) {
    cudaStreamSynchronize(m.stream);  // leave no work in flight on a failed step
    return s;
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.step_end, m.stream));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  m.sampler.Collect(out);
  if (m.step_begin_recorded) {
    m.step_begin_recorded = false;
    float ms = 0;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m.step_begin, m.step_end));
    m.device_seconds += ms * 1e-3;
  }
  return absl::OkStatus();
}

double CudaBackend::device_seconds() const { return impl_->device_seconds; }

absl::Status CudaBackend::ForwardGreedy(const StepBatch& batch, std::vector<int32_t>* tokens) {
  Impl& m = *impl_;
  int32_t rows = 0;
  absl::Status s = Run(batch, /*greedy=*/true, &rows);
  if (!s.ok()) {
    cudaStreamSynchronize(m.stream);
    return s;
  }
  BANYAN_RETURN_IF_ERROR(m.host_out.Reserve(std::max(1, rows) * 4, "sampled tokens (host)"));
  if (rows > 0) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_out.get(), m.out_tokens.get(), rows * 4,
                                                cudaMemcpyDeviceToHost, m.stream));
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  tokens->assign(m.host_out.as<int32_t>(), m.host_out.as<int32_t>() + rows);
  for (int32_t t : *tokens) {
    if (t < 0) return absl::InternalError("the model produced a row of logits with no number");
  }
  return absl::OkStatus();
}

}  // namespace banyan::engine
