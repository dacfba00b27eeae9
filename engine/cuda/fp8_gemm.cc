#include "engine/cuda/fp8_gemm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fp8_gemv.h"

namespace banyan::engine::cuda {

struct Fp8Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (w != nullptr) cublasLtMatrixLayoutDestroy(w);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(size_t workspace_bytes,
                                                         int gemv_max_rows) {
  if (gemv_max_rows < 0 || gemv_max_rows > kernels::cuda::kFp8GemvMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM: the GEMV takes at most ",
                                                   kernels::cuda::kFp8GemvMaxRows, " rows"));
  }
  std::unique_ptr<Fp8Gemm> g(new Fp8Gemm());
  g->gemv_max_rows_ = gemv_max_rows;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtCreate(&g->lt_));
  // cuBLASLt answers the heuristic query of a scaled FP8 GEMM only when the scale pointers are
  // set (CUBLAS_STATUS_INVALID_VALUE otherwise, seen on an H100 with cuBLASLt 13.1): plans are
  // made with this placeholder, and Run sets the real ones.
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMalloc(&g->placeholder_scales_, 256));
  if (workspace_bytes > 0) {
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMalloc(&g->workspace_, workspace_bytes));
    g->workspace_bytes_ = workspace_bytes;
  }
  return g;
}

Fp8Gemm::~Fp8Gemm() {
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (placeholder_scales_ != nullptr) cudaFree(placeholder_scales_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

absl::Status Fp8Gemm::CheckShape(int64_t N, int64_t K) {
  if (K <= 0 || K % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM: the input width ", K, " is not a multiple of 16"));
  }
  if (N <= 0 || N % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM: the output width ", N, " is not a multiple of 8"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fp8Gemm::Plan*> Fp8Gemm::PlanFor(Fp8Scaling scaling, int64_t M, int64_t N, int64_t K,
                                                cudaDataType_t out_type) {
  const Key key{static_cast<int>(scaling), M, N, K, static_cast<int>(out_type)};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_w = CUBLAS_OP_T, trans_a = CUBLAS_OP_N;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                           &trans_w, sizeof(trans_w)));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                           &trans_a, sizeof(trans_a)));
  const cublasLtMatmulMatrixScale_t w_mode = scaling == Fp8Scaling::kPerRow
                                                 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const cublasLtMatmulMatrixScale_t a_mode = scaling == Fp8Scaling::kPerRow
                                                 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &w_mode, sizeof(w_mode)));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &a_mode, sizeof(a_mode)));
  for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER}) {
    BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, attr, &placeholder_scales_,
                                                             sizeof(placeholder_scales_)));
  }
  // cuBLASLt's m x n x k: m = N (output channels), n = M (tokens), k = K. The weights are stored
  // [N, K] row-major = column-major K x N, transposed; the activations [M, K] row-major =
  // column-major K x M; the output [M, N] row-major = column-major N x M.
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->w, CUDA_R_8F_E4M3, K, N, K));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, K, M, K));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->out, out_type, N, M, N));

  cublasLtMatmulPreference_t pref = nullptr;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t align = 16;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->w, plan->a, plan->out, plan->out,
                                        pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  BANYAN_LT_RETURN_IF_ERROR(st);
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "FP8 GEMM: cuBLASLt has no algorithm for ", M, " x ", N, " x ", K, " with ",
        scaling == Fp8Scaling::kPerRow ? "per-row" : "128 x 128 block", " scales on this GPU"));
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

absl::Status Fp8Gemm::Run(Fp8Scaling scaling, const Fp8Operand& w, const Fp8Operand& a, void* out,
                          cudaDataType_t out_type, int64_t M, int64_t N, int64_t K, float beta,
                          cudaStream_t stream) {
  if (M == 0) return absl::OkStatus();
  if (absl::Status s = CheckShape(N, K); !s.ok()) return s;
  if (RowsFor(scaling, M) != M) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM: 128 x 128 block scaling runs on a multiple of 4 rows, not ", M));
  }
  if (w.codes == nullptr || w.scales == nullptr || a.codes == nullptr || a.scales == nullptr ||
      out == nullptr || M < 0) {
    return absl::InvalidArgumentError("FP8 GEMM: empty operand");
  }
  if (M <= gemv_max_rows_) {
    namespace kc = kernels::cuda;
    kc::Fp8GemvParams g;
    g.w = w.codes;
    g.w_scales = w.scales;
    g.w_scale_stride = scaling == Fp8Scaling::kBlock128 ? Fp8BlockScaleStride(K) : 0;
    g.a = a.codes;
    g.a_scales = a.scales;
    g.M = M;
    g.N = N;
    g.K = K;
    g.out = out;
    g.out_type = out_type == CUDA_R_32F    ? kc::Fp8GemvOut::kF32
                 : out_type == CUDA_R_16BF ? kc::Fp8GemvOut::kBf16
                                           : kc::Fp8GemvOut::kF16;
    g.beta = beta;
    return kc::Fp8Gemv(g, stream);
  }
  absl::StatusOr<Plan*> plan = PlanFor(scaling, M, N, K, out_type);
  if (!plan.ok()) return plan.status();
  Plan& p = **plan;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w.scales, sizeof(w.scales)));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.scales, sizeof(a.scales)));
  const float alpha = 1.0f;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmul(lt_, p.desc, &alpha, w.codes, p.w, a.codes, p.a, &beta,
                                           out, p.out, out, p.out, &p.algo, workspace_,
                                           workspace_bytes_, stream));
  return absl::OkStatus();
}

}  // namespace banyan::engine::cuda
