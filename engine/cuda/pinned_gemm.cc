#include "engine/cuda/pinned_gemm.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublas_gemm.h"
#include "engine/cuda/device_memory.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/invariant_gemm.h"

namespace banyan::engine::cuda {
namespace kc = kernels::cuda;
namespace {

constexpr int64_t kManyRef = 512;  // the heuristic's M for many rows
constexpr uint32_t kAlign = 16;    // bytes every operand is promised to be aligned to

size_t OutBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Random 16-bit operands of moderate size: sign, an exponent near 0 and random mantissa bits
// (no NaN, infinity or subnormal). The check needs only values that exercise every bit of the
// sums, not any distribution.
std::vector<uint16_t> RandomHalfs(kc::DType dt, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) {
    const uint64_t r = rng();
    const uint16_t sign = static_cast<uint16_t>((r & 1) << 15);
    if (dt == kc::DType::kBf16) {  // 8 exponent bits (bias 127), 7 mantissa bits
      x = sign | static_cast<uint16_t>((124 + (r >> 1) % 5) << 7) |
          static_cast<uint16_t>((r >> 8) & 0x7f);
    } else {  // fp16: 5 exponent bits (bias 15), 10 mantissa bits
      x = sign | static_cast<uint16_t>((12 + (r >> 1) % 5) << 10) |
          static_cast<uint16_t>((r >> 8) & 0x3ff);
    }
  }
  return v;
}

}  // namespace

struct PinnedGemm::Shape {
  int64_t N = 0, K = 0;
  cudaDataType_t out_type = CUDA_R_32F;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulAlgo_t many{};
  cublasLtMatmulAlgo_t tier[kNumTiers]{};
  bool have_tier[kNumTiers] = {};
  bool fallback = false;
  std::string decision;
  ~Shape() {
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct PinnedGemm::Layouts {
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, out = nullptr;
  ~Layouts() {
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (w != nullptr) cublasLtMatrixLayoutDestroy(w);
  }
};

absl::StatusOr<std::unique_ptr<PinnedGemm>> PinnedGemm::Create(kc::DType dtype) {
  std::unique_ptr<PinnedGemm> g(new PinnedGemm());
  g->dtype_ = dtype;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtCreate(&g->lt_));
  return g;
}

PinnedGemm::~PinnedGemm() {
  layouts_.clear();
  shapes_.clear();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

absl::StatusOr<PinnedGemm::Layouts*> PinnedGemm::LayoutsFor(int64_t M, int64_t N, int64_t K,
                                                            cudaDataType_t out_type) {
  const auto key = std::make_tuple(M, N, K, static_cast<int>(out_type));
  if (auto it = layouts_.find(key); it != layouts_.end()) return it->second.get();
  auto l = std::make_unique<Layouts>();
  const cudaDataType_t in = dtype_ == kc::DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  // cuBLASLt's m x n x k is N x M x K: the weights [N, K] row-major are column-major K x N,
  // transposed; the activations [M, K] column-major K x M; the output [M, N] column-major N x M.
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l->w, in, K, N, K));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l->a, in, K, M, K));
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l->out, out_type, N, M, N));
  Layouts* raw = l.get();
  layouts_.emplace(key, std::move(l));
  return raw;
}

absl::Status PinnedGemm::Launch(const Shape& s, int tier, const void* w, const void* a, void* out,
                                int64_t M, float beta, cudaStream_t stream) {
  absl::StatusOr<Layouts*> l = LayoutsFor(M, s.N, s.K, s.out_type);
  if (!l.ok()) return l.status();
  const float alpha = 1.0f;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmul(lt_, s.desc, &alpha, w, (*l)->w, a, (*l)->a, &beta, out,
                                  (*l)->out, out, (*l)->out, tier >= 0 ? &s.tier[tier] : &s.many, nullptr, 0,
                                  stream));
  return absl::OkStatus();
}

// The heuristic's first algorithm for M rows with no split of K and no workspace.
static absl::StatusOr<cublasLtMatmulAlgo_t> Heuristic(cublasLtHandle_t lt,
                                                      cublasLtMatmulDesc_t desc,
                                                      cublasLtMatrixLayout_t w,
                                                      cublasLtMatrixLayout_t a,
                                                      cublasLtMatrixLayout_t out) {
  cublasLtMatmulPreference_t pref = nullptr;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = 0;
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &reduction, sizeof(reduction));
  }
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &kAlign, sizeof(kAlign));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt, desc, w, a, out, out, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  BANYAN_LT_RETURN_IF_ERROR(st);
  if (found == 0) return absl::NotFoundError("cuBLASLt offers no algorithm without split-K");
  int32_t splits = 0;
  size_t written = 0;
  BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulAlgoConfigGetAttribute(
      &result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written));
  if (splits > 1) {
    return absl::FailedPreconditionError(absl::StrCat("its algorithm splits K in ", splits));
  }
  return result.algo;
}

absl::Status PinnedGemm::SelfCheck(Shape& s, const void* w, cudaStream_t stream) {
  const int64_t R = kCheckRows, N = s.N, K = s.K;
  const size_t es = OutBytes(s.out_type);
  DeviceBuffer a, full, part;
  BANYAN_RETURN_IF_ERROR(a.Reserve(R * K * 2, "GEMM check activations"));
  BANYAN_RETURN_IF_ERROR(full.Reserve(R * N * es, "GEMM check output"));
  BANYAN_RETURN_IF_ERROR(part.Reserve(R * N * es, "GEMM check output"));
  const std::vector<uint16_t> host_a = RandomHalfs(dtype_, static_cast<size_t>(R * K), N * 31 + K);
  BANYAN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(a.get(), host_a.data(), host_a.size() * 2, cudaMemcpyHostToDevice, stream));
  BANYAN_RETURN_IF_ERROR(Launch(s, -1, w, a.get(), full.get(), R, 0.0f, stream));
  // Host copies of the compared rows only, at the offsets they have on the device.
  std::vector<uint8_t> want(static_cast<size_t>(R * N) * es), got(want.size());
  // Rows [r0, r0 + m) run as a product of m rows (the activations and output offset by r0 rows)
  // against the same rows of the product of all R.
  auto same = [&](int tier, int64_t r0, int64_t m) -> absl::StatusOr<bool> {
    const size_t off = static_cast<size_t>(r0 * N) * es, bytes = static_cast<size_t>(m * N) * es;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(part.get(), 0xff, part.capacity(), stream));
    BANYAN_RETURN_IF_ERROR(Launch(s, tier, w, static_cast<const uint8_t*>(a.get()) + r0 * K * 2,
                                  static_cast<uint8_t*>(part.get()) + off, m, 0.0f, stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(want.data() + off,
                                                static_cast<uint8_t*>(full.get()) + off, bytes,
                                                cudaMemcpyDeviceToHost, stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(got.data() + off,
                                                static_cast<uint8_t*>(part.get()) + off, bytes,
                                                cudaMemcpyDeviceToHost, stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return std::memcmp(got.data() + off, want.data() + off, bytes) == 0;
  };
  struct Case {
    int64_t r0, m;
  };
  for (const Case c : {Case{0, 1}, Case{137, 1}, Case{100, 7}, Case{5, 64}, Case{200, R - 200}}) {
    absl::StatusOr<bool> ok = same(-1, c.r0, c.m);
    if (!ok.ok()) return ok.status();
    if (!*ok) {
      return absl::FailedPreconditionError(absl::StrCat("rows ", c.r0, "..", c.r0 + c.m - 1,
                                                        " alone differ from the same rows of ", R,
                                                        " in the last bits"));
    }
  }
  // A tier's algorithm (where the heuristic gave one other than many's) against the full
  // product: single rows, a small block, its largest block at two offsets.
  static_assert(kTiers[kNumTiers - 1].max_rows + 16 <= kCheckRows, "a tier the check cannot fill");
  for (int t = 0; t < kNumTiers; ++t) {
    if (!s.have_tier[t]) continue;
    const int64_t top = kTiers[t].max_rows;
    bool equal = true;
    for (const Case c : {Case{0, 1}, Case{137, 1}, Case{100, 7}, Case{3, top}, Case{R - top, top},
                         Case{11, top / 2 + 1}}) {
      absl::StatusOr<bool> ok = same(t, c.r0, c.m);
      equal = equal && ok.ok() && *ok;
    }
    s.have_tier[t] = equal;
  }
  return absl::OkStatus();
}

absl::StatusOr<PinnedGemm::Shape*> PinnedGemm::ShapeFor(const void* w, int64_t N, int64_t K,
                                                        cudaDataType_t out_type,
                                                        cudaStream_t stream) {
  const Key key{N, K, static_cast<int>(out_type)};
  if (auto it = shapes_.find(key); it != shapes_.end()) return it->second.get();
  auto s = std::make_unique<Shape>();
  s->N = N;
  s->K = K;
  s->out_type = out_type;
  auto choose = [&]() -> absl::Status {
    if (N % 8 != 0 || K % 8 != 0) {
      return absl::FailedPreconditionError("N or K not a multiple of 8 (16-byte rows)");
    }
    BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&s->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_w = CUBLAS_OP_T, trans_a = CUBLAS_OP_N;
    BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w,
                                                    sizeof(trans_w)));
    BANYAN_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_a,
                                                    sizeof(trans_a)));
    absl::StatusOr<Layouts*> many = LayoutsFor(kManyRef, N, K, out_type);
    if (!many.ok()) return many.status();
    absl::StatusOr<cublasLtMatmulAlgo_t> algo =
        Heuristic(lt_, s->desc, (*many)->w, (*many)->a, (*many)->out);
    if (!algo.ok()) return algo.status();
    s->many = *algo;
    for (int t = 0; t < kNumTiers; ++t) {
      absl::StatusOr<Layouts*> lt = LayoutsFor(kTiers[t].ref_rows, N, K, out_type);
      if (!lt.ok()) return lt.status();
      absl::StatusOr<cublasLtMatmulAlgo_t> f =
          Heuristic(lt_, s->desc, (*lt)->w, (*lt)->a, (*lt)->out);
      // The many-rows algorithm again: nothing to keep (products of M rows run it anyway).
      s->have_tier[t] = f.ok() && std::memcmp(&*f, &s->many, sizeof(s->many)) != 0;
      if (s->have_tier[t]) s->tier[t] = *f;
    }
    return SelfCheck(*s, w, stream);
  };
  if (absl::Status st = choose(); !st.ok()) {
    s->fallback = true;
    s->decision = absl::StrCat("fallback: ", st.message());
    cudaGetLastError();  // a failed allocation or launch of the check leaves nothing behind
  } else {
    std::string tiers;
    for (int t = 0; t < kNumTiers; ++t) {
      if (s->have_tier[t]) absl::StrAppend(&tiers, tiers.empty() ? "" : "/", kTiers[t].max_rows);
    }
    s->decision = tiers.empty() ? "many" : absl::StrCat("tiers ", tiers, "+many");
  }
  Shape* raw = s.get();
  shapes_.emplace(key, std::move(s));
  return raw;
}

absl::Status PinnedGemm::Run(const void* w, const void* a, void* out, cudaDataType_t out_type,
                             int64_t M, int64_t N, int64_t K, float beta, cudaStream_t stream) {
  if (M == 0) return absl::OkStatus();
  absl::StatusOr<Shape*> s = ShapeFor(w, N, K, out_type, stream);
  if (!s.ok()) return s.status();
  if ((*s)->fallback) {
    kc::InvariantGemmParams g;
    g.a = a;
    g.w = w;
    g.out = out;
    g.out_f32 = out_type == CUDA_R_32F;
    g.M = M;
    g.N = N;
    g.K = K;
    g.beta = beta;
    return kc::InvariantGemm(dtype_, g, stream);
  }
  for (const void* p : {w, a, static_cast<const void*>(out)}) {
    if (reinterpret_cast<uintptr_t>(p) % kAlign != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("deterministic GEMM: an operand not aligned to ", kAlign, " bytes"));
    }
  }
  int tier = -1;
  for (int t = 0; t < kNumTiers && tier < 0; ++t) {
    if (M <= kTiers[t].max_rows && (*s)->have_tier[t]) tier = t;
  }
  return Launch(**s, tier, w, a, out, M, beta, stream);
}

std::string PinnedGemm::Decision(int64_t N, int64_t K, cudaDataType_t out_type) const {
  auto it = shapes_.find(Key{N, K, static_cast<int>(out_type)});
  return it == shapes_.end() ? std::string() : it->second->decision;
}

std::string PinnedGemm::Summary() const {
  std::vector<const Shape*> all;
  for (const auto& [key, s] : shapes_) all.push_back(s.get());
  std::sort(all.begin(), all.end(), [](const Shape* a, const Shape* b) {
    return std::tie(a->N, a->K, a->out_type) < std::tie(b->N, b->K, b->out_type);
  });
  std::string out;
  for (const Shape* s : all) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", s->N, " x ", s->K,
                    s->out_type == CUDA_R_32F ? " fp32 out: " : " 16-bit out: ", s->decision);
  }
  return out;
}

}  // namespace banyan::engine::cuda
