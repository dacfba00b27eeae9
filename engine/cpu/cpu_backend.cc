#include "engine/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/dtype.h"
#include "model/rope.h"
#include "model/weights_layout.h"
#include "engine/plan_view.h"
#include "kernels/cpu/tpp_attention.h"
#include "kernels/kv_fp8.h"

namespace banyan::engine {

void RoundKvRowFp8(float* row, int n) {
  const int e = kernels::KvFp8RowExponent(row, n);
  const float inv = kernels::KvFp8Scale(-e), scale = kernels::KvFp8Scale(e);
  for (int i = 0; i < n; ++i) {
    row[i] = model::Fp8E4M3ToFloat(model::FloatToFp8E4M3(row[i] * inv)) * scale;
  }
}
namespace {

// c[m, n] = a[m, k] * w[n, k]^T + beta * c. per_row: one matrix-vector product per row
// (CpuBackendOptions::row_invariant), so that a row's result does not depend on m: a GEMM's
// blocking and kernel choice do, in the last bits.
void MatMulT(const float* a, int m, int k, const model::Tensor& w, float* c, float beta, bool per_row) {
  const int n = static_cast<int>(w.shape[0]);
  if (per_row) {
    for (int r = 0; r < m; ++r) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w.data.data(), k,
                  a + static_cast<int64_t>(r) * k, 1, beta, c + static_cast<int64_t>(r) * n, 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, w.data.data(), k,
              beta, c, n);
}

// in[rows, cols] rounded as FP8 with one scale per `group` elements of a row
// (CpuBackendOptions::fp8_activation_group; kernels/cuda/fp8_quant.h's rule), into out.
void RoundToFp8(const float* in, int rows, int cols, int group, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* x = in + static_cast<int64_t>(r) * cols;
    float* o = out + static_cast<int64_t>(r) * cols;
    for (int b = 0; b < cols; b += group) {
      const int e = std::min(cols, b + group);
      float amax = 0.0f;
      for (int i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));  // NaN left out
      float scale = amax / model::kFp8E4M3Max;
      if (!(scale > 0.0f)) scale = 1.0f;
      for (int i = b; i < e; ++i) {
        o[i] = model::Fp8E4M3ToFloat(model::FloatToFp8E4M3(x[i] / scale)) * scale;
      }
    }
  }
}

void RmsNorm(const float* x, const model::Tensor& weight, int rows, int dim, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* o = out + static_cast<int64_t>(r) * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight.data[i];
  }
}

// x[r, :] += bias for every row.
void AddBias(float* x, int rows, const model::Tensor& bias) {
  const int64_t n = static_cast<int64_t>(bias.data.size());
  for (int r = 0; r < rows; ++r) {
    float* xr = x + r * n;
    for (int64_t i = 0; i < n; ++i) xr[i] += bias.data[static_cast<size_t>(i)];
  }
}

}  // namespace

int64_t CpuBackend::ChunksForBudget(const model::ModelConfig& cfg, int32_t chunk_size, int64_t bytes) {
  int64_t per_chunk = int64_t{2} * cfg.n_layers * cfg.n_kv_heads * chunk_size * cfg.head_dim() *
                      static_cast<int64_t>(sizeof(float));
  return per_chunk > 0 ? bytes / per_chunk : 0;
}

int32_t CpuBackend::AutoThreads(const model::ModelConfig& config, int32_t default_threads) {
  const int64_t dim = config.dim;
  const int64_t widest = std::max<int64_t>(config.hidden_dim, config.vocab_size);
  return dim * widest < kThreadedProductMacs ? 1 : std::max(default_threads, 1);
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const model::ModelWeights* weights,
                                                               const CpuBackendOptions& options) {
  if (absl::Status s = model::ValidateConfig(weights->config, weights->source); !s.ok()) return s;
  if (model::HasQuantizedWeights(*weights)) {  // Dequantize trusts the FP8 forms' invariants
    if (absl::Status s = model::ValidateWeights(*weights); !s.ok()) return s;
  }
  if (options.num_chunks < 1 || options.chunk_size < 1) {
    return absl::InvalidArgumentError("the CPU backend needs at least one KV chunk");
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU backend's threads must be 0 (automatic) or more, not ", options.threads));
  }
  auto backend = std::unique_ptr<CpuBackend>(new CpuBackend(weights, options));
  if (backend->kv_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the CPU backend could not allocate its KV pool of ", options.num_chunks, " chunks"));
  }
  return backend;
}

CpuBackend::CpuBackend(const model::ModelWeights* weights, const CpuBackendOptions& options)
    : w_(*weights), cfg_(weights->config), options_(options) {
  // OpenBLAS's default, read before any backend of this process changed it.
  static const int32_t default_threads = openblas_get_num_threads();
  threads_ = options.threads > 0 ? options.threads : AutoThreads(cfg_, default_threads);
  openblas_set_num_threads(threads_);
  const int d = cfg_.head_dim();
  chunk_stride_ = int64_t{2} * cfg_.n_kv_heads * options.chunk_size * d;
  layer_stride_ = chunk_stride_ * options.num_chunks;
  kv_.reset(static_cast<float*>(
      std::calloc(static_cast<size_t>(layer_stride_) * cfg_.n_layers, sizeof(float))));
  inv_freq_ = model::RopeInvFreq(cfg_);
  dequantized_.reserve(model::HasQuantizedWeights(w_) ? size_t{7} * cfg_.n_layers : 0);
  for (const model::LayerWeights& l : w_.layers) {
    auto dense = [&](const model::Tensor& t, const model::QuantizedTensor& q) {
      if (q.empty()) return &t;
      dequantized_.push_back(model::Dequantize(q));
      return static_cast<const model::Tensor*>(&dequantized_.back());
    };
    proj_.push_back(Projections{dense(l.wq, l.fp8.wq), dense(l.wk, l.fp8.wk),
                                dense(l.wv, l.fp8.wv), dense(l.wo, l.fp8.wo),
                                dense(l.w_gate, l.fp8.w_gate), dense(l.w_down, l.fp8.w_down),
                                dense(l.w_up, l.fp8.w_up)});
  }
}

absl::Status CpuBackend::CopyChunks(std::span<const kvcache::ChunkCopy> copies) {
  const int d = cfg_.head_dim();
  const int c = options_.chunk_size;
  for (const kvcache::ChunkCopy& cp : copies) {
    if (cp.slot_begin < 0 || cp.slot_end > c || cp.slot_begin > cp.slot_end || cp.DstBegin() < 0 ||
        cp.DstBegin() + (cp.slot_end - cp.slot_begin) > c) {
      return absl::InvalidArgumentError(absl::StrCat("chunk copy of slots [", cp.slot_begin, ", ",
                                                     cp.slot_end, ") to ", cp.DstBegin(),
                                                     " outside a ", c, "-slot chunk"));
    }
    for (int l = 0; l < cfg_.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < cfg_.n_kv_heads; ++h) {
          const int64_t head_off = l * layer_stride_ + (int64_t{kv} * cfg_.n_kv_heads + h) * c * d;
          const float* src = kv_.get() + head_off + cp.src * chunk_stride_ + cp.slot_begin * d;
          float* dst = kv_.get() + head_off + cp.dst * chunk_stride_ + cp.DstBegin() * d;
          std::memcpy(dst, src, sizeof(float) * d * (cp.slot_end - cp.slot_begin));
        }
      }
    }
  }
  return absl::OkStatus();
}

void CpuBackend::ApplyRope(float* x, int heads, int32_t pos) const {
  const int d = cfg_.head_dim();
  const int half = d / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * d;
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq_[i];
      const float cs = std::cos(angle), sn = std::sin(angle);
      // kInterleaved rotates pairs (2i, 2i + 1); kHalf rotates (i, i + d/2).
      float* a = cfg_.rope_style == model::RopeStyle::kInterleaved ? v + 2 * i : v + i;
      float* b = cfg_.rope_style == model::RopeStyle::kInterleaved ? v + 2 * i + 1 : v + i + half;
      const float x0 = *a, x1 = *b;
      *a = x0 * cs - x1 * sn;
      *b = x0 * sn + x1 * cs;
    }
  }
}

void CpuBackend::Attention(const StepBatch& batch, int layer, const float* q, float* out) {
  const int d = cfg_.head_dim();
  const int hq = cfg_.n_heads;
  const int64_t row = int64_t{hq} * d;
  if (options_.attention == AttentionMode::kNone) {
    int64_t rows = static_cast<int64_t>(batch.decode.size());
    for (const SeqWork& s : batch.prefill) rows += static_cast<int64_t>(s.tokens.size());
    std::fill(out, out + rows * row, 0.0f);
    return;
  }
  kernels::KvView kv;
  kv.base = kv_.get() + layer * layer_stride_;
  kv.chunk_stride = chunk_stride_;
  kv.v_offset = int64_t{cfg_.n_kv_heads} * options_.chunk_size * d;
  kv.chunk_size = options_.chunk_size;
  kv.num_kv_heads = cfg_.n_kv_heads;
  kv.head_dim = d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (!batch.decode.empty()) {
    const kvcache::AttentionPlan& plan = *batch.plan;
    partial_o_.resize(static_cast<size_t>(plan.num_partials) * row);
    partial_lse_.resize(static_cast<size_t>(plan.num_partials) * hq);
    kernels::DecodeAttentionParams p;
    p.q = q;
    p.out = out;
    p.kv = kv;
    p.plan = ViewOf(plan);
    p.num_q_heads = hq;
    p.scale = scale;
    p.partial_o = partial_o_.data();
    p.partial_lse = partial_lse_.data();
    p.fixed_max = options_.row_invariant;
    kernels::cpu::TppDecodeAttention(p);
  }
  int64_t t = static_cast<int64_t>(batch.decode.size());
  for (const SeqWork& s : batch.prefill) {
    kernels::cpu::PrefillAttentionParams p;
    p.q = q + t * row;
    p.out = out + t * row;
    p.kv = kv;
    p.span_chunk = s.span_chunk.data();
    p.span_begin = s.span_begin.data();
    p.span_end = s.span_end.data();
    p.num_spans = static_cast<int32_t>(s.span_chunk.size());
    p.q_pos0 = s.pos0;
    p.num_q = static_cast<int32_t>(s.tokens.size());
    p.num_q_heads = hq;
    p.scale = scale;
    p.fixed_max = options_.row_invariant;
    kernels::cpu::PrefillAttention(p);
    t += static_cast<int64_t>(s.tokens.size());
  }
}

absl::Status CpuBackend::Forward(const StepBatch& batch, std::vector<float>* logits) {
  const bool per_row = options_.row_invariant;
  const int dim = cfg_.dim, d = cfg_.head_dim(), hq = cfg_.n_heads, hkv = cfg_.n_kv_heads;
  const int hidden = cfg_.hidden_dim, vocab = cfg_.vocab_size;
  if (!batch.decode.empty() &&
      (batch.plan == nullptr || batch.plan->num_rows() != static_cast<int>(batch.decode.size()))) {
    return absl::InvalidArgumentError("decode rows and attention plan disagree");
  }
  // Flatten the step's tokens: decode rows first, then prefill tokens.
  std::vector<const SeqWork*> works;
  for (const SeqWork& s : batch.decode) works.push_back(&s);
  for (const SeqWork& s : batch.prefill) works.push_back(&s);
  std::vector<int32_t> tokens, positions;
  std::vector<kvcache::SlotRef> slots;
  std::vector<uint8_t> writes;
  std::vector<int> logit_rows;
  for (const SeqWork* s : works) {
    if (s->tokens.empty() || s->slots.size() != s->tokens.size() ||
        s->write_kv.size() != s->tokens.size()) {
      return absl::InvalidArgumentError("a sequence's tokens, slots and write flags disagree");
    }
    for (size_t i = 0; i < s->tokens.size(); ++i) {
      if (s->tokens[i] < 0 || s->tokens[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", s->tokens[i],
                                                       " outside the vocabulary of ", vocab));
      }
      if (s->slots[i].chunk < 0 || s->slots[i].chunk >= options_.num_chunks) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", s->slots[i].chunk,
                                                       " outside the KV pool"));
      }
      tokens.push_back(s->tokens[i]);
      positions.push_back(s->pos0 + static_cast<int32_t>(i));
      slots.push_back(s->slots[i]);
      writes.push_back(s->write_kv[i]);
    }
    if (s->want_logits) logit_rows.push_back(static_cast<int>(tokens.size()) - 1);
  }
  const int T = static_cast<int>(tokens.size());
  x_.resize(static_cast<size_t>(T) * dim);
  xb_.resize(x_.size());
  q_.resize(static_cast<size_t>(T) * hq * d);
  att_.resize(q_.size());
  k_.resize(static_cast<size_t>(T) * hkv * d);
  v_.resize(k_.size());
  h1_.resize(static_cast<size_t>(T) * hidden);
  h3_.resize(h1_.size());
  for (int t = 0; t < T; ++t) {
    std::memcpy(x_.data() + static_cast<int64_t>(t) * dim,
                w_.tok_embeddings.data.data() + static_cast<int64_t>(tokens[t]) * dim,
                sizeof(float) * dim);
  }
  const int c = options_.chunk_size;
  // A projection's input: as it is, or rounded as the W8A8 GEMMs round it.
  auto fp8_in = [&](const std::vector<float>& in, int cols) -> const float* {
    const int group = options_.fp8_activation_group;
    if (group <= 0) return in.data();
    a8_.resize(static_cast<size_t>(T) * cols);
    RoundToFp8(in.data(), T, cols, std::min(group, cols), a8_.data());
    return a8_.data();
  };
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const model::LayerWeights& lw = w_.layers[l];
    const Projections& pw = proj_[l];
    RmsNorm(x_.data(), lw.attn_norm, T, dim, cfg_.norm_eps, xb_.data());
    const float* a = fp8_in(xb_, dim);
    MatMulT(a, T, dim, *pw.wq, q_.data(), 0.0f, per_row);
    MatMulT(a, T, dim, *pw.wk, k_.data(), 0.0f, per_row);
    MatMulT(a, T, dim, *pw.wv, v_.data(), 0.0f, per_row);
    if (cfg_.qkv_bias) {
      AddBias(q_.data(), T, lw.bq);
      AddBias(k_.data(), T, lw.bk);
      AddBias(v_.data(), T, lw.bv);
    }
    if (cfg_.qk_norm) {  // per-head RMSNorm, before RoPE
      RmsNorm(q_.data(), lw.q_norm, T * hq, d, cfg_.norm_eps, q_.data());
      RmsNorm(k_.data(), lw.k_norm, T * hkv, d, cfg_.norm_eps, k_.data());
    }
    float* layer_kv = kv_.get() + l * layer_stride_;
    for (int t = 0; t < T; ++t) {
      ApplyRope(q_.data() + static_cast<int64_t>(t) * hq * d, hq, positions[t]);
      if (!writes[t]) continue;  // cached KV is bit-identical to what we would write
      ApplyRope(k_.data() + static_cast<int64_t>(t) * hkv * d, hkv, positions[t]);
      for (int h = 0; h < hkv; ++h) {
        float* kdst = layer_kv + slots[t].chunk * chunk_stride_ +
                      (static_cast<int64_t>(h) * c + slots[t].slot) * d;
        float* vdst = kdst + static_cast<int64_t>(hkv) * c * d;
        std::memcpy(kdst, k_.data() + (static_cast<int64_t>(t) * hkv + h) * d, sizeof(float) * d);
        std::memcpy(vdst, v_.data() + (static_cast<int64_t>(t) * hkv + h) * d, sizeof(float) * d);
        if (options_.kv_fp8) {
          RoundKvRowFp8(kdst, d);
          RoundKvRowFp8(vdst, d);
        }
      }
    }
    Attention(batch, l, q_.data(), att_.data());
    MatMulT(fp8_in(att_, hq * d), T, hq * d, *pw.wo, x_.data(), 1.0f, per_row);  // x += Wo^T
    RmsNorm(x_.data(), lw.ffn_norm, T, dim, cfg_.norm_eps, xb_.data());
    a = fp8_in(xb_, dim);
    MatMulT(a, T, dim, *pw.w_gate, h1_.data(), 0.0f, per_row);
    MatMulT(a, T, dim, *pw.w_up, h3_.data(), 0.0f, per_row);
    for (size_t i = 0; i < h1_.size(); ++i) {
      const float g = h1_[i];
      h1_[i] = g / (1.0f + std::exp(-g)) * h3_[i];  // SwiGLU
    }
    MatMulT(fp8_in(h1_, hidden), T, hidden, *pw.w_down, x_.data(), 1.0f, per_row);  // x += mlp
  }
  const int n_out = static_cast<int>(logit_rows.size());
  std::vector<float>& last = hidden_;
  last.resize(static_cast<size_t>(n_out) * dim);
  for (int i = 0; i < n_out; ++i) {
    std::memcpy(last.data() + static_cast<int64_t>(i) * dim,
                x_.data() + static_cast<int64_t>(logit_rows[i]) * dim, sizeof(float) * dim);
  }
  RmsNorm(last.data(), w_.final_norm, n_out, dim, cfg_.norm_eps, last.data());
  logits->resize(static_cast<size_t>(n_out) * vocab);
  if (n_out > 0) {
    MatMulT(last.data(), n_out, dim, w_.output_matrix(), logits->data(), 0.0f, per_row);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const {
  const size_t dim = static_cast<size_t>(cfg_.dim);
  const size_t have = hidden_.size() / dim;
  out->resize(rows.size() * dim);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= have) {
      return absl::OutOfRangeError(
          absl::StrCat("hidden row ", rows[i], " of a step with ", have, " logit rows"));
    }
    std::copy_n(hidden_.begin() + static_cast<std::ptrdiff_t>(rows[i] * dim), dim,
                out->begin() + static_cast<std::ptrdiff_t>(i * dim));
  }
  return absl::OkStatus();
}

}  // namespace banyan::engine
