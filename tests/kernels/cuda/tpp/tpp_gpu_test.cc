// GPU differential tests of TPP decode attention and its paged call against the CPU reference
// (kernels/cpu/tpp_attention.h), over random prefix trees with hierarchical sharing: head dims
// with a compiled family (64, 128) on every phase-1 and phase-2 kernel, others (8, 96) on the
// generic phase 2, with small pieces so that rows are split and merged.
//
// - Inputs (q, K, V) are drawn fresh every run (seed printed; BANYAN_TEST_SEED pins it), rounded
//   to the kernel dtype, and the CPU reference runs in fp32 on the same rounded values. Shapes
//   marked _kv8 keep K / V in an FP8 cache (kernels/kv_fp8.h): every row quantized on the host,
//   the reference reading the dequantized values, which the kernels reproduce exactly.
// - The output and the workspace are poisoned with NaN first; NaN never passes.
// - Tolerance, as a relative Frobenius norm ||gpu - cpu|| / ||cpu|| over the whole output:
//     bf16: 1e-2  (output rounding alone is ~1.5e-3; P is rounded to bf16 for the P.V MMA)
//     fp16: 2e-3  (output rounding ~2e-4; P rounded to fp16)
// Without a CUDA device the binary runs nothing and exits 77, skipped (tests/testing/gpu_test_main.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/tpp_attention.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "kernels/kv_fp8.h"
#include "engine/plan_view.h"
#include "kvcache/attention_plan.h"
#include "kvcache/prefix_tree.h"
#include "model/dtype.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cuda::tpp {
namespace {

using kvcache::AttentionPlan;
using kvcache::PrefixTree;
using kvcache::SeqId;

#define CUDA_OK(expr)                                                         \
  do {                                                                        \
    cudaError_t e_ = (expr);                                                  \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);    \
  } while (0)

uint16_t ToBits(float x, DType dt) {
  if (dt == DType::kBf16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
  return static_cast<__half_raw>(__float2half_rn(x)).x;
}

float FromBits(uint16_t b, DType dt) {
  if (dt == DType::kBf16) {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

// Random values rounded to the dtype: `bits` for the device, `vals` (exactly representable) for
// the CPU reference.
void FillRounded(std::mt19937_64& rng, size_t n, float stddev, DType dt,
                 std::vector<uint16_t>* bits, std::vector<float>* vals) {
  std::normal_distribution<float> nd(0.0f, stddev);
  bits->resize(n);
  vals->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = ToBits(nd(rng), dt);
    (*vals)[i] = FromBits((*bits)[i], dt);
  }
}

template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  explicit DevBuf(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

struct Shape {
  int head_dim;
  int kv_heads;
  int gqa;
  int chunk;
  DType dtype;
  bool kv8 = false;  // an FP8 KV cache (kernels/kv_fp8.h)
};

std::string Name(const Shape& s) {
  return absl::StrCat("d", s.head_dim, "_kv", s.kv_heads, "_g", s.gqa, "_c", s.chunk,
                      s.dtype == DType::kBf16 ? "_bf16" : "_fp16", s.kv8 ? "_kv8" : "");
}

double Tolerance(DType dt) { return dt == DType::kBf16 ? 1e-2 : 2e-3; }

// One populated tree + KV pool + queries, on the host and on the device.
class Fixture {
 public:
  Fixture(const Shape& s, int num_chunks) : s_(s), pool_(*kvcache::ChunkPool::Create(num_chunks, s.chunk)) {
    tree_ = std::make_unique<PrefixTree>(&pool_);
    kv_.chunk_size = s.chunk;
    kv_.num_kv_heads = s.kv_heads;
    kv_.head_dim = s.head_dim;
    kv_.v_offset = static_cast<int64_t>(s.kv_heads) * s.chunk * s.head_dim;
    kv_.chunk_stride = 2 * kv_.v_offset;
    host_v_offset_ = kv_.v_offset;  // the reference's fp32 copy keeps the 16-bit layout
    host_chunk_stride_ = kv_.chunk_stride;
    if (s.kv8) {
      const KvFp8Layout l = KvFp8LayoutOf(s.kv_heads, s.chunk, s.head_dim);
      kv_.v_offset = l.v_offset;
      kv_.chunk_stride = l.chunk_stride;
      kv_.scale_offset = l.scale_offset;
    }
    num_chunks_ = num_chunks;
  }
  PrefixTree& tree() { return *tree_; }
  int hq() const { return s_.kv_heads * s_.gqa; }

  // Random K/V for every chunk and q for `rows`; uploads both.
  void FillData(std::mt19937_64& rng, const std::vector<SeqId>& rows) {
    rows_ = rows;
    std::vector<uint16_t> bits;
    if (s_.kv8) {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      kv_host_.resize(static_cast<size_t>(num_chunks_) * host_chunk_stride_);
      for (float& x : kv_host_) x = nd(rng);
      kv_dev_ = std::make_unique<DevBuf<uint16_t>>((num_chunks_ * kv_.chunk_stride + 1) / 2);
      ASSERT_NE(kv_dev_->p, nullptr);
      UploadKv8();
    } else {
      FillRounded(rng, static_cast<size_t>(num_chunks_) * kv_.chunk_stride, 1.0f, s_.dtype, &bits,
                  &kv_host_);
      kv_dev_ = std::make_unique<DevBuf<uint16_t>>(bits.size());
      ASSERT_NE(kv_dev_->p, nullptr);
      CUDA_OK(cudaMemcpy(kv_dev_->p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    }
    const size_t qn = rows.size() * hq() * s_.head_dim;
    FillRounded(rng, qn, 1.5f, s_.dtype, &bits, &q_host_);
    q_dev_ = std::make_unique<DevBuf<uint16_t>>(qn);
    out_dev_ = std::make_unique<DevBuf<uint16_t>>(qn);
    ASSERT_NE(q_dev_->p, nullptr);
    ASSERT_NE(out_dev_->p, nullptr);
    CUDA_OK(cudaMemcpy(q_dev_->p, bits.data(), qn * 2, cudaMemcpyHostToDevice));
  }

  // Scales the K row of a random `fraction` of the pool's (chunk, kv head, slot) entries by a
  // factor in [3, max_scale] (rounded to the dtype again) and uploads the pool: scores that jump
  // far above the running max in later tiles, so the kernels rescale O after the first tile
  // (with lazy rescaling, random data almost never does).
  void SpikeKeys(std::mt19937_64& rng, double fraction, float max_scale) {
    std::bernoulli_distribution pick(fraction);
    std::uniform_real_distribution<float> scale(3.0f, max_scale);
    const int d = s_.head_dim;
    for (int c = 0; c < num_chunks_; ++c) {
      for (int h = 0; h < s_.kv_heads; ++h) {
        for (int j = 0; j < s_.chunk; ++j) {
          if (!pick(rng)) continue;
          const float f = scale(rng);
          float* k = kv_host_.data() + c * host_chunk_stride_ + (int64_t{h} * s_.chunk + j) * d;
          for (int i = 0; i < d; ++i) {
            k[i] = s_.kv8 ? k[i] * f : FromBits(ToBits(k[i] * f, s_.dtype), s_.dtype);
          }
        }
      }
    }
    if (s_.kv8) {
      UploadKv8();
      return;
    }
    std::vector<uint16_t> bits(kv_host_.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = ToBits(kv_host_[i], s_.dtype);
    CUDA_OK(cudaMemcpy(kv_dev_->p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  }

  // CPU reference (fp32, exact TPP) for the current rows.
  std::vector<float> Reference(const AttentionPlan& plan) {
    KvView kv;
    kv.base = kv_host_.data();
    kv.chunk_stride = host_chunk_stride_;
    kv.v_offset = host_v_offset_;
    kv.chunk_size = kv_.chunk_size;
    kv.num_kv_heads = kv_.num_kv_heads;
    kv.head_dim = kv_.head_dim;
    std::vector<float> out(q_host_.size());
    std::vector<float> po(static_cast<size_t>(plan.num_partials) * hq() * s_.head_dim);
    std::vector<float> pl(static_cast<size_t>(plan.num_partials) * hq());
    DecodeAttentionParams p;
    p.q = q_host_.data();
    p.out = out.data();
    p.kv = kv;
    p.plan = engine::ViewOf(plan);
    p.num_q_heads = hq();
    p.scale = 1.0f / std::sqrt(static_cast<float>(s_.head_dim));
    p.partial_o = po.data();
    p.partial_lse = pl.data();
    cpu::TppDecodeAttention(p);
    return out;
  }

  // Runs the GPU kernels for `plan` (poisoned output and workspace) and returns the output.
  // paged: PagedDecodeAttention (the plan must have no segments).
  std::vector<float> RunGpu(const AttentionPlan& plan, const TppOptions& options, bool paged,
                            TppWorkPlan* out_plan = nullptr) {
    TppProblem pr{hq(), s_.kv_heads, s_.head_dim, s_.chunk};
    auto wp = TppWorkPlan::Build(engine::ViewOf(plan), pr, options);
    EXPECT_TRUE(wp.ok()) << wp.status();
    if (!wp.ok()) return {};
    DevBuf<int32_t> image(wp->image().size());
    DevBuf<uint8_t> ws(wp->workspace_bytes());
    EXPECT_NE(image.p, nullptr);
    EXPECT_NE(ws.p, nullptr);
    EXPECT_EQ(cudaMemcpy(image.p, wp->image().data(), wp->image_bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemset(ws.p, 0xff, wp->workspace_bytes()), cudaSuccess);  // NaN
    EXPECT_EQ(cudaMemset(out_dev_->p, 0xff, out_dev_->n * 2), cudaSuccess);  // NaN (bf16, fp16)
    TppRunArgs a = Args(image.p, ws.p);
    absl::Status st = paged ? PagedDecodeAttention(*wp, a, nullptr) : TppDecodeAttention(*wp, a, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
    if (out_plan) *out_plan = *wp;
    return Download();
  }

  TppRunArgs Args(const int32_t* image, void* ws) const {
    TppRunArgs a;
    a.q = q_dev_->p;
    a.out = out_dev_->p;
    a.kv = kv_;
    a.kv.base = kv_dev_->p;
    a.dtype = s_.dtype;
    a.scale = 1.0f / std::sqrt(static_cast<float>(s_.head_dim));
    a.image = image;
    a.workspace = ws;
    return a;
  }

  std::vector<float> Download() {
    std::vector<uint16_t> bits(out_dev_->n);
    EXPECT_EQ(cudaMemcpy(bits.data(), out_dev_->p, bits.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = FromBits(bits[i], s_.dtype);
    return out;
  }

  uint16_t* out_dev() { return out_dev_->p; }

 private:
  // FP8 cache: every K / V row of kv_host_ quantized by the rule of kernels/kv_fp8.h (with the
  // model library's E4M3 rounding, not the device's), its codes and exponent uploaded, and the
  // row replaced by its dequantized values, which the CPU reference then reads.
  void UploadKv8() {
    const int d = s_.head_dim, hkv = s_.kv_heads, c = s_.chunk;
    std::vector<uint8_t> bytes(static_cast<size_t>(num_chunks_) * kv_.chunk_stride, 0);
    for (int ch = 0; ch < num_chunks_; ++ch) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < hkv; ++h) {
          for (int j = 0; j < c; ++j) {
            const int64_t row = int64_t{h} * c + j;
            float* x = kv_host_.data() + ch * host_chunk_stride_ + kv * host_v_offset_ + row * d;
            uint8_t* codes = bytes.data() + ch * kv_.chunk_stride + kv * kv_.v_offset + row * d;
            const int e = QuantizeKvRowFp8(x, d, codes, model::FloatToFp8E4M3);
            for (int i = 0; i < d; ++i) x[i] = std::ldexp(model::Fp8E4M3ToFloat(codes[i]), e);
            bytes[ch * kv_.chunk_stride + kv_.scale_offset + int64_t{kv} * hkv * c + row] =
                static_cast<uint8_t>(static_cast<int8_t>(e));
          }
        }
      }
    }
    CUDA_OK(cudaMemcpy(kv_dev_->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }

  Shape s_;
  kvcache::ChunkPool pool_;
  std::unique_ptr<PrefixTree> tree_;
  KvViewDev kv_;
  int64_t host_chunk_stride_ = 0, host_v_offset_ = 0;
  int num_chunks_ = 0;
  std::vector<SeqId> rows_;
  std::vector<float> kv_host_, q_host_;
  std::unique_ptr<DevBuf<uint16_t>> kv_dev_, q_dev_, out_dev_;
};

// ||got - want|| / ||want||; NaN or Inf anywhere is infinite error.
double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Rows: a global prefix, `groups` group prefixes, private tails in [1, tail_max]; exactly
// `batch` rows. Lengths are random, so not multiples of the chunk size.
std::vector<SeqId> BuildHierarchical(PrefixTree& tree, std::mt19937_64& rng, int batch,
                                     int global_len, int groups, int group_len, int tail_max) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = uni(0, 1 << 20);
    return t;
  };
  std::vector<int32_t> global = tokens(global_len);
  std::vector<std::vector<int32_t>> gp(groups);
  for (auto& g : gp) g = tokens(uni(group_len / 2, group_len));
  std::vector<SeqId> out;
  for (int r = 0; r < batch; ++r) {
    std::vector<int32_t> seq = global;
    const auto& g = gp[static_cast<size_t>(r) * groups / batch];
    seq.insert(seq.end(), g.begin(), g.end());
    auto tail = tokens(uni(1, tail_max));
    seq.insert(seq.end(), tail.begin(), tail.end());
    auto placed = tree.Insert("", seq);
    EXPECT_TRUE(placed.ok()) << placed.status();
    if (!placed.ok()) return out;
    out.push_back(placed->seq);
  }
  return out;
}

// Where phase 1 runs on wgmma by default (sm_90 devices: warp-specialised for 128-query tiles),
// also checks the mma.sync phase 1 and the wgmma kernel without warp specialisation.
void CheckOtherPhase1Paths(Fixture& f, const AttentionPlan& shared, const TppOptions& opt,
                           const std::vector<float>& want, double tol, const std::string& label) {
  if (!TppPhase1WgmmaAvailable() || opt.p1_wgmma >= 0) return;
  for (int path : {0, 2}) {
    TppOptions other = opt;
    other.p1_wgmma = path;
    EXPECT_LT(RelErr(f.RunGpu(shared, other, false), want), tol)
        << label << " tpp, phase-1 path " << path << " (TppOptions::p1_wgmma)";
  }
}

// Phase 2 forced onto each kernel (TppOptions::p2_mma / p2_warp: CUDA cores, one warp per head,
// tensor cores where g >= 2; the default picks by group size and tail length), through TPP over
// the shared plan and through the paged call over the unshared one.
void CheckEveryPhase2Kernel(Fixture& f, const AttentionPlan& shared, const AttentionPlan& plain,
                            const Shape& s, const TppOptions& opt, const std::vector<float>& want,
                            double tol, const std::string& label) {
  // Batches of more than 512 rows run the default choice only (at 2,048 rows: the warp kernel
  // for MHA, tensor cores for GQA 8); every kernel is forced on the smaller cases, which keeps
  // the suite short.
  if (opt.p2_mma >= 0 || opt.p2_warp >= 0 || plain.num_rows() > 512) return;
  if (!TppHasCompiledFamily(s.head_dim)) return;  // one phase-2 kernel: CheckGenericPieces
  const std::pair<Phase2Path, const char*> paths[] = {
      {Phase2Path::kCudaCores, "CUDA cores"},
      {Phase2Path::kWarpPerHead, "a warp per head"},
      {Phase2Path::kTensorCores, "tensor cores"}};
  for (const auto& [path, name] : paths) {
    if (path == Phase2Path::kTensorCores && s.gqa < 2) continue;
    TppOptions other = opt;
    other.p2_mma = path == Phase2Path::kTensorCores ? 1 : 0;
    other.p2_warp = path == Phase2Path::kWarpPerHead ? 1 : 0;
    TppWorkPlan wp;
    EXPECT_LT(RelErr(f.RunGpu(shared, other, false, &wp), want), tol)
        << label << " tpp, phase 2 on " << name;
    EXPECT_TRUE(wp.p2_path() == path || wp.num_p2_items() == 0) << label << " " << name;
    EXPECT_LT(RelErr(f.RunGpu(plain, other, true), want), tol)
        << label << " paged, phase 2 on " << name;
  }
}

// Head dims without a compiled family (TPP's generic phase 2): no phase-1 items, and rows also
// cut into pieces of at most 48 tokens (not a multiple of any chunk size here, so pieces cut
// spans and long rows merge many states), over the shared plan and the unshared one.
void CheckGenericPieces(Fixture& f, const AttentionPlan& shared, const AttentionPlan& plain,
                        const Shape& s, const TppOptions& opt, const std::vector<float>& want,
                        double tol, const std::string& label) {
  if (TppHasCompiledFamily(s.head_dim)) return;
  TppOptions small = opt;
  small.p2_max_split_tokens = 48;
  for (const AttentionPlan* plan : {&shared, &plain}) {
    for (const TppOptions& o : {opt, small}) {
      TppWorkPlan wp;
      EXPECT_LT(RelErr(f.RunGpu(*plan, o, plan == &plain, &wp), want), tol)
          << label << " generic phase 2, " << (plan == &shared ? "shared" : "unshared")
          << " plan, pieces of at most " << o.p2_max_split_tokens << " tokens (0: default)";
      EXPECT_EQ(wp.num_p1_items(), 0) << label;
      EXPECT_TRUE(wp.p2_path() == Phase2Path::kGeneric || wp.num_p2_items() == 0) << label;
    }
  }
}

// Checks tpp (share plan; phase 1 on both tensor-core paths where the device has both) and
// paged (no-share plan) against the CPU reference.
void CheckBoth(Fixture& f, const std::vector<SeqId>& rows, const Shape& s, const TppOptions& opt,
               const std::string& label, bool expect_segments) {
  AttentionPlan shared = kvcache::BuildAttentionPlan(f.tree(), rows, {.share = true});
  AttentionPlan plain = kvcache::BuildAttentionPlan(f.tree(), rows, {.share = false});
  if (expect_segments) {
    EXPECT_GT(shared.num_segments(), 0) << label;
  }
  const std::vector<float> want = f.Reference(shared);
  const double tol = Tolerance(s.dtype);
  TppWorkPlan wp;
  const double e_tpp = RelErr(f.RunGpu(shared, opt, false, &wp), want);
  EXPECT_LT(e_tpp, tol) << label << " tpp: segments " << shared.num_segments() << ", p1 items "
                        << wp.num_p1_items() << " (block m " << wp.p1_block_m() << ", splits <= "
                        << wp.max_p1_splits() << "), p2 items " << wp.num_p2_items()
                        << ", merge rows " << wp.num_merge_rows();
  const double e_paged = RelErr(f.RunGpu(plain, opt, true), want);
  EXPECT_LT(e_paged, tol) << label << " paged";
  CheckOtherPhase1Paths(f, shared, opt, want, tol, label);
  CheckEveryPhase2Kernel(f, shared, plain, s, opt, want, tol, label);
  CheckGenericPieces(f, shared, plain, s, opt, want, tol, label);
}

class TppGpuRandomTreeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(TppGpuRandomTreeTest, MatchesCpuReference) {
  const Shape s = GetParam();
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 4; ++trial) {
    Fixture f(s, 64000 / s.chunk);
    testing::RandomTreeSpec spec;
    spec.num_groups = 1 + 2 * trial;
    spec.rows_per_group_max = 6;
    spec.global_prefix_min = trial == 0 ? 0 : 1;
    spec.global_prefix_max = 400;
    spec.group_prefix_max = 150;
    spec.tail_max = 100;
    auto seqs = testing::BuildRandomTree(f.tree(), rng, spec);
    ASSERT_FALSE(seqs.empty());
    std::vector<SeqId> rows = f.tree().DfsOrder();
    if (trial == 3) std::shuffle(rows.begin(), rows.end(), rng);  // non-DFS: still exact
    f.FillData(rng, rows);
    TppOptions opt;
    if (trial == 0) opt.defer_merge = 1;  // every row with segments through the merge kernel
    if (trial == 1) opt.p1_block_m = 128;
    if (trial == 2) opt.pdl = false;
    CheckBoth(f, rows, s, opt, "trial " + std::to_string(trial), false);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, TppGpuRandomTreeTest,
    ::testing::Values(Shape{64, 2, 1, 16, DType::kBf16}, Shape{64, 2, 4, 64, DType::kFp16},
                      Shape{64, 1, 8, 32, DType::kBf16}, Shape{128, 2, 1, 64, DType::kFp16},
                      Shape{128, 2, 4, 16, DType::kBf16}, Shape{128, 1, 8, 64, DType::kBf16},
                      Shape{128, 2, 8, 32, DType::kFp16}, Shape{64, 2, 1, 128, DType::kFp16},
                      Shape{8, 2, 1, 16, DType::kBf16}, Shape{96, 2, 4, 32, DType::kFp16},
                      // An FP8 KV cache on every kernel family: MHA and GQA 4 / 8 at 64 and 128,
                      // and the generic head dims.
                      Shape{64, 2, 1, 16, DType::kBf16, true}, Shape{64, 2, 4, 64, DType::kFp16, true},
                      Shape{128, 1, 8, 64, DType::kBf16, true}, Shape{128, 2, 4, 32, DType::kBf16, true},
                      Shape{8, 2, 1, 16, DType::kBf16, true}, Shape{96, 2, 4, 32, DType::kFp16, true}),
    [](const auto& info) { return Name(info.param); });

// The per-row decode kernel (TPP's phase 2; GQA: one CTA loads each K/V tile once for the whole
// head group) over the full matrix GQA 1/4/8 x head_dim 64/128 x bf16/fp16, random chunk sizes,
// random private-tail lengths from 1 token to ~2.5K (the long ones split by TppWorkPlan, then
// merged), through every call path (CheckBoth: TPP with sharing, TPP's paged call, every
// phase-2 kernel over the shared and the unshared plan), outputs and partial states poisoned.
TEST(TppGpuTest, PerRowKernelGqaMatrix) {
  BANYAN_SEEDED_RNG(rng);
  for (int head_dim : {64, 128}) {
    for (int gqa : {1, 4, 8}) {
      for (DType dtype : {DType::kBf16, DType::kFp16}) {
        const int chunks[] = {16, 32, 64};
        const Shape s{head_dim, 2, gqa, chunks[rng() % 3], dtype};
        Fixture f(s, 96000 / s.chunk);
        testing::RandomTreeSpec spec;
        spec.num_groups = 3;
        spec.rows_per_group_max = 4;
        spec.global_prefix_max = 300;
        spec.group_prefix_max = 100;
        spec.tail_max = 2500;
        auto seqs = testing::BuildRandomTree(f.tree(), rng, spec);
        ASSERT_FALSE(seqs.empty());
        std::vector<SeqId> rows = f.tree().DfsOrder();
        f.FillData(rng, rows);
        TppOptions opt;
        opt.p2_min_split_tokens = 256;  // split the long tails in TPP's phase 2 too
        CheckBoth(f, rows, s, opt, Name(s), false);
      }
    }
  }
}

struct BatchCase {
  Shape shape;
  int batch;
};

class TppGpuBatchTest : public ::testing::TestWithParam<BatchCase> {};

// Batches from 1 to 2048 rows: a global prefix (a segment of all rows), group prefixes
// (segments of a few rows), private tails.
TEST_P(TppGpuBatchTest, HierarchicalSharing) {
  const BatchCase c = GetParam();
  BANYAN_SEEDED_RNG(rng);
  const int groups = std::max(1, c.batch / 12);
  const int cs = c.shape.chunk;
  const int chunks = (500 / cs + 2) + groups * (90 / cs + 3) + c.batch * (70 / cs + 3);
  Fixture f(c.shape, chunks);
  auto rows = BuildHierarchical(f.tree(), rng, c.batch, 300 + static_cast<int>(rng() % 200),
                                groups, 90, 70);
  ASSERT_EQ(static_cast<int>(rows.size()), c.batch);
  rows = f.tree().DfsOrder();
  f.FillData(rng, rows);
  CheckBoth(f, rows, c.shape, TppOptions{}, "batch " + std::to_string(c.batch), c.batch > 1);
}

INSTANTIATE_TEST_SUITE_P(
    Batches, TppGpuBatchTest,
    ::testing::Values(BatchCase{{128, 2, 4, 64, DType::kBf16}, 1},
                      BatchCase{{128, 2, 4, 64, DType::kBf16}, 2},
                      BatchCase{{64, 2, 8, 32, DType::kFp16}, 3},
                      BatchCase{{128, 4, 1, 64, DType::kFp16}, 64},
                      BatchCase{{64, 1, 8, 64, DType::kBf16}, 257},
                      BatchCase{{128, 1, 4, 64, DType::kBf16}, 1000},
                      BatchCase{{128, 2, 1, 64, DType::kBf16}, 2048},
                      BatchCase{{64, 1, 8, 16, DType::kFp16}, 2048}),
    [](const auto& info) {
      return Name(info.param.shape) + "_b" + std::to_string(info.param.batch);
    });

// Long shared prefix with few rows (phase-1 KV splits) and long private tails (phase-2 splits
// and the merge kernel).
TEST(TppGpuTest, SplitsInBothPhases) {
  BANYAN_SEEDED_RNG(rng);
  for (const Shape& s : {Shape{128, 2, 4, 64, DType::kBf16}, Shape{64, 1, 2, 32, DType::kFp16}}) {
    Fixture f(s, 1200);
    auto rows = BuildHierarchical(f.tree(), rng, 3, 5000 + static_cast<int>(rng() % 300), 1, 10,
                                  6000);
    rows = f.tree().DfsOrder();
    f.FillData(rng, rows);
    AttentionPlan shared = kvcache::BuildAttentionPlan(f.tree(), rows, {.share = true});
    const std::vector<float> want = f.Reference(shared);
    TppWorkPlan wp;
    TppOptions opt;
    opt.p2_min_split_tokens = 512;
    const double e = RelErr(f.RunGpu(shared, opt, false, &wp), want);
    EXPECT_GT(wp.max_p1_splits(), 1);
    EXPECT_GT(wp.max_p2_splits(), 1);
    EXPECT_GT(wp.num_merge_rows(), 0);
    EXPECT_LT(e, Tolerance(s.dtype)) << Name(s);
    CheckOtherPhase1Paths(f, shared, opt, want, Tolerance(s.dtype), Name(s));
  }
  std::printf("phase 1 by default on %s\n", TppPhase1WgmmaAvailable() ? "wgmma" : "mma.sync");
}

// Keys with spikes (SpikeKeys): the running max grows in later tiles, so O is rescaled after
// the first tile, in even and odd tiles of the warp-specialised phase 1 (whose odd tile
// rescales while the even tile's P V may still be in flight), in phase 2 and in the merge.
// Shared prefixes of 700-1,200 tokens (11-19 tiles), phase-1 splits kept long.
TEST(TppGpuTest, RescalesAfterTheFirstTile) {
  BANYAN_SEEDED_RNG(rng);
  for (const Shape& s : {Shape{128, 2, 1, 64, DType::kBf16}, Shape{128, 1, 4, 16, DType::kFp16},
                         Shape{64, 2, 8, 32, DType::kBf16}, Shape{128, 2, 2, 64, DType::kFp16},
                         Shape{96, 2, 2, 32, DType::kBf16}}) {
    Fixture f(s, 64000 / s.chunk);
    testing::RandomTreeSpec spec;
    spec.num_groups = 2;
    spec.rows_per_group_max = 6;
    spec.global_prefix_min = 700;
    spec.global_prefix_max = 1200;
    spec.group_prefix_max = 200;
    spec.tail_max = 300;
    ASSERT_FALSE(testing::BuildRandomTree(f.tree(), rng, spec).empty());
    const std::vector<SeqId> rows = f.tree().DfsOrder();
    f.FillData(rng, rows);
    f.SpikeKeys(rng, 0.03, 16.0f);
    for (int block_m : {0, 128}) {
      TppOptions opt;
      opt.p1_block_m = block_m;
      opt.p1_min_split_tokens = 1024;  // one split per segment: every tile in one CTA's loop
      CheckBoth(f, rows, s, opt, Name(s) + " block m " + std::to_string(block_m), true);
    }
  }
}

// GQA ratios that are not powers of two, and more than 8 q heads per kv head (several phase-2
// head groups).
TEST(TppGpuTest, OddGqaRatios) {
  BANYAN_SEEDED_RNG(rng);
  for (int g : {3, 5, 6, 12, 16, 20}) {
    const Shape s{128, 2, g, 64, g % 2 ? DType::kFp16 : DType::kBf16};
    Fixture f(s, 400);
    auto rows = BuildHierarchical(f.tree(), rng, 9, 200, 3, 70, 90);
    rows = f.tree().DfsOrder();
    f.FillData(rng, rows);
    CheckBoth(f, rows, s, TppOptions{}, "g " + std::to_string(g), true);
  }
}

// Plan/run separation: the run is captured in a CUDA graph; rows then grow in place
// (AdvanceLengths, no shape change), only the span ends are re-uploaded, and the graph replays.
// Both launch schedules: fused (PDL) and deferred merge with phase 2 on a side stream; each
// phase-2 kernel.
void GraphReplayWith(bool deferred, Phase2Path p2) {
  BANYAN_SEEDED_RNG(rng);
  const Shape s{128, 2, 4, 64, DType::kBf16};
  Fixture f(s, 400);
  auto rows = BuildHierarchical(f.tree(), rng, 12, 250, 3, 60, 20);
  rows = f.tree().DfsOrder();
  f.FillData(rng, rows);
  AttentionPlan plan = kvcache::BuildAttentionPlan(f.tree(), rows, {.share = true});
  TppProblem pr{s.kv_heads * s.gqa, s.kv_heads, s.head_dim, s.chunk};
  TppOptions opt;
  opt.defer_merge = deferred ? 1 : 0;
  opt.p2_mma = p2 == Phase2Path::kTensorCores ? 1 : 0;
  opt.p2_warp = p2 == Phase2Path::kWarpPerHead ? 1 : 0;
  auto wp = TppWorkPlan::Build(engine::ViewOf(plan), pr, opt);
  ASSERT_TRUE(wp.ok()) << wp.status();
  ASSERT_EQ(wp->deferred_merge(), deferred);
  ASSERT_EQ(wp->p2_path(), p2);
  DevBuf<int32_t> image(wp->image().size());
  DevBuf<uint8_t> ws(wp->workspace_bytes());
  CUDA_OK(cudaMemcpy(image.p, wp->image().data(), wp->image_bytes(), cudaMemcpyHostToDevice));
  cudaStream_t stream, side;
  cudaEvent_t fork, join;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  TppRunArgs args = f.Args(image.p, ws.p);
  args.side_stream = side;
  args.fork_event = fork;
  args.join_event = join;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  absl::Status st = TppDecodeAttention(*wp, args, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      // One decode step: every row whose private tail has room grows by one token in place.
      for (int r = 0; r < plan.num_rows(); ++r) {
        const int tail = plan.row_tail_span[r];
        if (tail >= 0 && plan.span_end[tail] < s.chunk) {
          ASSERT_TRUE(f.tree().Append(rows[r], static_cast<int32_t>(rng() % 1000)).ok());
        }
      }
      ASSERT_TRUE(kvcache::PlanReusable(plan, f.tree(), rows));
      kvcache::AdvanceLengths(plan, f.tree());
      wp->UpdateSpanEnds(plan.span_end.data());
      CUDA_OK(cudaMemcpyAsync(reinterpret_cast<char*>(image.p) + wp->span_end_offset_bytes(),
                              reinterpret_cast<const char*>(wp->image().data()) +
                                  wp->span_end_offset_bytes(),
                              wp->span_end_bytes(), cudaMemcpyHostToDevice, stream));
    }
    CUDA_OK(cudaMemsetAsync(f.out_dev(), 0xff, plan.num_rows() * pr.num_q_heads * s.head_dim * 2,
                            stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_LT(RelErr(f.Download(), f.Reference(plan)), Tolerance(s.dtype))
        << "step " << step << (deferred ? " deferred" : " fused") << ", phase-2 path "
        << static_cast<int>(p2);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(side);
  cudaStreamDestroy(stream);
}

void GraphReplay(bool deferred) {
  for (Phase2Path p2 :
       {Phase2Path::kCudaCores, Phase2Path::kWarpPerHead, Phase2Path::kTensorCores}) {
    GraphReplayWith(deferred, p2);
  }
}

TEST(TppGpuTest, GraphReplayAfterAdvanceLengthsFused) {
  GraphReplay(false);
}

TEST(TppGpuTest, GraphReplayAfterAdvanceLengthsDeferredOnTwoStreams) {
  GraphReplay(true);
}

TEST(TppGpuTest, RejectsMismatchedArguments) {
  BANYAN_SEEDED_RNG(rng);
  const Shape s{128, 2, 4, 64, DType::kBf16};
  Fixture f(s, 64);
  auto rows = BuildHierarchical(f.tree(), rng, 4, 100, 1, 10, 10);
  f.FillData(rng, rows);
  AttentionPlan plan = kvcache::BuildAttentionPlan(f.tree(), rows, {.share = true});
  TppProblem pr{8, 2, 128, 64};
  auto wp = TppWorkPlan::Build(engine::ViewOf(plan), pr, TppOptions{});
  ASSERT_TRUE(wp.ok());
  DevBuf<int32_t> image(wp->image().size());
  DevBuf<uint8_t> ws(wp->workspace_bytes());
  TppRunArgs a = f.Args(image.p, ws.p);
  EXPECT_EQ(PagedDecodeAttention(*wp, a, nullptr).code(), absl::StatusCode::kInvalidArgument);
  a.kv.head_dim = 64;
  EXPECT_EQ(TppDecodeAttention(*wp, a, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // An FP8 view of a chunk size that is not a multiple of 8 (its code rows and exponent words
  // would be misaligned).
  const Shape s8{128, 2, 4, 20, DType::kBf16, true};
  Fixture f8(s8, 64);
  auto rows8 = BuildHierarchical(f8.tree(), rng, 4, 30, 1, 10, 10);
  f8.FillData(rng, rows8);
  AttentionPlan plan8 = kvcache::BuildAttentionPlan(f8.tree(), rows8, {.share = true});
  auto wp8 = TppWorkPlan::Build(engine::ViewOf(plan8), TppProblem{8, 2, 128, 20}, TppOptions{});
  ASSERT_TRUE(wp8.ok());
  DevBuf<int32_t> image8(wp8->image().size());
  DevBuf<uint8_t> ws8(wp8->workspace_bytes());
  const absl::Status st = TppDecodeAttention(*wp8, f8.Args(image8.p, ws8.p), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("multiple of 8"), std::string::npos) << st;
}

}  // namespace
}  // namespace banyan::kernels::cuda::tpp
