#include "engine/cuda/device_draft_heads.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublas_gemm.h"
#include "model/dtype.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/draft_kernels.h"

namespace banyan::engine::cuda {
namespace {

namespace kc = kernels::cuda;

int64_t Align(int64_t bytes) { return (bytes + 255) & ~int64_t{255}; }

}  // namespace

absl::Status DeviceDraftHeads::Upload(const DraftHeads& heads, kc::DType dtype,
                                      cudaStream_t stream) {
  source_id_ = 0;
  heads_.clear();
  dtype_ = dtype;
  dim_ = heads.dim();
  mlp_ = heads.mlp_hidden();
  hydra_ = heads.kind() == DraftHeadKind::kHydra;
  int64_t bytes = 0;
  for (int i = 0; i < heads.num_heads(); ++i) {
    const DraftHeads::Head& h = heads.head(i);
    bytes += Align(int64_t{mlp_} * h.input_size * 2) + Align(int64_t{dim_} * mlp_ * 2) +
             Align(int64_t{mlp_} * 4) + Align(int64_t{dim_} * 4);
  }
  BANYAN_RETURN_IF_ERROR(weights_.Reserve(std::max<int64_t>(bytes, 256), "draft heads"));
  std::vector<uint16_t> narrow;
  char* at = weights_.as<char>();
  auto put = [&](const model::Tensor& t, bool half, void** dst) -> absl::Status {
    const size_t n = t.data.size();
    *dst = at;
    if (half) {
      narrow.resize(n);
      for (size_t k = 0; k < n; ++k) {
        narrow[k] = dtype == kc::DType::kBf16 ? model::FloatToBf16(t.data[k]) : model::FloatToHalf(t.data[k]);
      }
      // Synchronous: `narrow` is reused for the next tensor.
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpy(at, narrow.data(), n * 2, cudaMemcpyHostToDevice));
      at += Align(static_cast<int64_t>(n) * 2);
    } else {
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpy(at, t.data.data(), n * 4, cudaMemcpyHostToDevice));
      at += Align(static_cast<int64_t>(n) * 4);
    }
    return absl::OkStatus();
  };
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // nothing in flight reads weights_
  for (int i = 0; i < heads.num_heads(); ++i) {
    const DraftHeads::Head& h = heads.head(i);
    Head d;
    d.input_size = h.input_size;
    void* p = nullptr;
    BANYAN_RETURN_IF_ERROR(put(h.fc1_w, true, &d.fc1_w));
    BANYAN_RETURN_IF_ERROR(put(h.fc2_w, true, &d.fc2_w));
    BANYAN_RETURN_IF_ERROR(put(h.fc1_b, false, &p));
    d.fc1_b = static_cast<float*>(p);
    BANYAN_RETURN_IF_ERROR(put(h.fc2_b, false, &p));
    d.fc2_b = static_cast<float*>(p);
    heads_.push_back(d);
  }
  source_id_ = heads.id();
  return absl::OkStatus();
}

absl::Status DeviceDraftHeads::Draft(cublasHandle_t cublas, cudaStream_t stream, const Base& base,
                                     std::span<const int32_t> rows,
                                     std::span<const int32_t> roots,
                                     std::span<const int32_t> branching,
                                     std::vector<DraftHeads::Tree>* out) {
  const int64_t S = static_cast<int64_t>(roots.size());
  if (static_cast<int64_t>(rows.size()) != S) {
    return absl::InvalidArgumentError("DraftTrees: one root per row");
  }
  for (int32_t r : roots) {
    if (r < 0 || r >= base.vocab) return absl::InvalidArgumentError("draft heads: root outside vocab");
  }
  for (int32_t b : branching) {
    if (b < 1 || b > kc::kDraftMaxBranching || b > base.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("draft heads: branching factor ", b,
                                                     " outside [1, ", kc::kDraftMaxBranching, "]"));
    }
  }
  out->assign(static_cast<size_t>(S), DraftHeads::Tree{});
  for (int64_t s = 0; s < S; ++s) (*out)[s] = DraftHeads::Tree{{roots[s]}, {-1}, {0}};
  const int levels = std::min<int>(static_cast<int>(branching.size()), static_cast<int>(heads_.size()));
  if (S == 0 || levels == 0) return absl::OkStatus();

  // Nodes per level (n[d] over all samples; per_sample[d] for one) and where each level's
  // children start in tokens_.
  const int stride = levels + 1;
  std::vector<int64_t> n(levels + 1), per_sample(levels + 1), child_off(levels + 1, 0);
  n[0] = S;
  per_sample[0] = 1;
  for (int d = 0; d < levels; ++d) {
    n[d + 1] = n[d] * branching[d];
    per_sample[d + 1] = per_sample[d] * branching[d];
    child_off[d + 1] = child_off[d] + n[d + 1];
  }
  const int64_t max_level = *std::max_element(n.begin(), n.begin() + levels);
  const int64_t children = child_off[levels];

  ints_.Clear();
  const int64_t o_rows = ints_.Add(rows);
  std::vector<int32_t> iota(static_cast<size_t>(S)), paths0(static_cast<size_t>(S * stride), 0);
  std::iota(iota.begin(), iota.end(), 0);
  for (int64_t s = 0; s < S; ++s) paths0[s * stride] = roots[s];
  const int64_t o_ns = ints_.Add(iota);
  const int64_t o_paths = ints_.Add(paths0);
  BANYAN_RETURN_IF_ERROR(ints_.Upload(stream, "draft inputs"));

  // Rows per block: the logits of a block stay within 128 MiB.
  const int64_t block = std::clamp<int64_t>((int64_t{128} << 20) / (int64_t{base.vocab} * 4), 1, 1024);
  const int64_t block_rows = std::min(block, max_level);
  int max_input = 0;
  for (int d = 0; d < levels; ++d) max_input = std::max(max_input, heads_[d].input_size);
  for (int k = 0; k < 2; ++k) {
    BANYAN_RETURN_IF_ERROR(paths_[k].Reserve(n[levels] * stride * 4, "draft paths"));
    BANYAN_RETURN_IF_ERROR(node_sample_[k].Reserve(n[levels] * 4, "draft nodes"));
  }
  BANYAN_RETURN_IF_ERROR(tokens_.Reserve(children * 4, "draft tokens"));
  BANYAN_RETURN_IF_ERROR(u_.Reserve(block_rows * max_input * 2, "draft head inputs"));
  BANYAN_RETURN_IF_ERROR(a_.Reserve(block_rows * mlp_ * 4, "draft head activations"));
  BANYAN_RETURN_IF_ERROR(s_.Reserve(block_rows * mlp_ * 2, "draft head activations"));
  BANYAN_RETURN_IF_ERROR(z_.Reserve(block_rows * dim_ * 4, "draft head outputs"));
  BANYAN_RETURN_IF_ERROR(zq_.Reserve(block_rows * dim_ * 2, "draft head outputs"));
  BANYAN_RETURN_IF_ERROR(logits_.Reserve(block_rows * int64_t{base.vocab} * 4, "draft logits"));
  BANYAN_RETURN_IF_ERROR(host_tokens_.Reserve(children * 4, "draft tokens (host)"));

  const cudaDataType_t ctype = dtype_ == kc::DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.0f, zero = 0.0f;
  // out[M, N] (fp32) = a[M, K] . w[N, K]^T + beta * out (cublas_gemm.h).
  auto gemm = [&](const void* w, const void* a, float* o, int64_t M, int N, int K,
                  const float* beta) {
    return RowMajorGemm(cublas, ctype, w, a, o, CUDA_R_32F, M, N, K, &one, beta);
  };

  const int32_t* cur_paths = ints_.Dev(o_paths);
  const int32_t* cur_ns = ints_.Dev(o_ns);
  for (int d = 0; d < levels; ++d) {
    const Head& hd = heads_[d];
    const int b = branching[d];
    const bool last = d + 1 == levels;
    int32_t* next_paths = paths_[d % 2].as<int32_t>();
    int32_t* next_ns = node_sample_[d % 2].as<int32_t>();
    for (int64_t r0 = 0; r0 < n[d]; r0 += block_rows) {
      const int64_t R = std::min(block_rows, n[d] - r0);
      kc::DraftInputParams ip;
      ip.hidden = base.hidden;
      ip.hidden_row = ints_.Dev(o_rows);
      ip.node_sample = cur_ns + r0;
      ip.paths = cur_paths + r0 * stride;
      ip.embeddings = base.embeddings;
      ip.fc2_bias = hd.fc2_b;
      ip.u = u_.get();
      ip.z = z_.as<float>();
      ip.nodes = static_cast<int32_t>(R);
      ip.dim = dim_;
      ip.path_len = hydra_ ? d + 1 : 0;
      ip.path_stride = stride;
      BANYAN_RETURN_IF_ERROR(kc::DraftHeadInput(dtype_, ip, stream));
      BANYAN_RETURN_IF_ERROR(gemm(hd.fc1_w, u_.get(), a_.as<float>(), R, mlp_, hd.input_size, &zero));
      kc::DraftBiasSiluParams bp;
      bp.a = a_.as<float>();
      bp.bias = hd.fc1_b;
      bp.out = s_.get();
      bp.rows = static_cast<int32_t>(R);
      bp.n = mlp_;
      BANYAN_RETURN_IF_ERROR(kc::DraftBiasSilu(dtype_, bp, stream));
      BANYAN_RETURN_IF_ERROR(gemm(hd.fc2_w, s_.get(), z_.as<float>(), R, dim_, mlp_, &one));
      BANYAN_RETURN_IF_ERROR(kc::DraftNarrow(dtype_, z_.as<float>(), zq_.get(), R * dim_, stream));
      BANYAN_RETURN_IF_ERROR(
          gemm(base.lm_head, zq_.get(), logits_.as<float>(), R, base.vocab, dim_, &zero));
      kc::DraftTopBParams tp;
      tp.logits = logits_.as<float>();
      tp.tokens = tokens_.as<int32_t>() + child_off[d] + r0 * b;
      tp.paths = cur_paths + r0 * stride;
      tp.node_sample = cur_ns + r0;
      tp.paths_next = last ? nullptr : next_paths + r0 * b * stride;
      tp.node_sample_next = last ? nullptr : next_ns + r0 * b;
      tp.rows = static_cast<int32_t>(R);
      tp.vocab = base.vocab;
      tp.b = b;
      tp.path_len = d + 1;
      tp.path_stride = stride;
      BANYAN_RETURN_IF_ERROR(kc::DraftTopB(tp, stream));
    }
    cur_paths = next_paths;
    cur_ns = next_ns;
  }
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_tokens_.get(), tokens_.get(), children * 4,
                                              cudaMemcpyDeviceToHost, stream));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const int32_t* tok = host_tokens_.as<int32_t>();

  // Level d + 1 of sample s: its per_sample[d] parents in order, b children each (the order
  // TreeBatch pushes them in).
  for (int64_t s = 0; s < S; ++s) {
    DraftHeads::Tree& t = (*out)[s];
    int64_t level_first = 0;  // tree index of the sample's first node of level d
    for (int d = 0; d < levels; ++d) {
      const int b = branching[d];
      const int64_t base_child = child_off[d] + s * per_sample[d] * b;
      for (int64_t p = 0; p < per_sample[d]; ++p) {
        for (int j = 0; j < b; ++j) {
          t.token.push_back(tok[base_child + p * b + j]);
          t.parent.push_back(static_cast<int32_t>(level_first + p));
          t.depth.push_back(d + 1);
        }
      }
      level_first += per_sample[d];
    }
  }
  return absl::OkStatus();
}

}  // namespace banyan::engine::cuda
