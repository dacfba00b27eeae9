// Draft heads on the GPU (engine/cuda/device_draft_heads.h, kernels/cuda/draft_kernels.h):
//  - DraftTopB against the host TopK order (value descending, then id ascending; NaN as -inf)
//    on random rows full of ties, NaN and -inf, outputs poisoned first;
//  - CudaBackend::DraftTrees on the bundled stories260K with its shipped Hydra and Medusa heads
//    against the heads run on the host (DraftHeads::HeadLogits, double accumulation) over the
//    same hidden states: the trees have TreeBatch's shape, every root is the given one, and each
//    drafted child is one of the host's top-b of its node up to the dtype's rounding of the
//    heads' inputs (a child whose host logit is more than that below the host's j-th best fails).
//    Enough samples that the last level runs in several blocks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "model/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "engine/step_runner.h"
#include "gtest/gtest.h"
#include "kernels/cuda/draft_kernels.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/bundled_model.h"

namespace banyan::engine {
namespace {

namespace kc = kernels::cuda;

// The host order of DraftHeads' TopK.
std::vector<int32_t> HostTopB(const float* l, int vocab, int b) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  auto key = [&](int32_t i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t c) { return key(a) > key(c); });
  ids.resize(static_cast<size_t>(b));
  return ids;
}

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(v.size(), 1) * sizeof(T)),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}
template <typename T>
std::vector<T> HostCopy(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(DraftKernelsTest, TopBMatchesHostOrder) {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 12; ++trial) {
    const int rows = 1 + static_cast<int>(rng() % 40);
    const int vocab = trial == 0 ? 16 : 50 + static_cast<int>(rng() % 3000);
    const int b = std::min<int>(vocab, 1 + static_cast<int>(rng() % kc::kDraftMaxBranching));
    const int path_len = 1 + static_cast<int>(rng() % 4), stride = path_len + 2;
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " vocab " << vocab << " b " << b);
    // Coarse values (many ties), some NaN and -inf; one row all NaN.
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& x : logits) {
      const uint64_t r = rng() % 100;
      x = r < 3 ? std::numeric_limits<float>::quiet_NaN()
                : r < 6 ? -INFINITY : static_cast<float>(static_cast<int>(rng() % 16)) * 0.25f;
    }
    std::fill_n(logits.begin(), vocab, std::numeric_limits<float>::quiet_NaN());
    std::vector<int32_t> paths(static_cast<size_t>(rows) * stride, -5), ns(rows);
    for (int r = 0; r < rows; ++r) {
      ns[r] = static_cast<int32_t>(rng() % 7);
      for (int k = 0; k < path_len; ++k) paths[r * stride + k] = static_cast<int32_t>(rng() % vocab);
    }
    const std::vector<int32_t> poison(static_cast<size_t>(rows) * b * stride, -7);
    float* d_logits = DeviceCopy(logits);
    int32_t* d_paths = DeviceCopy(paths);
    int32_t* d_ns = DeviceCopy(ns);
    int32_t* d_tokens = DeviceCopy(std::vector<int32_t>(static_cast<size_t>(rows) * b, -7));
    int32_t* d_next = DeviceCopy(poison);
    int32_t* d_ns_next = DeviceCopy(std::vector<int32_t>(static_cast<size_t>(rows) * b, -7));
    kc::DraftTopBParams p;
    p.logits = d_logits;
    p.tokens = d_tokens;
    p.paths = d_paths;
    p.node_sample = d_ns;
    p.paths_next = d_next;
    p.node_sample_next = d_ns_next;
    p.rows = rows;
    p.vocab = vocab;
    p.b = b;
    p.path_len = path_len;
    p.path_stride = stride;
    ASSERT_TRUE(kc::DraftTopB(p, nullptr).ok());
    BANYAN_CUDA_OK(cudaDeviceSynchronize());
    const auto tokens = HostCopy(d_tokens, static_cast<size_t>(rows) * b);
    const auto next = HostCopy(d_next, poison.size());
    const auto ns_next = HostCopy(d_ns_next, static_cast<size_t>(rows) * b);
    for (int r = 0; r < rows; ++r) {
      const std::vector<int32_t> want = HostTopB(logits.data() + static_cast<size_t>(r) * vocab, vocab, b);
      for (int j = 0; j < b; ++j) {
        const size_t c = static_cast<size_t>(r) * b + j;
        ASSERT_EQ(tokens[c], want[j]) << "row " << r << " pick " << j;
        EXPECT_EQ(ns_next[c], ns[r]);
        for (int k = 0; k < path_len; ++k) EXPECT_EQ(next[c * stride + k], paths[r * stride + k]);
        EXPECT_EQ(next[c * stride + path_len], want[j]);
      }
    }
    for (void* q : {static_cast<void*>(d_logits), static_cast<void*>(d_paths),
                    static_cast<void*>(d_ns), static_cast<void*>(d_tokens),
                    static_cast<void*>(d_next), static_cast<void*>(d_ns_next)}) {
      cudaFree(q);
    }
  }
  kc::DraftTopBParams bad;
  bad.b = kc::kDraftMaxBranching + 1;
  bad.vocab = 100;
  EXPECT_FALSE(kc::DraftTopB(bad, nullptr).ok());
}

class DeviceDraftHeadsTest : public ::testing::TestWithParam<kc::DType> {
 protected:
  static void SetUpTestSuite() {
    auto b = model::LoadModelBundle(::banyan::testing::BundledModelPath());
    ASSERT_TRUE(b.ok()) << b.status();
    bundle_ = new model::ModelBundle(std::move(*b));
  }
  static void TearDownTestSuite() {
    delete bundle_;
    bundle_ = nullptr;
  }
  static model::ModelBundle* bundle_;
};
model::ModelBundle* DeviceDraftHeadsTest::bundle_ = nullptr;

TEST_P(DeviceDraftHeadsTest, TreesMatchHostHeads) {
  const kc::DType dt = GetParam();
  const model::ModelWeights& w = bundle_->weights;
  const int vocab = w.config.vocab_size, dim = w.config.dim;
  constexpr int kChunks = 2048, kChunkSize = 16;
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  o.dtype = dt;
  auto made = CudaBackend::Create(&w, o);
  ASSERT_TRUE(made.ok()) << made.status();
  CudaBackend& cuda = **made;
  auto pool = *kvcache::ChunkPool::Create(kChunks, kChunkSize);
  kvcache::PrefixTree tree(&pool);
  StepRunner runner(&cuda, &tree, AttentionMode::kTpp);

  // 80 prompts (story openings and random tails), one prefill step, a logits row each.
  std::mt19937_64 rng(7);
  const std::vector<int32_t> opening = bundle_->tokenizer->Encode("Once upon a time, there was", true);
  std::vector<PrefillItem> items;
  std::vector<kvcache::ChunkCopy> copies;
  constexpr int kSamples = 80;
  for (int i = 0; i < kSamples; ++i) {
    std::vector<int32_t> p = opening;
    for (int k = static_cast<int>(rng() % 12); k > 0; --k) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    auto placed = tree.Insert("", p);
    ASSERT_TRUE(placed.ok());
    copies.insert(copies.end(), placed->copies.begin(), placed->copies.end());
    const int32_t len = static_cast<int32_t>(p.size());
    items.push_back({.seq = placed->seq, .begin = std::min(placed->matched_tokens, len - 1),
                     .end = len, .cached_end = placed->matched_tokens, .want_logits = true,
                     .samples = {}});
  }
  StepOutput out;
  ASSERT_TRUE(runner.RunLogits(copies, {}, items, &out).ok());
  std::vector<int32_t> rows(kSamples), roots(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    rows[i] = i;
    const float* l = out.logits.data() + static_cast<size_t>(i) * vocab;
    roots[i] = static_cast<int32_t>(std::max_element(l, l + vocab) - l);
  }
  std::vector<float> h;
  ASSERT_TRUE(cuda.HiddenRows(rows, &h).ok());

  struct Case {
    const char* config;
    std::vector<int32_t> branching;
  };
  // [8,4,4]: 80 x 32 = 2,560 parents at the last level, over the 1,024-row blocks of a
  // 512-token vocabulary.
  const Case cases[] = {{"config.json", {4, 2, 2}},
                        {"config.json", {1, 1, 1, 1}},
                        {"config.json", {8, 4, 4}},
                        {"medusa_config.json", {3, 2}}};
  for (const Case& c : cases) {
    auto heads = DraftHeads::Load(::banyan::testing::BundledModelDir() + "/hydra/" + c.config, w);
    ASSERT_TRUE(heads.ok()) << heads.status();
    SCOPED_TRACE(::testing::Message() << c.config << " branching " << c.branching.size());
    std::vector<DraftHeads::Tree> trees(3, DraftHeads::Tree{{-9}, {-9}, {-9}}), host;
    ASSERT_TRUE(cuda.DraftTrees(*heads, rows, roots, c.branching, &trees).ok());
    ASSERT_TRUE(heads->TreeBatch(h, roots, c.branching, &host).ok());
    ASSERT_EQ(trees.size(), host.size());
    int64_t nodes = 0, same = 0;
    double worst_gap = 0;
    std::vector<float> logits;
    for (int s = 0; s < kSamples; ++s) {
      const DraftHeads::Tree& t = trees[s];
      ASSERT_EQ(t.parent, host[s].parent);  // TreeBatch's shape and order
      ASSERT_EQ(t.depth, host[s].depth);
      ASSERT_EQ(t.token[0], roots[s]);
      const std::span<const float> hs(h.data() + static_cast<size_t>(s) * dim, dim);
      // Each parent's children against the host heads over the device's own path.
      for (size_t n = 0; n < t.token.size(); ++n) {
        std::vector<int32_t> kids;
        for (size_t k = n + 1; k < t.token.size(); ++k) {
          if (t.parent[k] == static_cast<int32_t>(n)) kids.push_back(t.token[k]);
        }
        if (kids.empty()) continue;
        std::vector<int32_t> path;
        for (int32_t q = static_cast<int32_t>(n); q >= 0; q = t.parent[q]) path.push_back(t.token[q]);
        std::reverse(path.begin(), path.end());
        ASSERT_TRUE(heads->HeadLogits(t.depth[n], hs, path, &logits).ok());
        const std::vector<int32_t> want = HostTopB(logits.data(), vocab, static_cast<int>(kids.size()));
        float scale = 0;
        for (float x : logits) scale = std::max(scale, std::fabs(x));
        const double tol = (dt == kc::DType::kBf16 ? 2e-2 : 4e-3) * scale;
        for (size_t j = 0; j < kids.size(); ++j) {
          ASSERT_GE(kids[j], 0);
          ASSERT_LT(kids[j], vocab);
          const double gap = logits[want[j]] - logits[kids[j]];
          worst_gap = std::max(worst_gap, gap / scale);
          EXPECT_LE(gap, tol) << "sample " << s << " node " << n << " child " << j;
          ++nodes;
          same += kids[j] == want[j];
        }
        // A node's children are distinct.
        std::sort(kids.begin(), kids.end());
        EXPECT_EQ(std::adjacent_find(kids.begin(), kids.end()), kids.end());
      }
    }
    std::printf("[ %s %s ] %lld drafted nodes, %.4f the host's top-b token, worst gap %.3g of "
                "the logits' scale\n",
                kc::DTypeName(dt), c.config, static_cast<long long>(nodes),
                static_cast<double>(same) / static_cast<double>(nodes), worst_gap);
    EXPECT_GE(static_cast<double>(same) / static_cast<double>(nodes), 0.9);
  }
  // Rows outside the last step's are refused.
  std::vector<DraftHeads::Tree> trees;
  auto heads = DraftHeads::Load(::banyan::testing::BundledModelDir() + "/hydra/config.json", w);
  ASSERT_TRUE(heads.ok());
  const std::vector<int32_t> bad_row = {kSamples}, one_root = {roots[0]}, branching = {2};
  EXPECT_FALSE(cuda.DraftTrees(*heads, bad_row, one_root, branching, &trees).ok());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DeviceDraftHeadsTest,
                         ::testing::Values(kc::DType::kBf16, kc::DType::kFp16),
                         [](const auto& info) { return std::string(kc::DTypeName(info.param)); });

}  // namespace
}  // namespace banyan::engine
