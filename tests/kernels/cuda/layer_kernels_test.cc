// The CUDA layer kernels (embedding, RMSNorm, q/k/v bias + q/k norm, RoPE + KV write, SwiGLU, chunk copies, argmax,
// dummy weights) against plain CPU formulas. Random data fresh each run; outputs poisoned.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "model/dummy_weights.h"
#include "model/weights_layout.h"
#include "gtest/gtest.h"
#include "kernels/cuda/layer_kernels.h"
#include "kernels/cuda/weight_kernels.h"
#include "kernels/kv_fp8.h"
#include "model/dtype.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/random.h"

namespace banyan::kernels::cuda {
namespace {

using ::banyan::testing::DeviceArray;
using ::banyan::testing::FromDtype;
using ::banyan::testing::RelErr;
using ::banyan::testing::RoundTo;
using ::banyan::testing::ToDtype;

std::vector<float> Normal(size_t n, std::mt19937_64& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Rounding the output to the dtype: relative error about 2^-9 (bf16), 2^-12 (fp16).
double Tol(DType dt) { return dt == DType::kBf16 ? 6e-3 : 1e-3; }

TEST(CudaLayerKernels, EmbeddingAndRmsNorm) {
  BANYAN_SEEDED_RNG(rng);
  // dim 1000 and 4096: the vectorised RMSNorm (dim % 4 == 0); 998: the scalar one.
  for (int dim : {1000, 998, 4096})
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const int vocab = 97, rows = 37;
    std::vector<float> table = Normal(size_t(vocab) * dim, rng);
    for (float& x : table) x = RoundTo(dt, x);
    std::vector<int32_t> tokens(rows);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    DeviceArray<uint16_t> table_d(ToDtype(dt, table));
    DeviceArray<int32_t> tokens_d(tokens);
    DeviceArray<float> x_d(size_t(rows) * dim);
    EmbeddingParams ep{table_d.get(), tokens_d.get(), x_d.get(), rows, dim};
    ASSERT_TRUE(EmbeddingGather(dt, ep, nullptr).ok());
    const std::vector<float> x = x_d.Download();
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < dim; ++i) ASSERT_EQ(x[size_t(r) * dim + i], table[size_t(tokens[r]) * dim + i]);
    }
    // Fed rows: where feed[r] >= 0 the token is fed[feed[r]] (a negative one reads row 0).
    {
      std::vector<int32_t> fed(11), feed(rows, -1);
      for (auto& t : fed) t = static_cast<int32_t>(rng() % vocab);
      fed[3] = -1;
      for (int r = 0; r < rows; r += 2) feed[r] = static_cast<int32_t>(rng() % fed.size());
      feed[0] = 3;
      DeviceArray<int32_t> fed_d(fed), feed_d(feed);
      DeviceArray<float> y_d(size_t(rows) * dim);
      EmbeddingParams fp{table_d.get(), tokens_d.get(), y_d.get(), rows, dim};
      fp.feed = feed_d.get();
      fp.feed_tokens = fed_d.get();
      ASSERT_TRUE(EmbeddingGather(dt, fp, nullptr).ok());
      const std::vector<float> y = y_d.Download();
      for (int r = 0; r < rows; ++r) {
        const int32_t tok = feed[r] >= 0 ? std::max(fed[feed[r]], 0) : tokens[r];
        for (int i = 0; i < dim; ++i) ASSERT_EQ(y[size_t(r) * dim + i], table[size_t(tok) * dim + i]);
      }
    }
    // RMSNorm over a subset of rows, in a shuffled order.
    const std::vector<float> w = Normal(dim, rng);
    DeviceArray<float> w_d(w);
    std::vector<int32_t> pick = {5, 0, 36, 17};
    DeviceArray<int32_t> pick_d(pick);
    DeviceArray<uint16_t> out_d(pick.size() * dim);
    RmsNormParams np;
    np.x = x_d.get();
    np.row_index = pick_d.get();
    np.weight = w_d.get();
    np.out = out_d.get();
    np.rows = static_cast<int32_t>(pick.size());
    np.dim = dim;
    np.eps = 1e-5f;
    ASSERT_TRUE(RmsNorm(dt, np, nullptr).ok());
    std::vector<float> want(pick.size() * dim);
    for (size_t r = 0; r < pick.size(); ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[pick[r] * dim + i]) * x[pick[r] * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) want[r * dim + i] = float(x[pick[r] * dim + i] * inv * w[i]);
    }
    EXPECT_LT(RelErr(FromDtype(dt, out_d.Download()), want), Tol(dt)) << DTypeName(dt);
  }
}

// One RoPE + KV-write launch's inputs: T tokens of q | k | v (fp32, or rounded to the dtype when
// narrow), random positions, distinct random (chunk, slot) targets, a quarter of the tokens not
// written; on the host and on the device.
struct RopeInputs {
  RopeInputs(std::mt19937_64& rng, DType dt, int d, bool narrow, bool interleaved, int hq, int hkv,
             int c, int chunks, int T, std::vector<float> values)
      : d(d), hq(hq), hkv(hkv), T(T), interleaved(interleaved), cols((hq + 2 * hkv) * d),
        qkv(std::move(values)), pos(T), chunk(T), slot(T), write(T), inv_freq(d / 2) {
    if (narrow) {
      for (float& x : qkv) x = RoundTo(dt, x);
    }
    std::vector<int> perm(chunks * c);
    for (int i = 0; i < chunks * c; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int t = 0; t < T; ++t) {
      pos[t] = static_cast<int32_t>(rng() % 5000);
      chunk[t] = perm[t] / c;
      slot[t] = perm[t] % c;
      write[t] = rng() % 4 != 0;
    }
    for (int i = 0; i < d / 2; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * i / d));
    qkv_d = std::make_unique<DeviceArray<float>>(qkv);
    qkv_narrow_d = std::make_unique<DeviceArray<uint16_t>>(ToDtype(dt, qkv));
    inv_d = std::make_unique<DeviceArray<float>>(inv_freq);
    pos_d = std::make_unique<DeviceArray<int32_t>>(pos);
    chunk_d = std::make_unique<DeviceArray<int32_t>>(chunk);
    slot_d = std::make_unique<DeviceArray<int32_t>>(slot);
    write_d = std::make_unique<DeviceArray<int32_t>>(write);
    q_d = std::make_unique<DeviceArray<uint16_t>>(size_t(T) * hq * d);
    p.qkv = narrow ? static_cast<const void*>(qkv_narrow_d->get()) : qkv_d->get();
    p.qkv_in_dtype = narrow;
    p.q_out = q_d->get();
    p.positions = pos_d->get();
    p.slot_chunk = chunk_d->get();
    p.slot_index = slot_d->get();
    p.write_kv = write_d->get();
    p.inv_freq = inv_d->get();
    p.tokens = T;
    p.num_q_heads = hq;
    p.interleaved = interleaved;
  }
  // Head h (q heads, then k heads, then v heads) of token t as it reached the kernel.
  const float* Head(int t, int h) const { return &qkv[size_t(t) * cols + size_t(h) * d]; }
  // Head h of token t rotated on the CPU, in double.
  std::vector<float> Rotated(int t, int h) const {
    const float* src = Head(t, h);
    std::vector<float> dst(src, src + d);
    for (int i = 0; i < d / 2; ++i) {
      const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + d / 2;
      const double ang = double(float(pos[t]) * inv_freq[i]);
      dst[a] = float(src[a] * std::cos(ang) - src[b] * std::sin(ang));
      dst[b] = float(src[a] * std::sin(ang) + src[b] * std::cos(ang));
    }
    return dst;
  }
  // Every q head rotated on the CPU, [T, hq, d].
  std::vector<float> WantQ() const {
    std::vector<float> want(size_t(T) * hq * d);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < hq; ++h) {
        const std::vector<float> r = Rotated(t, h);
        std::copy(r.begin(), r.end(), want.begin() + (size_t(t) * hq + h) * d);
      }
    }
    return want;
  }
  int d, hq, hkv, T;
  bool interleaved;
  int cols;
  std::vector<float> qkv;
  std::vector<int32_t> pos, chunk, slot, write;
  std::vector<float> inv_freq;
  std::unique_ptr<DeviceArray<float>> qkv_d, inv_d;
  std::unique_ptr<DeviceArray<uint16_t>> qkv_narrow_d, q_d;
  std::unique_ptr<DeviceArray<int32_t>> pos_d, chunk_d, slot_d, write_d;
  RopeKvParams p;  // everything but kv
};

TEST(CudaLayerKernels, RopeWritesQAndKvSlots) {
  BANYAN_SEEDED_RNG(rng);
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    for (bool interleaved : {false, true}) {
      // narrow: q | k | v arrive in the dtype (RopeKvParams::qkv_in_dtype), else fp32.
      for (int d : {8, 64, 128}) for (bool narrow : {false, true}) {
        SCOPED_TRACE(std::string(DTypeName(dt)) + " d" + std::to_string(d) +
                     (interleaved ? " interleaved" : " half") + (narrow ? " narrow" : ""));
        const int hq = 8, hkv = 2, c = 16, chunks = 9, T = 29;
        RopeInputs in(rng, dt, d, narrow, interleaved, hq, hkv, c, chunks, T,
                      Normal(size_t(T) * (hq + 2 * hkv) * d, rng));
        const int64_t v_off = int64_t{hkv} * c * d;
        DeviceArray<uint16_t> kv_d(size_t(chunks) * 2 * v_off);  // poisoned: unwritten stays NaN
        RopeKvParams p = in.p;
        p.kv = KvViewDev{kv_d.get(), 2 * v_off, v_off, c, hkv, d};
        ASSERT_TRUE(RopeWriteKv(dt, p, nullptr).ok());
        std::vector<float> want_kv, got_kv_all = FromDtype(dt, kv_d.Download()), got_kv;
        for (int t = 0; t < T; ++t) {
          for (int h = 0; h < hkv; ++h) {
            const int64_t koff = in.chunk[t] * 2 * v_off + (int64_t{h} * c + in.slot[t]) * d;
            if (!in.write[t]) {
              for (int x = 0; x < d; ++x) {
                ASSERT_TRUE(std::isnan(got_kv_all[koff + x])) << "skipped slot was written";
                ASSERT_TRUE(std::isnan(got_kv_all[koff + v_off + x]));
              }
              continue;
            }
            const std::vector<float> k = in.Rotated(t, hq + h);
            want_kv.insert(want_kv.end(), k.begin(), k.end());
            const float* v = in.Head(t, hq + hkv + h);
            want_kv.insert(want_kv.end(), v, v + d);
            got_kv.insert(got_kv.end(), got_kv_all.begin() + koff, got_kv_all.begin() + koff + d);
            got_kv.insert(got_kv.end(), got_kv_all.begin() + koff + v_off,
                          got_kv_all.begin() + koff + v_off + d);
          }
        }
        EXPECT_LT(RelErr(FromDtype(dt, in.q_d->Download()), in.WantQ()), Tol(dt));
        EXPECT_LT(RelErr(got_kv, want_kv), Tol(dt));
      }
    }
  }
}

TEST(CudaLayerKernels, SwiGlu) {
  BANYAN_SEEDED_RNG(rng);
  // The scalar path (hidden % 8 != 0: 777, 1028, 4), the 8-wide path, and more rows than one grid
  // holds. narrow: gate | up in the dtype (SwiGluParams::gate_up_in_dtype), else fp32.
  for (auto [rows, hidden] : {std::pair{13, 777}, std::pair{13, 1028}, std::pair{13, 11008},
                              std::pair{70000, 4}, std::pair{70000, 8}})
  for (DType dt : {DType::kBf16, DType::kFp16})
  for (bool narrow : {false, true}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << hidden << (narrow ? " narrow" : ""));
    std::vector<float> gu = Normal(size_t(rows) * 2 * hidden, rng, 3.0f);
    if (narrow) {
      for (float& x : gu) x = RoundTo(dt, x);
    }
    DeviceArray<float> gu_d(gu);
    DeviceArray<uint16_t> gu_narrow_d(ToDtype(dt, gu));
    DeviceArray<uint16_t> out_d(std::vector<uint16_t>(size_t(rows) * hidden, 0xFFFF));  // NaN
    SwiGluParams sp{gu_d.get(), out_d.get(), rows, hidden, narrow};
    if (narrow) sp.gate_up = gu_narrow_d.get();
    ASSERT_TRUE(SwiGlu(dt, sp, nullptr).ok());
    std::vector<float> want(size_t(rows) * hidden);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < hidden; ++i) {
        const double g = gu[size_t(r) * 2 * hidden + i], u = gu[size_t(r) * 2 * hidden + hidden + i];
        want[size_t(r) * hidden + i] = float(g / (1 + std::exp(-g)) * u);
      }
    }
    EXPECT_LT(RelErr(FromDtype(dt, out_d.Download()), want), Tol(dt));
  }
}

// In place on fp32, so the poison is a NaN row past the last token that must stay untouched;
// the reference is the formula in double.
TEST(CudaLayerKernels, QkvBiasNormMatchesFormula) {
  BANYAN_SEEDED_RNG(rng);
  struct Shape {
    int head_dim, hq, hkv, tokens;
    bool bias, norm;
  };
  for (const Shape& sh : {Shape{64, 4, 2, 37, true, false}, Shape{128, 8, 2, 19, false, true},
                          Shape{128, 4, 4, 5, true, true}, Shape{32, 16, 4, 70, true, true},
                          Shape{40, 5, 1, 9, true, true}, Shape{256, 2, 1, 3, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << sh.head_dim << " heads " << sh.hq << "/"
                                      << sh.hkv << " bias " << sh.bias << " norm " << sh.norm);
    const int d = sh.head_dim, heads = sh.hq + 2 * sh.hkv;
    const size_t row = size_t(heads) * d;
    std::vector<float> qkv = Normal(row * sh.tokens, rng, 2.0f);
    const std::vector<float> bias = Normal(row, rng, 0.5f);
    std::vector<float> qn = Normal(d, rng, 0.2f), kn = Normal(d, rng, 0.2f);
    for (float& x : qn) x += 1.0f;
    for (float& x : kn) x += 1.0f;
    DeviceArray<float> qkv_d(row * (sh.tokens + 1));  // poisoned, then all but the last row set
    ASSERT_EQ(cudaMemcpy(qkv_d.get(), qkv.data(), qkv.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    DeviceArray<float> bias_d(bias), qn_d(qn), kn_d(kn);
    QkvBiasNormParams p;
    p.qkv = qkv_d.get();
    p.bias = sh.bias ? bias_d.get() : nullptr;
    p.q_norm = sh.norm ? qn_d.get() : nullptr;
    p.k_norm = sh.norm ? kn_d.get() : nullptr;
    p.tokens = sh.tokens;
    p.num_q_heads = sh.hq;
    p.num_kv_heads = sh.hkv;
    p.head_dim = d;
    p.eps = 1e-6f;
    ASSERT_TRUE(QkvBiasNorm(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = qkv_d.Download();
    std::vector<float> want(qkv.size());
    for (int t = 0; t < sh.tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const size_t off = size_t(t) * row + size_t(h) * d;
        std::vector<double> v(d);
        double ss = 0;
        for (int i = 0; i < d; ++i) {
          v[i] = double{qkv[off + i]} + (sh.bias ? bias[size_t(h) * d + i] : 0.0);
          ss += v[i] * v[i];
        }
        const bool normed = sh.norm && h < sh.hq + sh.hkv;
        const std::vector<float>& g = h < sh.hq ? qn : kn;
        const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
        for (int i = 0; i < d; ++i) want[off + i] = float(normed ? v[i] * inv * g[i] : v[i]);
      }
    }
    EXPECT_LT(RelErr(std::vector<float>(got.begin(), got.begin() + want.size()), want), 1e-5);
    for (size_t i = want.size(); i < got.size(); ++i) {
      ASSERT_TRUE(std::isnan(got[i])) << "wrote past the last token at " << i;
    }
  }
  QkvBiasNormParams bad;
  bad.head_dim = 512;
  EXPECT_EQ(QkvBiasNorm(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// RoPE + KV write into an FP8 cache (kernels/kv_fp8.h): q as for a 16-bit cache; every V row's
// codes and exponent bit for bit what the host rule (with the model library's E4M3 rounding)
// makes of the same input; every K row's exponent the host rule's of the CPU rotation (in
// double, give or take one at a boundary) and its dequantized values within a few code steps of it (the device's sincosf and
// the CPU's rotation differ in the last bits, which can move a value across a rounding
// boundary); slots not written keep their poison.
TEST(CudaLayerKernels, RopeWritesFp8Kv) {
  BANYAN_SEEDED_RNG(rng);
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    for (bool interleaved : {false, true}) {
      for (int d : {8, 64, 128, 256}) for (bool narrow : {false, true}) {
        SCOPED_TRACE(std::string(DTypeName(dt)) + " d" + std::to_string(d) +
                     (interleaved ? " interleaved" : " half") + (narrow ? " narrow" : ""));
        const int hq = 4, hkv = 2, c = 16, chunks = 7, T = 23;
        // Rows of very different magnitudes, so that exponents span a wide range: 2^-20..2^20
        // in bf16, 2^-10..2^10 in fp16 (whose largest value is about 2^16).
        std::vector<float> values = Normal(size_t(T) * (hq + 2 * hkv) * d, rng);
        const int half_span = dt == DType::kFp16 ? 10 : 20;
        for (int r = 0; r < T * (hq + 2 * hkv); ++r) {
          const float f =
              std::ldexp(1.0f, static_cast<int>(rng() % (2 * half_span + 1)) - half_span);
          for (int x = 0; x < d; ++x) values[size_t(r) * d + x] *= f;
        }
        RopeInputs in(rng, dt, d, narrow, interleaved, hq, hkv, c, chunks, T, std::move(values));
        const KvFp8Layout l = KvFp8LayoutOf(hkv, c, d);
        DeviceArray<uint8_t> kv_d(size_t(chunks) * l.chunk_stride);  // poisoned: 0xff bytes
        RopeKvParams p = in.p;
        p.kv = KvViewDev{kv_d.get(), l.chunk_stride, l.v_offset, c, hkv, d, l.scale_offset};
        ASSERT_TRUE(RopeWriteKv(dt, p, nullptr).ok());
        const std::vector<uint8_t> got = kv_d.Download();
        std::vector<float> got_k, want_k;
        std::vector<uint8_t> codes(d);
        int rows_checked = 0;
        for (int t = 0; t < T; ++t) {
          for (int h = 0; h < hkv; ++h) {
            const int64_t row = int64_t{h} * c + in.slot[t];
            const int64_t koff = in.chunk[t] * l.chunk_stride + row * d;
            const int64_t eoff = in.chunk[t] * l.chunk_stride + l.scale_offset + row;
            if (!in.write[t]) {
              for (int x = 0; x < d; ++x) {
                ASSERT_EQ(got[koff + x], 0xff) << "skipped slot was written";
                ASSERT_EQ(got[koff + l.v_offset + x], 0xff);
              }
              ASSERT_EQ(got[eoff], 0xff);
              continue;
            }
            ++rows_checked;
            // V: the input as it reached the kernel, bit for bit.
            const int ev = QuantizeKvRowFp8(in.Head(t, hq + hkv + h), d, codes.data(),
                                            model::FloatToFp8E4M3);
            EXPECT_EQ(static_cast<int8_t>(got[eoff + int64_t{hkv} * c]), ev) << "V exponent, t " << t;
            for (int x = 0; x < d; ++x) {
              ASSERT_EQ(got[koff + l.v_offset + x], codes[x]) << "V code " << x << ", t " << t;
            }
            // K: against the CPU rotation (one exponent apart only where the row's amax sits at
            // a power-of-two boundary).
            const std::vector<float> k = in.Rotated(t, hq + h);
            const int ek = QuantizeKvRowFp8(k.data(), d, codes.data(), model::FloatToFp8E4M3);
            EXPECT_LE(std::abs(static_cast<int8_t>(got[eoff]) - ek), 1) << "K exponent, t " << t;
            for (int x = 0; x < d; ++x) {
              want_k.push_back(std::ldexp(model::Fp8E4M3ToFloat(codes[x]), ek));
              got_k.push_back(std::ldexp(model::Fp8E4M3ToFloat(got[koff + x]),
                                         static_cast<int8_t>(got[eoff])));
            }
          }
        }
        EXPECT_GT(rows_checked, 0);
        EXPECT_LT(RelErr(FromDtype(dt, in.q_d->Download()), in.WantQ()), Tol(dt));
        // Same codes up to rounding-boundary flips (one code step, 2^-3 relative, at most).
        EXPECT_LT(RelErr(got_k, want_k), 0.02);
      }
    }
  }
}

TEST(CudaLayerKernels, CopyKvSlotsFp8) {
  BANYAN_SEEDED_RNG(rng);
  const int layers = 3, chunks = 5, hkv = 2, c = 16;
  for (const int d : {24, 64}) {  // byte copies, 16-byte copies
    const KvFp8Layout l = KvFp8LayoutOf(hkv, c, d);
    const int64_t layer_stride = chunks * l.chunk_stride;
    std::vector<uint8_t> kv(size_t(layers) * layer_stride);
    for (auto& x : kv) x = static_cast<uint8_t>(rng());
    DeviceArray<uint8_t> kv_d(kv);
    CopyKvSlotsParams p;
    p.kv = KvViewDev{kv_d.get(), l.chunk_stride, l.v_offset, c, hkv, d, l.scale_offset};
    p.layer_stride = layer_stride;
    p.num_layers = layers;
    p.src = 3;
    p.dst = 1;
    p.slot_begin = 2;
    p.slot_end = 13;
    p.dst_begin = 4;
    ASSERT_TRUE(CopyKvSlots(p, nullptr).ok());
    std::vector<uint8_t> want = kv;
    for (int lay = 0; lay < layers; ++lay) {
      for (int run = 0; run < 2 * hkv; ++run) {
        for (int s = 2; s < 13; ++s) {
          const int64_t base = lay * layer_stride + int64_t{run} * c * d;
          for (int x = 0; x < d; ++x) {
            want[base + (4 + s - 2) * d + x + l.chunk_stride] = kv[base + s * d + x + 3 * l.chunk_stride];
          }
          const int64_t e = lay * layer_stride + l.scale_offset + int64_t{run} * c;
          want[e + l.chunk_stride + 4 + s - 2] = kv[e + 3 * l.chunk_stride + s];
        }
      }
    }
    EXPECT_EQ(kv_d.Download(), want) << "d " << d;
  }
}

TEST(CudaLayerKernels, CopyKvSlots) {
  BANYAN_SEEDED_RNG(rng);
  const int layers = 3, chunks = 5, hkv = 2, c = 16, d = 24;
  const int64_t v_off = int64_t{hkv} * c * d, chunk_stride = 2 * v_off;
  const int64_t layer_stride = chunks * chunk_stride;
  // The same slots (a split's copy), and slots moved to another offset (a candidate's KV).
  for (const int dst_begin : {5, 0, 7}) {
    std::vector<uint16_t> kv(size_t(layers) * layer_stride);
    for (auto& x : kv) x = static_cast<uint16_t>(rng() & 0x3fff);
    DeviceArray<uint16_t> kv_d(kv);
    CopyKvSlotsParams p;
    p.kv = KvViewDev{kv_d.get(), chunk_stride, v_off, c, hkv, d};
    p.layer_stride = layer_stride;
    p.num_layers = layers;
    p.src = 3;
    p.dst = 1;
    p.slot_begin = 5;
    p.slot_end = 14;
    p.dst_begin = dst_begin;
    ASSERT_TRUE(CopyKvSlots(p, nullptr).ok());
    std::vector<uint16_t> want = kv;
    for (int l = 0; l < layers; ++l) {
      for (int run = 0; run < 2 * hkv; ++run) {
        for (int s = 5; s < 14; ++s) {
          for (int x = 0; x < d; ++x) {
            const int64_t base = l * layer_stride + int64_t{run} * c * d + x;
            want[base + (dst_begin + s - 5) * d + 1 * chunk_stride] =
                kv[base + s * d + 3 * chunk_stride];
          }
        }
      }
    }
    EXPECT_EQ(kv_d.Download(), want) << "dst_begin " << dst_begin;
    p.dst_begin = c - 8;  // would run past the chunk's end
    EXPECT_EQ(CopyKvSlots(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CudaLayerKernels, ArgmaxLowestIdOnTiesNanIgnored) {
  BANYAN_SEEDED_RNG(rng);
  const int rows = 1024, vocab = 32001;
  std::vector<float> logits = Normal(size_t(rows) * vocab, rng);
  std::vector<int32_t> want(rows);
  for (int r = 0; r < rows; ++r) {
    float* row = &logits[size_t(r) * vocab];
    const int a = static_cast<int>(rng() % vocab), b = static_cast<int>(rng() % vocab);
    row[a] = row[b] = 100.0f;  // a tie
    int nan_at = static_cast<int>(rng() % vocab);
    while (nan_at == a || nan_at == b) nan_at = (nan_at + 1) % vocab;
    row[nan_at] = std::nanf("");
    want[r] = std::min(a, b);
    if (r == 7) {  // a NaN larger than anything does not win
      for (int i = 0; i < vocab; ++i) row[i] = -INFINITY;
      row[vocab - 1] = -1.0f;
      row[3] = std::nanf("");
      want[r] = vocab - 1;
    }
    if (r == 8) {
      for (int i = 0; i < vocab; ++i) row[i] = std::nanf("");
      want[r] = -1;
    }
  }
  DeviceArray<float> l_d(logits);
  DeviceArray<int32_t> out_d(rows);
  ASSERT_TRUE(ArgmaxRows(ArgmaxParams{l_d.get(), out_d.get(), rows, vocab}, nullptr).ok());
  EXPECT_EQ(out_d.Download(), want);
}

// DummyFill reproduces MakeDummyWeights bit for bit (in fp32; in the dtype after rounding).
TEST(CudaWeightKernels, DummyFillEqualsHostDummyWeights) {
  BANYAN_SEEDED_RNG(rng);
  auto cfg = model::NamedShapeConfig("tiny-d64-gqa4");
  ASSERT_TRUE(cfg.ok());
  cfg->vocab_size = 1 << 14;  // the embedding spans more than one 2^20-element stream
  cfg->dim = 128;
  const uint64_t seed = rng();
  const model::ModelWeights w = model::MakeDummyWeights(*cfg, seed);
  const auto slots = model::ListTensorSlots(*cfg);
  for (size_t k = 0; k < slots.size(); ++k) {
    const model::Tensor& t = model::SlotTensor(w, slots[k]);
    const bool is_norm = t.shape.size() == 1;
    DeviceArray<float> f32(t.data.size());
    DummyFillParams p;
    p.dst = f32.get();
    p.n = t.numel();
    p.seed = seed;
    p.slot = static_cast<int32_t>(k);
    p.scale = is_norm ? 0.05f : 1.0f / std::sqrt(static_cast<float>(t.shape.back()));
    p.offset = is_norm ? 1.0f : 0.0f;
    p.to_f32 = true;
    ASSERT_TRUE(DummyFill(DType::kBf16, p, nullptr).ok());
    ASSERT_EQ(f32.Download(), t.data) << model::SlotName(slots[k]);
    DeviceArray<uint16_t> bf(t.data.size());
    p.dst = bf.get();
    p.to_f32 = false;
    ASSERT_TRUE(DummyFill(DType::kBf16, p, nullptr).ok());
    ASSERT_EQ(bf.Download(), ToDtype(DType::kBf16, t.data)) << model::SlotName(slots[k]);
  }
}

TEST(CudaWeightKernels, ConvertFromF32RoundsToNearest) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<float> v = Normal(100003, rng, 10.0f);
  DeviceArray<float> v_d(v);
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    DeviceArray<uint16_t> out(v.size());
    ASSERT_TRUE(ConvertFromF32(dt, v_d.get(), static_cast<int64_t>(v.size()), out.get(), nullptr).ok());
    EXPECT_EQ(out.Download(), ToDtype(dt, v)) << DTypeName(dt);
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
