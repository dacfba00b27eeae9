#include "bench/gemm_ceiling.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/tpp/bench_fill.h"
#include "engine/cuda/cublas_gemm.h"
#include "engine/cuda/device_memory.h"
#include "engine/cuda/fp8_gemm.h"
#include "kernels/cuda/cuda_status.h"

namespace banyan::bench {
namespace {

using engine::cuda::DeviceBuffer;
using engine::cuda::CublasStatus;

// Owns the handles of one measurement, whatever path leaves it.
struct Handles {
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Handles() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// A non-blocking stream and a cuBLAS handle on it, with a fixed workspace as the backend gives
// cuBLAS, so that capture never allocates.
absl::Status SetUpCublas(Handles* h, DeviceBuffer* workspace) {
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
  BANYAN_RETURN_IF_ERROR(CublasStatus(cublasCreate(&h->cublas), "cublasCreate"));
  BANYAN_RETURN_IF_ERROR(CublasStatus(cublasSetStream(h->cublas, h->stream), "cublasSetStream"));
  constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
  BANYAN_RETURN_IF_ERROR(workspace->Reserve(kWorkspaceBytes, "cuBLAS workspace"));
  return CublasStatus(
      cublasSetWorkspace(h->cublas, workspace->get(), static_cast<size_t>(kWorkspaceBytes)),
      "cublasSetWorkspace");
}

// The median seconds of `reps` replays of `step` captured in a CUDA graph on h->stream, after
// one eager run (cuBLAS picks and loads its kernels outside the capture) and three warm-ups.
template <typename Step>
absl::StatusOr<double> MedianGraphSeconds(Step& step, int reps, Handles* hp) {
  Handles& h = *hp;
  BANYAN_RETURN_IF_ERROR(step());
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(h.stream));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(h.stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status captured = step();
  const cudaError_t ended = cudaStreamEndCapture(h.stream, &h.graph);
  BANYAN_RETURN_IF_ERROR(captured);
  BANYAN_CUDA_RETURN_IF_ERROR(ended);
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&h.exec, h.graph, 0));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&h.start));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&h.stop));
  for (int i = 0; i < 3; ++i) BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(h.exec, h.stream));
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(h.start, h.stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(h.exec, h.stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventRecord(h.stop, h.stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(h.stop));
    float ms = 0;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, h.start, h.stop));
    seconds.push_back(ms * 1e-3);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

absl::StatusOr<double> MeasureProjectionGemmSeconds(const model::ModelConfig& cfg, int batch,
                                                    int reps, bool fp8, int fp8_gemv_rows,
                                                    int lm_head_rows) {
  if (batch < 1 || reps < 1) return absl::InvalidArgumentError("batch and reps must be >= 1");
  if (lm_head_rows < 0) lm_head_rows = batch;
  if (lm_head_rows > batch) {
    return absl::InvalidArgumentError("lm_head_rows must be at most batch");
  }
  const int64_t dim = cfg.dim, d = cfg.head_dim(), hq = cfg.n_heads, hkv = cfg.n_kv_heads;
  const int64_t hidden = cfg.hidden_dim, vocab = cfg.vocab_size, B = batch;
  const int64_t qkv_cols = (hq + 2 * hkv) * d;
  // Per layer, row-major [out, in] like the backend's weights.
  const int64_t w_qkv = qkv_cols * dim, w_o = dim * hq * d, w_13 = 2 * hidden * dim,
                w_2 = dim * hidden;
  const int64_t layer_elems = w_qkv + w_o + w_13 + w_2;
  // bf16: every layer and the LM head; fp8: the LM head only (the layers' codes are below).
  const int64_t weight_elems = (fp8 ? 0 : layer_elems * cfg.n_layers) + vocab * dim;
  // Activations: one buffer per GEMM input and output.
  const int64_t x_elems = B * dim, qkv_elems = B * qkv_cols, att_elems = B * hq * d,
                h13_elems = B * 2 * hidden, h_elems = B * hidden, logit_elems = B * vocab;
  const int64_t act_elems = 2 * x_elems + qkv_elems + att_elems + h13_elems + h_elems +
                            logit_elems;

  Handles h;
  DeviceBuffer weights, acts, workspace;
  BANYAN_RETURN_IF_ERROR(SetUpCublas(&h, &workspace));
  BANYAN_RETURN_IF_ERROR(weights.Reserve(weight_elems * 2, "GEMM-ceiling weights"));
  BANYAN_RETURN_IF_ERROR(acts.Reserve(act_elems * 2, "GEMM-ceiling activations"));
  BANYAN_CUDA_RETURN_IF_ERROR(
      FillRandomBf16(weights.get(), static_cast<size_t>(weight_elems), 0.02f, 1, h.stream));
  BANYAN_CUDA_RETURN_IF_ERROR(
      FillRandomBf16(acts.get(), static_cast<size_t>(act_elems), 1.0f, 2, h.stream));

  // FP8: one byte per weight (codes of 1.0; the rate does not depend on the values), one scale
  // per output row; the activations' codes and per-token scales, quantized once.
  const int64_t layer_rows = qkv_cols + dim + 2 * hidden + dim;
  const int64_t widest = std::max({dim, hq * d, hidden});
  DeviceBuffer codes, scales, act8;
  std::unique_ptr<engine::cuda::Fp8Gemm> fp8_gemm;
  if (fp8) {
    BANYAN_RETURN_IF_ERROR(codes.Reserve(layer_elems * cfg.n_layers, "GEMM-ceiling FP8 weights"));
    BANYAN_RETURN_IF_ERROR(
        scales.Reserve((layer_rows * cfg.n_layers + B) * 4, "GEMM-ceiling FP8 scales"));
    BANYAN_RETURN_IF_ERROR(act8.Reserve(B * widest, "GEMM-ceiling FP8 activations"));
    BANYAN_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(codes.get(), 0x38, layer_elems * cfg.n_layers, h.stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(act8.get(), 0x38, B * widest, h.stream));
    const std::vector<float> ones(static_cast<size_t>(layer_rows * cfg.n_layers + B), 1.0f);
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scales.get(), ones.data(), ones.size() * 4,
                                                cudaMemcpyHostToDevice, h.stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(h.stream));
    absl::StatusOr<std::unique_ptr<engine::cuda::Fp8Gemm>> g =
        engine::cuda::Fp8Gemm::Create(32u << 20, fp8_gemv_rows);
    if (!g.ok()) return g.status();
    fp8_gemm = std::move(*g);
  }
  auto* w = static_cast<uint16_t*>(weights.get());
  auto* a = static_cast<uint16_t*>(acts.get());
  uint16_t* x = a;
  uint16_t* x2 = x + x_elems;
  uint16_t* qkv = x2 + x_elems;
  uint16_t* att = qkv + qkv_elems;
  uint16_t* h13 = att + att_elems;
  uint16_t* hm = h13 + h13_elems;
  uint16_t* logits = hm + h_elems;
  const float alpha = 1.0f, beta = 0.0f;
  // out[M, N] = in[M, K] * weight[N, K]^T: the backend's GEMM (cublas_gemm.h), bf16 out.
  auto gemm = [&](const uint16_t* weight, const uint16_t* in, uint16_t* out, int64_t N,
                  int64_t K, int64_t M) {
    return engine::cuda::RowMajorGemm(h.cublas, CUDA_R_16BF, weight, in, out, CUDA_R_16BF, M, N,
                                      K, &alpha, &beta);
  };
  // The LM head over the last `lm_head_rows` rows of x.
  auto lm_head = [&](const uint16_t* weight) -> absl::Status {
    if (lm_head_rows == 0) return absl::OkStatus();
    return gemm(weight, x + (B - lm_head_rows) * dim, logits, vocab, dim, lm_head_rows);
  };
  const auto* w8 = static_cast<const uint8_t*>(codes.get());
  const auto* s8 = static_cast<const float*>(scales.get());
  const engine::cuda::Fp8Operand a8{static_cast<const uint8_t*>(act8.get()),
                                    s8 + layer_rows * cfg.n_layers};
  // The FP8 GEMM of weight rows [row, row + N) of layer l, whose codes start at byte `at`.
  auto gemm8 = [&](int l, int64_t at, int64_t row, uint16_t* out, int64_t N, int64_t K) {
    const engine::cuda::Fp8Operand wl{w8 + l * layer_elems + at, s8 + l * layer_rows + row};
    return fp8_gemm->Run(engine::cuda::Fp8Scaling::kPerRow, wl, a8, out, CUDA_R_16BF, B, N, K,
                         0.0f, h.stream);
  };
  auto step = [&]() -> absl::Status {
    for (int l = 0; fp8 && l < cfg.n_layers; ++l) {
      BANYAN_RETURN_IF_ERROR(gemm8(l, 0, 0, qkv, qkv_cols, dim));
      BANYAN_RETURN_IF_ERROR(gemm8(l, w_qkv, qkv_cols, x2, dim, hq * d));
      BANYAN_RETURN_IF_ERROR(gemm8(l, w_qkv + w_o, qkv_cols + dim, h13, 2 * hidden, dim));
      BANYAN_RETURN_IF_ERROR(
          gemm8(l, w_qkv + w_o + w_13, qkv_cols + dim + 2 * hidden, x, dim, hidden));
    }
    if (fp8) return lm_head(w);
    for (int l = 0; l < cfg.n_layers; ++l) {
      const uint16_t* lw = w + l * layer_elems;
      BANYAN_RETURN_IF_ERROR(gemm(lw, x, qkv, qkv_cols, dim, B));
      BANYAN_RETURN_IF_ERROR(gemm(lw + w_qkv, att, x2, dim, hq * d, B));
      BANYAN_RETURN_IF_ERROR(gemm(lw + w_qkv + w_o, x2, h13, 2 * hidden, dim, B));
      BANYAN_RETURN_IF_ERROR(gemm(lw + w_qkv + w_o + w_13, hm, x, dim, hidden, B));
    }
    return lm_head(w + cfg.n_layers * layer_elems);
  };
  return MedianGraphSeconds(step, reps, &h);
}

absl::StatusOr<double> MeasureDenseGemmFlops(int n, int reps) {
  if (n < 64 || reps < 1) return absl::InvalidArgumentError("n must be >= 64 and reps >= 1");
  const int64_t N = n;
  Handles h;
  DeviceBuffer mats, workspace;
  BANYAN_RETURN_IF_ERROR(SetUpCublas(&h, &workspace));
  BANYAN_RETURN_IF_ERROR(mats.Reserve(3 * N * N * 2, "dense-GEMM operands"));
  BANYAN_CUDA_RETURN_IF_ERROR(
      FillRandomBf16(mats.get(), static_cast<size_t>(3 * N * N), 1.0f, 3, h.stream));
  auto* m = static_cast<uint16_t*>(mats.get());
  const float alpha = 1.0f, beta = 0.0f;
  auto step = [&]() -> absl::Status {
    return engine::cuda::RowMajorGemm(h.cublas, CUDA_R_16BF, m, m + N * N, m + 2 * N * N,
                                      CUDA_R_16BF, N, N, N, &alpha, &beta);
  };
  absl::StatusOr<double> seconds = MedianGraphSeconds(step, reps, &h);
  if (!seconds.ok()) return seconds.status();
  return 2.0 * static_cast<double>(N * N * N) / *seconds;
}

}  // namespace banyan::bench
