#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/cuda/cublas_loader.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "kernels/kv_fp8.h"
#include "model/dtype.h"
#include "model/rope.h"
#include "model/weights_layout.h"

namespace banyan::engine {


bool CudaBackend::DeviceAvailable() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

int64_t CudaBackend::ChunkBytes(const model::ModelConfig& c, int32_t chunk_size, kc::DType dtype,
                                bool kv_fp8) {
  if (kv_fp8) {
    return c.n_layers * kernels::KvFp8LayoutOf(c.n_kv_heads, chunk_size, c.head_dim()).chunk_stride;
  }
  return int64_t{2} * c.n_layers * c.n_kv_heads * chunk_size * c.head_dim() * kc::DTypeBytes(dtype);
}

CudaBackend::CudaBackend(const model::ModelConfig& config, const CudaBackendOptions& options)
    : cfg_(config), options_(options), impl_(std::make_unique<Impl>()) {}

CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const model::ModelWeights* weights, const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(weights->config, options));
  BANYAN_RETURN_IF_ERROR(b->Init(weights, 0));
  return b;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateDummy(
    const model::ModelConfig& config, uint64_t seed, const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(config, options));
  BANYAN_RETURN_IF_ERROR(b->Init(nullptr, seed));
  return b;
}

absl::Status CudaBackend::Init(const model::ModelWeights* weights, uint64_t dummy_seed) {
  const model::ModelConfig& c = cfg_;
  BANYAN_RETURN_IF_ERROR(model::ValidateConfig(c, weights ? weights->source : "dummy config"));
  const int d = c.head_dim();
  if (d % 8 != 0 || d > kc::kMaxGenericHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend needs head_dim to be a multiple of 8 and at most ",
        kc::kMaxGenericHeadDim, "; this model has ", d));
  }
  if (options_.chunk_size < 1) {
    return absl::InvalidArgumentError("the CUDA backend needs a positive chunk size");
  }
  if (options_.kv_fp8 && (d > 256 || options_.chunk_size % 8 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an FP8 KV cache needs head_dim <= 256 and a chunk size that is a multiple of 8; this "
        "model has head_dim ", d, " and the chunk size is ", options_.chunk_size));
  }
  if (!DeviceAvailable()) return absl::FailedPreconditionError("no CUDA device is available");
  BANYAN_RETURN_IF_ERROR(cuda::LoadCublas());  // opened now, not at start-up (cublas_loader.h)
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
  // The deterministic mode too: its attention launches (InvariantAttention) are keyed by their
  // grids and arguments (GraphKey), and their work lists are uploaded into the same places
  // before each replay. A graph runs the very kernels with the very arguments of an eager step.
  m.graphs_on = options_.cuda_graphs;
  m.graphs = std::make_unique<cuda::DecodeGraphCache>(options_.graph_cache_shapes,
                                                      options_.graph_min_stable_steps);
  if (options_.graph_early_launch_rows > 0 && prop.major >= 9) {
    m.graphs->SetEarlyLaunch(kc::EarlyLaunchKernels());
  }
  // Decode rows run on the TPP kernels: two-phase over the shared segments of a kTpp plan, phase
  // 2 alone (TPP's paged call) over a kPaged plan, which has none. Head dims without a compiled
  // TPP family (the bundled model's 8) run every plan in phase 2, on its generic kernel.
  m.tpp = options_.attention != AttentionMode::kNone && kc::tpp::TppSupportsHeadDim(d);
  if (m.tpp) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m.side_stream, cudaStreamNonBlocking));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m.fork_event, cudaEventDisableTiming));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m.join_event, cudaEventDisableTiming));
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m.step_begin));
  m.cur_begin = m.step_begin;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m.uploaded, cudaEventDisableTiming));
  for (Impl::FlightSlot& s : m.flights) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.begin));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.end));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.forward_end));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.sampling_begin));
  }

  // Memory plan, checked before anything big is allocated.
  size_t free_b = 0, total_b = 0;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  const int64_t free_bytes = static_cast<int64_t>(free_b);
  // FP8 projections stay FP8 where the plan and the GPU allow (cuBLASLt's outer-vector and
  // block scalings are Hopper's).
  cuda::Fp8Plan fp8 = weights != nullptr   ? cuda::Fp8PlanFor(*weights)
                      : options_.fp8_dummy ? cuda::Fp8PlanForShape(c)
                                           : cuda::Fp8Plan{};
  if (fp8.scaling && prop.major < 9) {
    fp8.scaling.reset();
    fp8.reason = absl::StrCat("FP8 GEMMs need compute capability 9.0 or newer; this GPU has ",
                              prop.major, ".", prop.minor);
  }
  fp8_fallback_ = fp8.reason;
  if (fp8.scaling && options_.batch_invariant) {
    return absl::InvalidArgumentError(
        "the batch-invariant mode (--deterministic on) runs 16-bit projections only; this model's "
        "are FP8 (" + std::string(weights != nullptr ? weights->source : "--fp8 dummy weights") +
        "): serve a bf16 checkpoint without --quantization fp8");
  }
  if (fp8.scaling) {
    fp8_projections_ = *fp8.scaling == cuda::Fp8Scaling::kPerRow
                           ? "FP8 W8A8, per-channel weight and per-token activation scales"
                           : "FP8 W8A8, 128x128 weight blocks and 1x128 activation groups";
    absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> g =
        cuda::Fp8Gemm::Create(32u << 20, options_.fp8_gemv_max_rows);
    if (!g.ok()) return g.status();
    m.fp8_gemm = std::move(*g);
  }
  weight_bytes_ = cuda::DeviceWeights::Bytes(c, options_.dtype, fp8.scaling);
  const int64_t chunk_bytes = ChunkBytes(c, options_.chunk_size, options_.dtype, options_.kv_fp8);
  int64_t chunks = options_.num_chunks;
  if (chunks <= 0) {
    int64_t budget = options_.kv_memory_bytes;
    if (budget <= 0 && options_.memory_fraction > 0) {
      const auto total = static_cast<int64_t>(total_b);
      budget = static_cast<int64_t>(options_.memory_fraction * static_cast<double>(total)) -
               (total - free_bytes) - weight_bytes_ - options_.workspace_reserve_bytes;
    } else if (budget <= 0) {
      budget = static_cast<int64_t>(
          0.9 * static_cast<double>(free_bytes - weight_bytes_ - options_.workspace_reserve_bytes));
    }
    chunks = budget > 0 ? budget / chunk_bytes : 0;
  }
  chunks = std::min<int64_t>(chunks, INT32_MAX);
  kv_bytes_ = chunks * chunk_bytes;
  const std::string plan = absl::StrFormat(
      "model weights %.2f GiB (%s) + KV cache %.2f GiB (%s, %d chunks of %d tokens, %.1f MiB "
      "each) on a GPU with %.2f GiB free of %.2f GiB",
      GiB(weight_bytes_),
      fp8.scaling ? absl::StrCat(kc::DTypeName(options_.dtype), ", projections FP8")
                  : std::string(kc::DTypeName(options_.dtype)),
      GiB(kv_bytes_), options_.kv_fp8 ? "fp8" : kc::DTypeName(options_.dtype), chunks,
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
    BANYAN_RETURN_IF_ERROR(m.weights.Upload(*weights, options_.dtype, fp8.scaling, m.stream));
  } else {
    BANYAN_RETURN_IF_ERROR(
        m.weights.Generate(c, dummy_seed, options_.dtype, fp8.scaling, m.stream));
  }
  BANYAN_RETURN_IF_ERROR(m.kv.Reserve(kv_bytes_, "the KV cache"));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.kv.get(), 0, kv_bytes_, m.stream));
  m.kv0.base = m.kv.get();
  m.kv0.chunk_size = options_.chunk_size;
  m.kv0.num_kv_heads = c.n_kv_heads;
  m.kv0.head_dim = d;
  if (options_.kv_fp8) {
    const kernels::KvFp8Layout l = kernels::KvFp8LayoutOf(c.n_kv_heads, options_.chunk_size, d);
    m.kv0.chunk_stride = l.chunk_stride;
    m.kv0.v_offset = l.v_offset;
    m.kv0.scale_offset = l.scale_offset;
    m.kv_elem_bytes = 1;
  } else {
    m.kv0.chunk_stride = 2 * int64_t{c.n_kv_heads} * options_.chunk_size * d;
    m.kv0.v_offset = m.kv0.chunk_stride / 2;
    m.kv_elem_bytes = static_cast<int>(kc::DTypeBytes(options_.dtype));
  }
  m.layer_stride = int64_t{num_chunks_} * m.kv0.chunk_stride;

  const std::vector<float> inv_freq = model::RopeInvFreq(c);  // what the CPU backend uses
  BANYAN_RETURN_IF_ERROR(m.inv_freq.Reserve(d / 2 * 4, "RoPE table"));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.inv_freq.get(), inv_freq.data(), d / 2 * 4,
                                              cudaMemcpyHostToDevice, m.stream));
  if (options_.batch_invariant) BANYAN_RETURN_IF_ERROR(PrepareDeterministicGemms());
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return absl::OkStatus();
}

// The GEMM shapes Enqueue runs (its project / gemm calls), checked once at start-up with layer
// 0's weights and the output head, so the log can say how each runs before the first request.
absl::Status CudaBackend::PrepareDeterministicGemms() {
  Impl& m = *impl_;
  const model::ModelConfig& c = cfg_;
  absl::StatusOr<std::unique_ptr<cuda::PinnedGemm>> g = cuda::PinnedGemm::Create(options_.dtype);
  if (!g.ok()) return g.status();
  m.pinned_gemm = std::move(*g);
  const cudaDataType_t ctype = options_.dtype == kc::DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  const int d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads, dim = c.dim;
  const cudaDataType_t qkv_out = NarrowQkv() ? ctype : CUDA_R_32F;
  const cudaDataType_t ffn_out = options_.narrow_activations ? ctype : CUDA_R_32F;
  const cuda::DeviceLayer& lw = m.weights.layers[0];
  BANYAN_RETURN_IF_ERROR(m.pinned_gemm->Prepare(lw.wqkv, (hq + 2 * hkv) * d, dim, qkv_out, m.stream));
  BANYAN_RETURN_IF_ERROR(m.pinned_gemm->Prepare(lw.wo, dim, hq * d, CUDA_R_32F, m.stream));
  BANYAN_RETURN_IF_ERROR(
      m.pinned_gemm->Prepare(lw.w13, 2 * c.hidden_dim, dim, ffn_out, m.stream));
  BANYAN_RETURN_IF_ERROR(m.pinned_gemm->Prepare(lw.w2, dim, c.hidden_dim, CUDA_R_32F, m.stream));
  BANYAN_RETURN_IF_ERROR(
      m.pinned_gemm->Prepare(m.weights.output, c.vocab_size, dim, CUDA_R_32F, m.stream));
  deterministic_gemms_ = m.pinned_gemm->Summary();
  return absl::OkStatus();
}

bool CudaBackend::uses_tpp_kernel() const { return impl_->tpp; }

bool CudaBackend::shared_prefix_plans() const {
  return options_.batch_invariant && kc::HasFastAttentionPath(cfg_.head_dim());
}

absl::Status CudaBackend::CopyChunks(std::span<const kvcache::ChunkCopy> copies) {
  Impl& m = *impl_;
  for (const kvcache::ChunkCopy& cp : copies) {
    if (cp.src < 0 || cp.src >= num_chunks_ || cp.dst < 0 || cp.dst >= num_chunks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk copy ", cp.src, " -> ", cp.dst, " outside the KV pool"));
    }
    kc::CopyKvSlotsParams p;
    p.kv = m.kv0;
    p.layer_stride = m.layer_stride;
    p.num_layers = cfg_.n_layers;
    p.src = cp.src;
    p.dst = cp.dst;
    p.slot_begin = cp.slot_begin;
    p.slot_end = cp.slot_end;
    p.dst_begin = cp.DstBegin();
    BANYAN_RETURN_IF_ERROR(kc::CopyKvSlots(p, m.stream));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Enqueue(const StepBatch& batch, const StepInputs& in,
                                  bool prepare_in_layer0) {
  Impl& m = *impl_;
  const model::ModelConfig& c = cfg_;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int hidden = c.hidden_dim, vocab = c.vocab_size;
  const int qkv_cols = (hq + 2 * hkv) * d;
  const kc::DType dt = options_.dtype;
  const int64_t es = kc::DTypeBytes(dt);
  const int T = in.T, n_out = in.n_out;

  const float alpha = 1.0f, zero = 0.0f, one = 1.0f;
  const cudaDataType_t ctype = dt == kc::DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  // out[M, N] = a[M, K] * w[N, K]^T + beta * out (cublas_gemm.h).
  auto gemm_to = [&](const void* w, const void* a, void* out, cudaDataType_t out_type, int M,
                     int N, int K, const float* beta) {
    if (m.pinned_gemm) return m.pinned_gemm->Run(w, a, out, out_type, M, N, K, *beta, m.stream);
    return RowMajorGemm(m.cublas, ctype, w, a, out, out_type, M, N, K, &alpha, beta);
  };
  auto gemm = [&](const void* w, const void* a, float* out, int M, int N, int K,
                  const float* beta) { return gemm_to(w, a, out, CUDA_R_32F, M, N, K, beta); };
  // A projection: in the model dtype, or FP8 (DeviceWeights::fp8()): the activations a[M, K]
  // quantized per token (or per 128 of a token with block-scaled weights), then the W8A8 GEMM.
  const std::optional<cuda::Fp8Scaling> fp8 = m.weights.fp8();
  // `quantized`: the kernel before it (an RmsNorm or SwiGlu, through fp8_out below) wrote a's
  // FP8 codes and scales into act8 already.
  auto project = [&](const cuda::DeviceFp8Matrix& w8, const void* w, const void* a, void* out,
                     cudaDataType_t out_type, int M, int N, int K, const float* beta,
                     bool quantized = false) -> absl::Status {
    if (!fp8) return gemm_to(w, a, out, out_type, M, N, K, beta);
    const bool blocks = *fp8 == cuda::Fp8Scaling::kBlock128;
    if (quantized) {
      return m.fp8_gemm->Run(*fp8, w8.operand(), {m.act8.as<uint8_t>(), m.act8_scales.as<float>()},
                             out, out_type, cuda::Fp8Gemm::RowsFor(*fp8, M), N, K, *beta,
                             m.stream);
    }
    kc::QuantizeFp8Params qp;
    qp.in = a;
    qp.rows = M;
    qp.cols = K;
    qp.group = blocks ? kc::kFp8Group : K;
    qp.codes = m.act8.as<uint8_t>();
    qp.scales = m.act8_scales.as<float>();
    qp.pad_rows = cuda::Fp8Gemm::RowsFor(*fp8, M);  // the buffers have room (cuda_backend_step.cc)
    qp.group_major = blocks && cuda::kFp8ActivationGroupsMajor;
    BANYAN_RETURN_IF_ERROR(kc::QuantizeRowsFp8(dt, qp, m.stream));
    return m.fp8_gemm->Run(*fp8, w8.operand(), {qp.codes, qp.scales}, out, out_type,
                           qp.pad_rows, N, K, *beta, m.stream);
  };
  // An RmsNorm or SwiGlu whose output (`cols` wide) feeds an FP8 projection writes that
  // projection's FP8 input too, in the same launch (kernels/cuda/layer_kernels.h), as
  // QuantizeRowsFp8 would lay it out in act8.
  static_assert(cuda::kFp8ActivationGroupsMajor, "the fused kernels write group-major scales");
  auto fp8_out = [&](auto& params, int cols) {
    if (!fp8) return;
    params.fp8_codes = m.act8.as<uint8_t>();
    params.fp8_scales = m.act8_scales.as<float>();
    params.fp8_group = *fp8 == cuda::Fp8Scaling::kBlock128 ? kc::kFp8Group : cols;
    params.fp8_pad_rows = static_cast<int32_t>(cuda::Fp8Gemm::RowsFor(*fp8, params.rows));
  };
  // GEMM outputs that only an elementwise kernel reads are written in the model dtype
  // (CudaBackendOptions::narrow_activations); the QKV output stays fp32 where QkvBiasNorm
  // works on it in place.
  const bool narrow_qkv = NarrowQkv();
  const bool narrow_ffn = options_.narrow_activations;

  kc::EmbeddingParams ep;
  ep.table = m.weights.embeddings;
  ep.tokens = m.step_ints.Dev(in.o_tokens);
  ep.x = m.x.as<float>();
  ep.rows = T;
  ep.dim = dim;
  if (in.o_feed >= 0) {
    ep.feed = m.step_ints.Dev(in.o_feed);
    ep.feed_tokens = m.out_tokens.as<int32_t>();
  }
  BANYAN_RETURN_IF_ERROR(kc::EmbeddingGather(dt, ep, m.stream));
  if (options_.attention == AttentionMode::kNone) {
    BANYAN_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(m.att.get(), 0, static_cast<size_t>(T) * hq * d * es, m.stream));
  }

  const kc::KvViewDev& kv0 = m.kv0;
  const AttentionArgs& a = m.attn;

  for (int l = 0; l < c.n_layers; ++l) {
    const cuda::DeviceLayer& lw = m.weights.layers[l];
    kc::KvViewDev kv = kv0;
    kv.base = static_cast<char*>(m.kv.get()) + l * m.layer_stride * m.kv_elem_bytes;

    kc::RmsNormParams np;
    np.x = m.x.as<float>();
    np.weight = lw.attn_norm;
    np.out = m.xb.get();
    np.rows = T;
    np.dim = dim;
    np.eps = c.norm_eps;
    fp8_out(np, dim);
    BANYAN_RETURN_IF_ERROR(kc::RmsNorm(dt, np, m.stream));
    BANYAN_RETURN_IF_ERROR(project(lw.wqkv8, lw.wqkv, m.xb.get(), m.scratch.get(),
                                   narrow_qkv ? ctype : CUDA_R_32F, T, qkv_cols, dim, &zero,
                                   /*quantized=*/true));
    if (c.qkv_bias || c.qk_norm) {
      kc::QkvBiasNormParams bn;
      bn.qkv = m.scratch.as<float>();
      bn.bias = lw.bqkv;
      bn.q_norm = lw.q_norm;
      bn.k_norm = lw.k_norm;
      bn.tokens = T;
      bn.num_q_heads = hq;
      bn.num_kv_heads = hkv;
      bn.head_dim = d;
      bn.eps = c.norm_eps;
      BANYAN_RETURN_IF_ERROR(kc::QkvBiasNorm(bn, m.stream));
    }

    kc::RopeKvParams rp;
    rp.qkv = m.scratch.get();
    rp.qkv_in_dtype = narrow_qkv;
    rp.q_out = m.q.get();
    rp.kv = kv;
    rp.positions = m.step_ints.Dev(in.o_pos);
    rp.slot_chunk = m.step_ints.Dev(in.o_chunk);
    rp.slot_index = m.step_ints.Dev(in.o_slot);
    rp.write_kv = m.step_ints.Dev(in.o_write);
    rp.inv_freq = m.inv_freq.as<float>();
    rp.tokens = T;
    rp.num_q_heads = hq;
    rp.interleaved = c.rope_style == model::RopeStyle::kInterleaved;
    BANYAN_RETURN_IF_ERROR(kc::RopeWriteKv(dt, rp, m.stream));

    // Built on the host while the GPU runs layer 0 up to here.
    if (l == 0 && prepare_in_layer0) {
      BANYAN_RETURN_IF_ERROR(PrepareAttention(batch, in, false));
      if (m.record_uploaded) BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.uploaded, m.stream));
    }
    if (a.use_tpp) {
      kc::tpp::TppRunArgs ta = a.ta;
      ta.kv = kv;
      BANYAN_RETURN_IF_ERROR(kc::tpp::TppDecodeAttention(*m.tpp_plan, ta, m.stream));
    }
    if (a.prefill) {
      kc::PrefillParams pp = a.pp;
      pp.kv = kv;
      BANYAN_RETURN_IF_ERROR(options_.batch_invariant ? kc::InvariantAttention(dt, pp, m.stream)
                                         : kc::PrefillAttention(dt, pp, m.stream));
    }
    BANYAN_RETURN_IF_ERROR(
        project(lw.wo8, lw.wo, m.att.get(), m.x.get(), CUDA_R_32F, T, dim, hq * d, &one));

    np.weight = lw.ffn_norm;
    BANYAN_RETURN_IF_ERROR(kc::RmsNorm(dt, np, m.stream));
    BANYAN_RETURN_IF_ERROR(project(lw.w13_8, lw.w13, m.xb.get(), m.scratch.get(),
                                   narrow_ffn ? ctype : CUDA_R_32F, T, 2 * hidden, dim, &zero,
                                   /*quantized=*/true));
    kc::SwiGluParams sp;
    sp.gate_up = m.scratch.get();
    sp.gate_up_in_dtype = narrow_ffn;
    sp.out = m.h.get();
    sp.rows = T;
    sp.hidden = hidden;
    fp8_out(sp, hidden);  // the down projection's FP8 input
    BANYAN_RETURN_IF_ERROR(kc::SwiGlu(dt, sp, m.stream));
    BANYAN_RETURN_IF_ERROR(project(lw.w2_8, lw.w2, m.h.get(), m.x.get(), CUDA_R_32F, T, dim,
                                   hidden, &one, /*quantized=*/true));
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
  return gemm(m.weights.output, m.xo.get(), m.logits.as<float>(), n_out, vocab, dim, &zero);
}

absl::Status CudaBackend::Run(const StepBatch& batch, int32_t* out_rows,
                              std::span<const int32_t> feed, int32_t samples) {
  Impl& m = *impl_;
  using Clock = std::chrono::steady_clock;
  const auto us_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  auto t = Clock::now();
  StepInputs in;
  BANYAN_RETURN_IF_ERROR(PrepareInputs(batch, samples, feed, &in));
  *out_rows = in.n_real_out;
  m.last_out_rows = in.n_real_out;
  // A step that does not leave its tokens in out_tokens ends what a fed step may read there.
  m.feedable_valid = false;
  if (in.T == 0) return absl::OkStatus();
  if (in.num_decode > 0) {
    ++stats_.decode_steps;
    ++stats_.host_steps;
    stats_.inputs_host_us += us_since(t);
  }
  // The launch's host time counts for steps with decode rows (also when it fails).
  struct LaunchTimer {
    double* us;
    Clock::time_point t0 = Clock::now();
    ~LaunchTimer() {
      if (us != nullptr) *us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
  };
  const bool graph = m.graphs_on && batch.prefill.empty() && in.num_decode > 0;
  if (!graph) {
    // (The host work of PrepareAttention inside layer 0 counts as device time here.)
    LaunchTimer timer{in.num_decode > 0 ? &stats_.launch_host_us : nullptr};
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.cur_begin, m.stream));
    m.step_begin_recorded = true;
    return Enqueue(batch, in, /*prepare_in_layer0=*/true);
  }

  // The graph path: all host work and uploads first, then one launch.
  t = Clock::now();
  BANYAN_RETURN_IF_ERROR(PrepareAttention(batch, in, /*fixed_layout=*/true));
  if (m.record_uploaded) BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.uploaded, m.stream));
  stats_.attention_host_us += us_since(t);
  LaunchTimer timer{&stats_.launch_host_us};
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.cur_begin, m.stream));
  m.step_begin_recorded = true;
  bool launched = false;
  const absl::Status s =
      m.graphs->Launch(
          GraphKey(in), m.stream, [&] { return Enqueue(batch, in, false); },
          [&](const std::vector<kc::KernelNode>& kernels, cudaGraphExec_t e, int* nodes) {
            return UpdateAttentionNodes(kernels, e, nodes);
          },
          &stats_.graph, &launched);
  if (s.ok() && launched) return s;
  if (!s.ok()) {
    // Nothing of this step was launched: turn graphs off and run it eagerly.
    graph_error_ = std::string(s.message());
    ++stats_.graph.fallbacks;
    SetCudaGraphs(false);
  }
  return Enqueue(batch, in, false);
}

void CudaBackend::SetCudaGraphs(bool on) {
  impl_->graphs_on = on;
  if (!on && impl_->graphs != nullptr) impl_->graphs->Clear();
}

bool CudaBackend::cuda_graphs() const { return impl_->graphs_on; }

const std::string& CudaBackend::graph_update_error() const { return impl_->graphs->update_error(); }

const std::string& CudaBackend::graph_early_error() const { return impl_->graphs->early_error(); }

absl::Status CudaBackend::NoStepInFlight() const {
  if (impl_->flight_count > 0) {
    return absl::FailedPreconditionError("steps launched ahead are not collected yet");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(const StepBatch& batch, std::vector<float>* logits) {
  Impl& m = *impl_;
  BANYAN_RETURN_IF_ERROR(NoStepInFlight());
  int32_t rows = 0;
  absl::Status s = Run(batch, &rows);
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
  BANYAN_RETURN_IF_ERROR(NoStepInFlight());
  BANYAN_RETURN_IF_ERROR(LaunchSample(batch, specs, {}));
  return CollectSample(out);
}

// Claims the next flight slot for a step launched ahead: refuses a full ring, waits until the
// step in flight has read the staging buffers, and points Run's begin event at the slot's.
absl::Status CudaBackend::BeginFlight() {
  Impl& m = *impl_;
  if (m.flight_count == Impl::kFlightDepth) {
    return absl::FailedPreconditionError("two steps are in flight: collect one first");
  }
  // The step in flight may still be copying its inputs out of the staging buffers that this
  // step is about to fill.
  if (m.flight_count > 0) BANYAN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(m.uploaded));
  Impl::FlightSlot& slot = m.flights[m.NextFlight()];
  m.cur_begin = slot.begin;
  m.step_begin_recorded = false;
  m.record_uploaded = true;
  return absl::OkStatus();
}

// After Run: the slot keeps whether its begin event was recorded; Run's defaults come back.
void CudaBackend::EndFlightRun() {
  Impl& m = *impl_;
  m.record_uploaded = false;
  m.cur_begin = m.step_begin;
  m.flights[m.NextFlight()].begin_recorded = m.step_begin_recorded;
  m.step_begin_recorded = false;
}

// Takes the oldest slot in flight once its end event has completed; adds its device time.
absl::Status CudaBackend::FinishFlight(int* slot_index) {
  Impl& m = *impl_;
  if (m.flight_count == 0) return absl::FailedPreconditionError("no sampled step in flight");
  *slot_index = m.flight_head;
  Impl::FlightSlot& slot = m.flights[m.flight_head];
  m.flight_head = (m.flight_head + 1) % Impl::kFlightDepth;
  --m.flight_count;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.end));
  if (slot.begin_recorded) {
    float ms = 0;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, slot.begin, slot.end));
    m.device_seconds += ms * 1e-3;
  }
  if (slot.late) {
    // Negative when the sampling was enqueued before the forward pass ended (no wait).
    float ms = 0;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, slot.forward_end, slot.sampling_begin));
    ++stats_.late_steps;
    if (ms > 0) {
      stats_.late_wait_us += ms * 1e3;
      stats_.late_waits += ms > 0.01f;  // over 10 us: the device sat waiting for the host
    }
    slot.late = false;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                       std::span<const int32_t> feed) {
  BANYAN_RETURN_IF_ERROR(LaunchForward(batch, static_cast<int32_t>(specs.size()), feed));
  return EnqueueSampling(specs, feed);
}

absl::Status CudaBackend::LaunchForward(const StepBatch& batch, int32_t num_specs,
                                        std::span<const int32_t> feed) {
  Impl& m = *impl_;
  if (m.forward_only.has_value()) {
    return absl::FailedPreconditionError("a step launched by LaunchForward awaits its sampling");
  }
  BANYAN_RETURN_IF_ERROR(BeginFlight());
  const int index = m.NextFlight();
  int32_t rows = 0;
  absl::Status s = Run(batch, &rows, feed, num_specs);
  EndFlightRun();
  if (!s.ok()) {
    // The steps in flight stay collectable.
    cudaStreamSynchronize(m.stream);  // leave no work of this step in flight
    return s;
  }
  m.forward_only = Impl::ForwardOnly{index, rows, num_specs, !batch.decode.empty()};
  m.flights[index].late = false;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.flights[index].forward_end, m.stream));
  ++m.flight_count;  // the slot is taken; CollectSample refuses it until its sampling is enqueued
  return absl::OkStatus();
}

absl::Status CudaBackend::LaunchSampling(std::span<const SampleSpec> specs) {
  Impl& m = *impl_;
  if (m.forward_only.has_value()) {
    Impl::FlightSlot& slot = m.flights[m.forward_only->index];
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.sampling_begin, m.stream));
    slot.late = true;
  }
  return EnqueueSampling(specs, {});
}

std::span<uint64_t> CudaBackend::MaskStaging(int32_t count, int64_t words) {
  Impl& m = *impl_;
  std::span<uint64_t> out;
  if (!m.forward_only.has_value() ||
      !m.sampler[m.forward_only->index].MaskStaging(count, words, &out).ok()) {
    return {};
  }
  return out;
}

// The second half of a launch: the sampling of the step LaunchForward left in forward_only.
absl::Status CudaBackend::EnqueueSampling(std::span<const SampleSpec> specs,
                                          std::span<const int32_t> feed) {
  Impl& m = *impl_;
  if (!m.forward_only.has_value()) {
    return absl::FailedPreconditionError("LaunchSampling without a step from LaunchForward");
  }
  const Impl::ForwardOnly f = *m.forward_only;
  m.forward_only.reset();
  const int32_t n = static_cast<int32_t>(specs.size());
  const auto t = std::chrono::steady_clock::now();
  absl::Status s = n == f.num_specs
                       ? absl::OkStatus()
                       : absl::InvalidArgumentError(absl::StrCat(
                             "the step was launched for ", f.num_specs, " samples, not ", n));
  cuda::DeviceSampler& sampler = m.sampler[f.index];
  // The sampler reads the fed tokens before this step's own overwrite them (below).
  if (s.ok()) {
    s = sampler.Enqueue(m.logits.as<float>(), f.rows, cfg_.vocab_size, specs, m.stream, feed,
                        m.out_tokens.as<int32_t>());
  } else {
    sampler.DropStaging();
  }
  if (s.ok() && n > 0) {
    // The tokens, one per spec, where a fed step reads them: out of the results' {token,
    // logprob} pairs.
    s = kc::CudaStatus(cudaMemcpy2DAsync(m.out_tokens.get(), sizeof(int32_t),
                                         sampler.device_results(), sizeof(kc::SampleTokenDev),
                                         sizeof(int32_t), static_cast<size_t>(n),
                                         cudaMemcpyDeviceToDevice, m.stream),
                       "cudaMemcpy2DAsync (sampled tokens)");
  }
  if (s.ok()) s = kc::CudaStatus(cudaEventRecord(m.flights[f.index].end, m.stream), "cudaEventRecord");
  if (f.decode) {
    stats_.sample_host_us +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
  }
  if (!s.ok()) {
    // The step is dropped (it is the newest in the ring); the steps before stay collectable.
    cudaStreamSynchronize(m.stream);  // leave no work of this step in flight
    m.flights[f.index].late = false;
    --m.flight_count;
    return s;
  }
  m.feedable_valid = n > 0;
  m.feedable_count = n;
  return absl::OkStatus();
}

absl::Status CudaBackend::CollectSample(std::vector<SampleResult>* out) {
  Impl& m = *impl_;
  if (m.forward_only.has_value() && m.flight_head == m.forward_only->index) {
    return absl::FailedPreconditionError("the step awaits its sampling (LaunchSampling)");
  }
  int index = 0;
  BANYAN_RETURN_IF_ERROR(FinishFlight(&index));
  m.sampler[index].Collect(out);
  return absl::OkStatus();
}

double CudaBackend::device_seconds() const { return impl_->device_seconds; }

int CudaBackend::steps_in_flight() const { return impl_->flight_count; }

absl::Status CudaBackend::HiddenRows(std::span<const int32_t> rows,
                                     std::vector<float>* out) const {
  const Impl& m = *impl_;
  const size_t dim = static_cast<size_t>(cfg_.dim);
  const size_t elem = static_cast<size_t>(kc::DTypeBytes(options_.dtype));  // bf16 or fp16
  out->resize(rows.size() * dim);
  if (rows.empty()) return absl::OkStatus();
  const auto [lo, hi] = std::minmax_element(rows.begin(), rows.end());
  if (*lo < 0 || *hi >= m.last_out_rows) {
    return absl::OutOfRangeError(absl::StrCat("hidden rows ", *lo, "..", *hi, " of a step with ",
                                              m.last_out_rows, " output rows"));
  }
  // One copy of the rows' range (the step is done: CollectSample waited for it).
  const size_t first = static_cast<size_t>(*lo), count = static_cast<size_t>(*hi - *lo + 1);
  std::vector<uint16_t> half(count * dim);
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpy(half.data(), m.xo.as<char>() + first * dim * elem,
                                         count * dim * elem, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint16_t* src = half.data() + (static_cast<size_t>(rows[i]) - first) * dim;
    float* dst = out->data() + i * dim;
    for (size_t j = 0; j < dim; ++j) {
      dst[j] = options_.dtype == kc::DType::kBf16 ? model::Bf16ToFloat(src[j]) : model::HalfToFloat(src[j]);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DraftTrees(const DraftHeads& heads, std::span<const int32_t> rows,
                                     std::span<const int32_t> roots,
                                     std::span<const int32_t> branching,
                                     std::vector<DraftHeads::Tree>* out) {
  Impl& m = *impl_;
  if (heads.dim() != cfg_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("draft heads of dim ", heads.dim(),
                                                   " on a model of dim ", cfg_.dim));
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= m.last_out_rows) {
      return absl::OutOfRangeError(absl::StrCat("hidden row ", r, " of a step with ",
                                                m.last_out_rows, " output rows"));
    }
  }
  if (m.draft_heads.source_id() != heads.id()) {
    BANYAN_RETURN_IF_ERROR(m.draft_heads.Upload(heads, options_.dtype, m.stream));
  }
  cuda::DeviceDraftHeads::Base base;
  base.hidden = m.xo.get();
  base.embeddings = m.weights.embeddings;
  base.lm_head = m.weights.output;
  base.vocab = cfg_.vocab_size;
  return m.draft_heads.Draft(m.cublas, m.stream, base, rows, roots, branching, out);
}

}  // namespace banyan::engine
