// FP8 on the GPU: activation quantization (kernels/cuda/fp8_quant.h) bit for bit against the rule
// computed on the host with the E4M3 codec of model/dtype.h, and the W8A8 GEMMs
// (engine/cuda/fp8_gemm.h) against a float64 product of the dequantized operands, for per-row
// (per-channel weights, per-token activations) and 128 x 128 block scales. Random data fresh each
// run; device outputs poisoned (NaN) first.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/cuda/fp8_gemm.h"
#include "gtest/gtest.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/layer_kernels.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/quantized.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/random.h"

namespace banyan::engine::cuda {
namespace {

using ::banyan::kernels::cuda::DType;
using ::banyan::kernels::cuda::kFp8Group;
using ::banyan::testing::DeviceArray;
using ::banyan::testing::FromDtype;
using ::banyan::testing::RelErr;
using ::banyan::testing::ToDtype;

// Activations with row magnitudes spread over 2^-6 .. 2^6, so that the scales matter; a zero row.
std::vector<float> Activations(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-6, 6);
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.0f, ex(rng));
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = r == 1 ? 0.0f : nd(rng) * mag;
  }
  return v;
}

// The rule of fp8_quant.h on the host: scales [rows, groups], codes [rows, cols].
void QuantizeOnHost(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t group,
                    std::vector<uint8_t>* codes, std::vector<float>* scales) {
  const int64_t groups = (cols + group - 1) / group;
  codes->assign(rows * cols, 0);
  scales->assign(rows * groups, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t b = g * group, e = std::min(cols, b + group);
      float amax = 0.0f;
      for (int64_t c = b; c < e; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      float scale = amax / model::kFp8E4M3Max;
      if (!(scale > 0.0f)) scale = 1.0f;
      (*scales)[r * groups + g] = scale;
      for (int64_t c = b; c < e; ++c) {
        (*codes)[r * cols + c] = model::FloatToFp8E4M3(x[r * cols + c] / scale);
      }
    }
  }
}

// Scale (r, g) of a [rows, groups] host table laid out as QuantizeFp8Params says.
float ScaleAt(const std::vector<float>& s, int64_t r, int64_t g, int64_t groups, int64_t ld,
              bool group_major) {
  return group_major ? s[g * ld + r] : s[r * groups + g];
}

TEST(Fp8Quant, CodesAndScalesFollowTheRuleBitForBit) {
  BANYAN_SEEDED_RNG(rng);
  // 1000: the per-128 rows take the plain kernel, per token the vectorized one; 4096, 14336
  // (an 8B's model and MLP widths) and 28672 (a 70B's MLP) both vectorized, up to 1,024 threads
  // a row; 100000 the plain kernel again. A row stride beyond cols and fp16 on some of them.
  for (int64_t cols : {1000, 4096, 14336, 28672, 100000})
    for (bool per_token : {true, false})
      for (bool group_major : {false, true})
        for (int64_t pad_rows : {0, 40}) {
          if (per_token && group_major) continue;
          const DType dtype = pad_rows > 0 && group_major ? DType::kFp16 : DType::kBf16;
          const int64_t stride = pad_rows > 0 ? cols + 8 : cols;
          SCOPED_TRACE(::testing::Message()
                       << "cols " << cols << (per_token ? " per token" : " per 128")
                       << (group_major ? " group-major" : "") << " pad to " << pad_rows
                       << " stride " << stride << " " << kernels::cuda::DTypeName(dtype));
          const int64_t rows = 37, group = per_token ? cols : kFp8Group;
          const int64_t groups = (cols + group - 1) / group, all = std::max(rows, pad_rows);
          std::vector<float> x = Activations(rows, cols, rng);
          for (float& v : x) v = ::banyan::testing::RoundTo(dtype, v);  // what the GPU reads
          std::vector<float> strided(rows * stride, 0.0f);
          for (int64_t r = 0; r < rows; ++r) {
            std::copy(x.begin() + r * cols, x.begin() + (r + 1) * cols, strided.begin() + r * stride);
          }
          DeviceArray<uint16_t> x_d(ToDtype(dtype, strided));
          DeviceArray<uint8_t> codes_d(all * cols);  // poisoned: padding rows must be written
          DeviceArray<float> scales_d(all * groups);
          ASSERT_TRUE(kernels::cuda::QuantizeRowsFp8(dtype,
                                                     {.in = x_d.get(),
                                                      .in_stride = stride,
                                                      .rows = rows,
                                                      .cols = cols,
                                                      .group = static_cast<int32_t>(group),
                                                      .codes = codes_d.get(),
                                                      .scales = scales_d.get(),
                                                      .pad_rows = pad_rows,
                                                      .group_major = group_major},
                                                     nullptr)
                          .ok());
          std::vector<uint8_t> want_codes;
          std::vector<float> want_scales;
          QuantizeOnHost(x, rows, cols, group, &want_codes, &want_scales);
          const std::vector<float> scales = scales_d.Download();
          const std::vector<uint8_t> codes = codes_d.Download();
          int64_t scales_differ = 0, codes_differ = 0;
          for (int64_t r = 0; r < all; ++r) {
            for (int64_t g = 0; g < groups; ++g) {
              const float want = r < rows ? want_scales[r * groups + g] : 1.0f;
              scales_differ += ScaleAt(scales, r, g, groups, all, group_major) != want;
            }
            for (int64_t c = 0; c < cols; ++c) {
              codes_differ += codes[r * cols + c] != (r < rows ? want_codes[r * cols + c] : 0);
            }
          }
          EXPECT_EQ(scales_differ, 0) << "scales differing from the host rule (padding: 1)";
          EXPECT_EQ(codes_differ, 0) << "codes differing from the host rule (padding: 0)";
          EXPECT_EQ(ScaleAt(scales, 1, 0, groups, all, group_major), 1.0f)
              << "a zero row's scale is 1";
        }
}

// A kernel's FP8 output (codes [pad_rows, cols], scales group-major [groups, pad_rows], as the
// engine lays them out) against the host rule applied to its own bf16 / fp16 output `out`
// [rows, cols]: bit for bit; padding rows zero codes and scale 1.
void ExpectHostRuleOfOutput(const std::vector<float>& out, int64_t rows, int64_t pad_rows,
                            int64_t cols, int64_t group, const std::vector<uint8_t>& codes,
                            const std::vector<float>& scales) {
  ASSERT_EQ(std::count_if(out.begin(), out.end(), [](float v) { return std::isnan(v); }), 0);
  const int64_t groups = (cols + group - 1) / group;
  std::vector<uint8_t> want_codes;
  std::vector<float> want_scales;
  QuantizeOnHost(out, rows, cols, group, &want_codes, &want_scales);
  int64_t scales_differ = 0, codes_differ = 0;
  for (int64_t r = 0; r < pad_rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      scales_differ += scales[g * pad_rows + r] != (r < rows ? want_scales[r * groups + g] : 1.0f);
    }
    for (int64_t c = 0; c < cols; ++c) {
      codes_differ += codes[r * cols + c] != (r < rows ? want_codes[r * cols + c] : 0);
    }
  }
  EXPECT_EQ(scales_differ, 0) << "scales differing from the host rule (padding: 1)";
  EXPECT_EQ(codes_differ, 0) << "codes differing from the host rule (padding: 0)";
}

// An RmsNorm that also writes its output's FP8 codes (the engine's QKV and gate/up inputs) gives,
// bit for bit, the host rule applied to the norm's own output: fused in the vectorized kernel
// (per token and per 128 at 4,096 wide, per token at 1,000) and through the fallback (per 128 at
// 1,000, any group at 130: the plain kernel, then QuantizeRowsFp8). Padding rows written.
TEST(Fp8Quant, RmsNormWritesTheCodesOfItsOwnOutput) {
  BANYAN_SEEDED_RNG(rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t dim : {4096, 1000, 130})
    for (bool per_token : {true, false})
      for (DType dtype : {DType::kBf16, DType::kFp16}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << (per_token ? " per token" : " per 128")
                                          << " " << kernels::cuda::DTypeName(dtype));
        const int32_t rows = 13, pad_rows = 16;
        const int64_t group = per_token ? dim : kFp8Group;
        const int64_t groups = (dim + group - 1) / group;
        std::vector<float> x = Activations(rows, dim, rng), weight(dim);
        for (float& w : weight) w = 1.0f + 0.25f * nd(rng);
        DeviceArray<float> x_d(x), w_d(weight);
        DeviceArray<uint16_t> out_d(int64_t{rows} * dim);
        DeviceArray<uint8_t> codes_d(int64_t{pad_rows} * dim);
        DeviceArray<float> scales_d(pad_rows * groups);
        kernels::cuda::RmsNormParams np;
        np.x = x_d.get();
        np.weight = w_d.get();
        np.out = out_d.get();
        np.rows = rows;
        np.dim = static_cast<int32_t>(dim);
        np.fp8_codes = codes_d.get();
        np.fp8_scales = scales_d.get();
        np.fp8_group = static_cast<int32_t>(group);
        np.fp8_pad_rows = pad_rows;
        const absl::Status st = kernels::cuda::RmsNorm(dtype, np, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ExpectHostRuleOfOutput(FromDtype(dtype, out_d.Download()), rows, pad_rows, dim, group,
                               codes_d.Download(), scales_d.Download());
      }
}

// The same for SwiGLU, whose output feeds the down projection: fused at 14,336 (per token and per
// 128, fp32 and dtype inputs) and at 1,000 per token; the fallback at 1,000 per 128 and at 100.
// 6 rows padded to 8 take the cluster kernel (per token, compute capability 9.0+), 37 padded
// to 40 the one-block kernel: both by the host rule, bit for bit.
TEST(Fp8Quant, SwiGluWritesTheCodesOfItsOwnOutput) {
  BANYAN_SEEDED_RNG(rng);
  for (auto [rows, pad_rows] : {std::pair<int32_t, int32_t>{6, 8}, {37, 40}}) {
    for (int64_t hidden : {14336, 1000, 100})
      for (bool per_token : {true, false})
        for (bool in_dtype : {false, true}) {
          const DType dtype = in_dtype ? DType::kFp16 : DType::kBf16;
          SCOPED_TRACE(::testing::Message() << rows << " rows, hidden " << hidden
                                            << (per_token ? " per token" : " per 128")
                                            << (in_dtype ? " fp16 in" : " fp32 in"));
          const int64_t group = per_token ? hidden : kFp8Group;
          const int64_t groups = (hidden + group - 1) / group;
          std::vector<float> gate_up = Activations(rows, 2 * hidden, rng);
          DeviceArray<float> gu_f32(gate_up);
          DeviceArray<uint16_t> gu_narrow(ToDtype(dtype, gate_up));
          DeviceArray<uint16_t> out_d(int64_t{rows} * hidden);
          DeviceArray<uint8_t> codes_d(int64_t{pad_rows} * hidden);
          DeviceArray<float> scales_d(pad_rows * groups);
          kernels::cuda::SwiGluParams sp;
          sp.gate_up = in_dtype ? static_cast<const void*>(gu_narrow.get()) : gu_f32.get();
          sp.gate_up_in_dtype = in_dtype;
          sp.out = out_d.get();
          sp.rows = rows;
          sp.hidden = static_cast<int32_t>(hidden);
          sp.fp8_codes = codes_d.get();
          sp.fp8_scales = scales_d.get();
          sp.fp8_group = static_cast<int32_t>(group);
          sp.fp8_pad_rows = pad_rows;
          const absl::Status st = kernels::cuda::SwiGlu(dtype, sp, nullptr);
          ASSERT_TRUE(st.ok()) << st;
          ExpectHostRuleOfOutput(FromDtype(dtype, out_d.Download()), rows, pad_rows, hidden, group,
                                 codes_d.Download(), scales_d.Download());
        }
  }
}

// w [N, K] with 128 x 128 block scales (the fine-grained checkpoints' form), by the same rule per
// block as the per-channel one per row.
model::QuantizedTensor QuantizeBlocks(const std::vector<float>& w, int64_t N, int64_t K) {
  model::QuantizedTensor q;
  q.shape = {N, K};
  q.scale_kind = model::Fp8ScaleKind::kBlock128;
  const int64_t rb = (N + 127) / 128, cb = (K + 127) / 128;
  q.scales.assign(rb * cb, 1.0f);
  q.codes.assign(N * K, 0);
  for (int64_t bi = 0; bi < rb; ++bi) {
    for (int64_t bj = 0; bj < cb; ++bj) {
      float amax = 0.0f;
      for (int64_t i = bi * 128; i < std::min(N, bi * 128 + 128); ++i) {
        for (int64_t j = bj * 128; j < std::min(K, bj * 128 + 128); ++j) {
          amax = std::max(amax, std::fabs(w[i * K + j]));
        }
      }
      float scale = amax / model::kFp8E4M3Max;
      if (!(scale > 0.0f)) scale = 1.0f;
      q.scales[bi * cb + bj] = scale;
      for (int64_t i = bi * 128; i < std::min(N, bi * 128 + 128); ++i) {
        for (int64_t j = bj * 128; j < std::min(K, bj * 128 + 128); ++j) {
          q.codes[i * K + j] = model::FloatToFp8E4M3(w[i * K + j] / scale);
        }
      }
    }
  }
  return q;
}

// A checkpoint's [ceil(N / 128), ceil(K / 128)] block scales in the device layout of
// fp8_gemm.h (block rows at Fp8BlockScaleStride(K)), as the backend's upload lays them out with
// a strided copy.
std::vector<float> DeviceBlockScales(const std::vector<float>& scales, int64_t N, int64_t K) {
  const int64_t rb = (N + 127) / 128, cb = (K + 127) / 128, stride = Fp8BlockScaleStride(K);
  std::vector<float> out(static_cast<size_t>(rb * stride), 0.0f);
  for (int64_t i = 0; i < rb; ++i) {
    for (int64_t j = 0; j < cb; ++j) out[i * stride + j] = scales[i * cb + j];
  }
  return out;
}

// out[m][n] = sum_k a(m, k) w(n, k) in float64 from the dequantized operands; the activation
// scales as the backend lays them out (group-major for block scaling, ld rows).
std::vector<float> Reference(const std::vector<uint8_t>& a_codes,
                             const std::vector<float>& a_scales, int64_t a_group, int64_t ld,
                             bool group_major, const model::QuantizedTensor& w, int64_t M) {
  const int64_t N = w.rows(), K = w.cols(), a_groups = (K + a_group - 1) / a_group;
  std::vector<float> wd(N * K);
  model::DequantizeRows(w, 0, N, wd.data());
  std::vector<double> a(M * K);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      a[m * K + k] = static_cast<double>(model::Fp8E4M3ToFloat(a_codes[m * K + k])) *
                     ScaleAt(a_scales, m, k / a_group, a_groups, ld, group_major);
    }
  }
  std::vector<float> out(M * N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[m * K + k] * wd[n * K + k];
      out[m * N + n] = static_cast<float>(s);
    }
  }
  return out;
}

// `gemv_rows`: Fp8Gemm::Create's (products of at most that many rows run as the GEMV).
// `residual`: the product added into an fp32 output (beta 1), as the backend's O and down
// projections add into the residual stream; else written as bf16 (beta 0).
void CheckGemm(Fp8Scaling scaling, int64_t M, int64_t N, int64_t K, std::mt19937_64& rng,
               int gemv_rows = 8, bool residual = false) {
  SCOPED_TRACE(::testing::Message() << (scaling == Fp8Scaling::kPerRow ? "per row " : "blocks ")
                                    << M << " x " << N << " x " << K << ", GEMV up to "
                                    << gemv_rows << " rows");
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(N * K);
  for (float& v : w) v = nd(rng);
  for (int64_t j = 0; j < K; ++j) w[3 * K + j] *= 40.0f;  // one loud output channel
  model::QuantizedTensor q;
  if (scaling == Fp8Scaling::kPerRow) {
    model::Tensor t{.shape = {N, K}, .data = w};
    ASSERT_TRUE(model::QuantizeFp8PerChannel(t, "w", &q).ok());
  } else {
    q = QuantizeBlocks(w, N, K);
  }
  ASSERT_TRUE(model::CheckQuantized(q, "w").ok());
  const bool blocks = scaling == Fp8Scaling::kBlock128;
  const int64_t group = blocks ? kFp8Group : K;
  const int64_t groups = (K + group - 1) / group;
  const int64_t rows = Fp8Gemm::RowsFor(scaling, M);  // with the padding rows
  const bool group_major = blocks && kFp8ActivationGroupsMajor;
  std::vector<float> x = Activations(M, K, rng);
  DeviceArray<uint16_t> x_d(ToDtype(DType::kBf16, x));
  DeviceArray<uint8_t> a_codes(rows * K), w_codes(q.codes);
  DeviceArray<float> a_scales(rows * groups),
      w_scales(blocks ? DeviceBlockScales(q.scales, N, K) : q.scales);
  ASSERT_TRUE(kernels::cuda::QuantizeRowsFp8(DType::kBf16,
                                             {.in = x_d.get(),
                                              .in_stride = 0,
                                              .rows = M,
                                              .cols = K,
                                              .group = static_cast<int32_t>(group),
                                              .codes = a_codes.get(),
                                              .scales = a_scales.get(),
                                              .pad_rows = rows,
                                              .group_major = group_major},
                                             nullptr)
                  .ok());
  absl::StatusOr<std::unique_ptr<Fp8Gemm>> gemm = Fp8Gemm::Create(32u << 20, gemv_rows);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::vector<float> got;
  if (residual) {
    std::vector<float> before(rows * N);  // the residual the product is added to
    for (float& v : before) v = nd(rng) * 20.0f;
    DeviceArray<float> out_d(before);
    const absl::Status run =
        (*gemm)->Run(scaling, {w_codes.get(), w_scales.get()}, {a_codes.get(), a_scales.get()},
                     out_d.get(), CUDA_R_32F, rows, N, K, 1.0f, nullptr);
    ASSERT_TRUE(run.ok()) << run;
    got = out_d.Download();
    for (size_t i = 0; i < got.size(); ++i) got[i] -= before[i];
  } else {
    DeviceArray<uint16_t> out_d(rows * N);
    const absl::Status run =
        (*gemm)->Run(scaling, {w_codes.get(), w_scales.get()}, {a_codes.get(), a_scales.get()},
                     out_d.get(), CUDA_R_16BF, rows, N, K, 0.0f, nullptr);
    ASSERT_TRUE(run.ok()) << run;
    got = FromDtype(DType::kBf16, out_d.Download());
  }
  const std::vector<float> want =
      Reference(a_codes.Download(), a_scales.Download(), group, rows, group_major, q, M);
  int64_t padding_not_zero = 0;
  for (int64_t i = M * N; i < rows * N; ++i) padding_not_zero += got[i] != 0.0f;
  EXPECT_EQ(padding_not_zero, 0) << "output elements of the padding rows that are not 0";
  got.resize(M * N);
  // fp32 accumulation, one bf16 rounding of the output: about 2^-9 relative per element.
  EXPECT_LT(RelErr(got, want), 5e-3);
}

TEST(Fp8Gemm, PerRowScalesMatchTheFloat64Product) {
  BANYAN_SEEDED_RNG(rng);
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 64, 300}) {
    CheckGemm(Fp8Scaling::kPerRow, M, 1024, 4096, rng);
  }
  CheckGemm(Fp8Scaling::kPerRow, 1, 1024, 4096, rng, /*gemv_rows=*/0);  // cuBLASLt at one row
  CheckGemm(Fp8Scaling::kPerRow, 33, 1000, 1040, rng);  // widths not multiples of 128
  CheckGemm(Fp8Scaling::kPerRow, 3, 1000, 1040, rng);  // GEMV: a 16-row block half outside N
  CheckGemm(Fp8Scaling::kPerRow, 8, 1000, 14336, rng);  // K of the 8B shape's down projection
  // Added into an fp32 residual (beta 1), through the GEMV and through cuBLASLt.
  for (int64_t M : {2, 6, 64}) CheckGemm(Fp8Scaling::kPerRow, M, 1024, 4096, rng, 8, true);
}

TEST(Fp8Gemm, BlockScalesMatchTheFloat64Product) {
  BANYAN_SEEDED_RNG(rng);
  for (int64_t M : {1, 4, 5, 8, 9, 64, 300}) {
    CheckGemm(Fp8Scaling::kBlock128, M, 1024, 4096, rng);
  }
  CheckGemm(Fp8Scaling::kBlock128, 1, 1024, 4096, rng, /*gemv_rows=*/0);  // cuBLASLt, 4 rows
  CheckGemm(Fp8Scaling::kBlock128, 33, 1152, 1408, rng);  // 9 x 11 blocks
  CheckGemm(Fp8Scaling::kBlock128, 2, 1152, 1408, rng);
  for (int64_t M : {2, 6, 64}) CheckGemm(Fp8Scaling::kBlock128, M, 1024, 4096, rng, 8, true);
}

TEST(Fp8Gemm, RefusesShapesTheTensorCoresCannotTake) {
  EXPECT_EQ(Fp8Gemm::RowsFor(Fp8Scaling::kBlock128, 7), 8);
  EXPECT_EQ(Fp8Gemm::RowsFor(Fp8Scaling::kBlock128, 8), 8);
  EXPECT_EQ(Fp8Gemm::RowsFor(Fp8Scaling::kPerRow, 7), 7);
  EXPECT_FALSE(Fp8Gemm::CheckShape(1024, 1000).ok());  // K not a multiple of 16
  EXPECT_FALSE(Fp8Gemm::CheckShape(1001, 1024).ok());  // N not a multiple of 8
  EXPECT_TRUE(Fp8Gemm::CheckShape(1024, 4096).ok());
}

}  // namespace
}  // namespace banyan::engine::cuda
