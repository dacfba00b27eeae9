// Differential tests of the CPU attention kernels against a naive per-sequence oracle in double
// precision that reads each sequence's slots straight from the tree (no plan involved).
// Random trees with hierarchical sharing, fresh data every run, outputs poisoned with NaN first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "engine/plan_view.h"
#include "kernels/cpu/tpp_attention.h"
#include "kvcache/attention_plan.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cpu {
namespace {

using kvcache::AttentionPlan;
using kvcache::PrefixTree;
using kvcache::SlotRef;

struct Case {
  int head_dim;
  int kv_heads;
  int gqa;
  int chunk_size;
};

KvView MakeKv(std::vector<float>& store, int chunks, int kv_heads, int c, int d) {
  KvView kv;
  kv.chunk_size = c;
  kv.num_kv_heads = kv_heads;
  kv.head_dim = d;
  kv.v_offset = static_cast<int64_t>(kv_heads) * c * d;
  kv.chunk_stride = 2 * kv.v_offset;
  store.resize(static_cast<size_t>(chunks) * kv.chunk_stride);
  kv.base = store.data();
  return kv;
}


// softmax(q K^T * scale) V over the given slots, in double.
void NaiveAttend(const float* q, const std::vector<SlotRef>& slots, const KvView& kv, int head,
                 float scale, double* out) {
  const int d = kv.head_dim;
  std::vector<double> logits(slots.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < slots.size(); ++t) {
    const float* k = kv.K(slots[t].chunk, head, slots[t].slot);
    double dot = 0;
    for (int x = 0; x < d; ++x) dot += static_cast<double>(q[x]) * k[x];
    logits[t] = dot * scale;
    mx = std::max(mx, logits[t]);
  }
  double sum = 0;
  for (int x = 0; x < d; ++x) out[x] = 0;
  for (size_t t = 0; t < slots.size(); ++t) {
    double p = std::exp(logits[t] - mx);
    sum += p;
    const float* v = kv.V(slots[t].chunk, head, slots[t].slot);
    for (int x = 0; x < d; ++x) out[x] += p * v[x];
  }
  for (int x = 0; x < d; ++x) out[x] /= sum;
}

double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();  // NaN never passes
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void FillRandom(std::vector<float>& v, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& x : v) x = n(rng);
}

class TppAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(TppAttentionTest, MatchesNaiveOracleOnRandomTrees) {
  const Case cs = GetParam();
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 4; ++trial) {
    const int chunks = 400;
    auto pool = *kvcache::ChunkPool::Create(chunks, cs.chunk_size);
    PrefixTree tree(&pool);
    testing::RandomTreeSpec spec;
    spec.num_groups = 1 + trial;
    spec.global_prefix_min = trial == 0 ? 0 : 1;
    auto seqs = testing::BuildRandomTree(tree, rng, spec);
    ASSERT_FALSE(seqs.empty());

    std::vector<float> store;
    KvView kv = MakeKv(store, chunks, cs.kv_heads, cs.chunk_size, cs.head_dim);
    FillRandom(store, rng);
    const int hq = cs.kv_heads * cs.gqa;
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.head_dim));

    std::vector<kvcache::SeqId> rows = tree.DfsOrder();
    if (trial == 3) std::shuffle(rows.begin(), rows.end(), rng);  // non-DFS order: still exact
    const int nr = static_cast<int>(rows.size());
    std::vector<float> q(static_cast<size_t>(nr) * hq * cs.head_dim);
    FillRandom(q, rng);
    q[0] *= 30.0f;  // one sharp logit distribution

    std::vector<double> want(q.size());
    for (int r = 0; r < nr; ++r) {
      auto slots = tree.Slots(rows[r], 0, tree.Length(rows[r]));
      for (int h = 0; h < hq; ++h) {
        const size_t off = (static_cast<size_t>(r) * hq + h) * cs.head_dim;
        NaiveAttend(q.data() + off, slots, kv, h / cs.gqa, scale, want.data() + off);
      }
    }

    for (bool share : {true, false}) {
      AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = share});
      if (share && trial > 0) {
        EXPECT_GT(plan.num_segments(), 0);  // >= 2 groups share the global prefix
      }
      std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> po(static_cast<size_t>(plan.num_partials) * hq * cs.head_dim,
                            std::numeric_limits<float>::quiet_NaN());
      std::vector<float> pl(static_cast<size_t>(plan.num_partials) * hq,
                            std::numeric_limits<float>::quiet_NaN());
      DecodeAttentionParams p;
      p.q = q.data();
      p.out = out.data();
      p.kv = kv;
      p.plan = engine::ViewOf(plan);
      p.num_q_heads = hq;
      p.scale = scale;
      p.partial_o = po.data();
      p.partial_lse = pl.data();
      if (share) {
        TppDecodeAttention(p);
      } else {
        PagedDecodeAttention(p);
      }
      EXPECT_LT(RelErr(out, want), 1e-5) << (share ? "tpp" : "paged") << " trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, TppAttentionTest,
    ::testing::Values(Case{8, 2, 1, 16}, Case{8, 1, 8, 32}, Case{64, 2, 1, 16},
                      Case{64, 2, 2, 64}, Case{64, 1, 4, 32}, Case{128, 2, 4, 16},
                      Case{128, 1, 8, 64}, Case{128, 4, 1, 32}),
    [](const auto& info) {
      const Case& c = info.param;
      // Built with absl::StrCat: GCC 12's -Wrestrict misfires on chains of std::string '+'.
      return absl::StrCat("d", c.head_dim, "_kv", c.kv_heads, "_g", c.gqa, "_c", c.chunk_size);
    });

TEST(MergeStateTest, EmptyStatesNeverProduceNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a(4, 0.0f), b(4, 0.0f);
  float lse_a = -inf;
  MergeState(a.data(), &lse_a, b.data(), -inf, 4);
  EXPECT_EQ(lse_a, -inf);
  for (float x : a) EXPECT_EQ(x, 0.0f);
  std::vector<float> c = {1, 2, 3, 4};
  MergeState(a.data(), &lse_a, c.data(), 0.5f, 4);
  EXPECT_FLOAT_EQ(lse_a, 0.5f);
  EXPECT_FLOAT_EQ(a[3], 4.0f);
  // Equal weights average.
  std::vector<float> d2 = {3, 2, 1, 0};
  MergeState(a.data(), &lse_a, d2.data(), 0.5f, 4);
  EXPECT_FLOAT_EQ(a[0], 2.0f);
  EXPECT_NEAR(lse_a, 0.5f + std::log(2.0f), 1e-6);
}

TEST(PrefillAttentionTest, CausalOverCachedPathMatchesOracle) {
  BANYAN_SEEDED_RNG(rng);
  const int c = 16, d = 64, kvh = 2, g = 2, hq = kvh * g;
  auto pool = *kvcache::ChunkPool::Create(64, c);
  PrefixTree tree(&pool);
  std::vector<int32_t> prompt(37);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % 100);
  std::vector<int32_t> other = prompt;
  other.resize(23);
  other.push_back(555);
  ASSERT_TRUE(tree.Insert("", other).ok());  // forces a split of the later sequence's path
  auto placed = *tree.Insert("", prompt);
  const int q0 = placed.matched_tokens;  // cached part: attended, not recomputed
  ASSERT_EQ(q0, 23);
  const int nq = static_cast<int>(prompt.size()) - q0;
  std::vector<float> store;
  KvView kv = MakeKv(store, 64, kvh, c, d);
  FillRandom(store, rng);
  AttentionPlan plan = kvcache::BuildAttentionPlan(tree, std::vector{placed.seq}, {.share = false});
  std::vector<float> q(static_cast<size_t>(nq) * hq * d), out(q.size(), NAN);
  FillRandom(q, rng);
  PrefillAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.kv = kv;
  p.span_chunk = plan.span_chunk.data();
  p.span_begin = plan.span_begin.data();
  p.span_end = plan.span_end.data();
  p.num_spans = plan.num_spans();
  p.q_pos0 = q0;
  p.num_q = nq;
  p.num_q_heads = hq;
  p.scale = 0.125f;
  PrefillAttention(p);
  auto slots = tree.Slots(placed.seq, 0, static_cast<int32_t>(prompt.size()));
  std::vector<double> want(q.size());
  for (int j = 0; j < nq; ++j) {
    std::vector<SlotRef> ctx(slots.begin(), slots.begin() + q0 + j + 1);
    for (int h = 0; h < hq; ++h) {
      size_t off = (static_cast<size_t>(j) * hq + h) * d;
      NaiveAttend(q.data() + off, ctx, kv, h / g, 0.125f, want.data() + off);
    }
  }
  EXPECT_LT(RelErr(out, want), 1e-5);
}

// fixed_max (the row-invariant CPU backend): the same context cut into spans two ways (whole
// chunks, and random pieces at random slots of other chunks, holding the same K/V) gives the
// same bits; and it is still attention (the naive oracle). Queries scaled up so that the blocks'
// own maxima differ, which is what moved the bits before.
TEST(PrefillAttentionTest, FixedMaxDoesNotDependOnHowTheContextIsCut) {
  BANYAN_SEEDED_RNG(rng);
  const int c = 16, d = 64, kvh = 2, g = 2, hq = kvh * g, n = 40;
  std::vector<float> store;
  KvView kv = MakeKv(store, 64, kvh, c, d);
  FillRandom(store, rng);
  // Layout A: chunks 0, 1, 2 from slot 0. Layout B: pieces of 1 to 16 tokens in chunks 10...,
  // each starting at a random slot, with the K/V of the same tokens copied there.
  std::vector<int32_t> a_chunk, a_begin, a_end, b_chunk, b_begin, b_end;
  std::vector<SlotRef> a_slots;
  for (int t = 0; t < n; t += c) {
    a_chunk.push_back(t / c);
    a_begin.push_back(0);
    a_end.push_back(std::min(c, n - t));
    for (int s = 0; s < a_end.back(); ++s) a_slots.push_back(SlotRef{t / c, s});
  }
  for (int t = 0, chunk = 10; t < n; ++chunk) {
    const int begin = static_cast<int>(rng() % c);
    const int len = std::min({n - t, c - begin, 1 + static_cast<int>(rng() % c)});
    b_chunk.push_back(chunk);
    b_begin.push_back(begin);
    b_end.push_back(begin + len);
    for (int s = 0; s < len; ++s, ++t) {
      for (int h = 0; h < kvh; ++h) {
        const SlotRef from = a_slots[t];
        std::copy(kv.K(from.chunk, h, from.slot), kv.K(from.chunk, h, from.slot) + d,
                  kv.K(chunk, h, begin + s));
        std::copy(kv.V(from.chunk, h, from.slot), kv.V(from.chunk, h, from.slot) + d,
                  kv.V(chunk, h, begin + s));
      }
    }
  }
  ASSERT_GT(b_chunk.size(), a_chunk.size());
  std::vector<float> q(static_cast<size_t>(hq) * d);
  FillRandom(q, rng);
  for (float& x : q) x *= 8.0f;
  auto run = [&](const std::vector<int32_t>& ch, const std::vector<int32_t>& be,
                 const std::vector<int32_t>& en, bool fixed) {
    std::vector<float> out(q.size(), NAN);
    PrefillAttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.kv = kv;
    p.span_chunk = ch.data();
    p.span_begin = be.data();
    p.span_end = en.data();
    p.num_spans = static_cast<int32_t>(ch.size());
    p.q_pos0 = n - 1;
    p.num_q = 1;
    p.num_q_heads = hq;
    p.scale = 0.125f;
    p.fixed_max = fixed;
    PrefillAttention(p);
    return out;
  };
  const std::vector<float> a = run(a_chunk, a_begin, a_end, true);
  const std::vector<float> b = run(b_chunk, b_begin, b_end, true);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << i;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "element " << i;
  }
  std::vector<double> want(q.size());
  for (int h = 0; h < hq; ++h) {
    NaiveAttend(q.data() + static_cast<size_t>(h) * d, a_slots, kv, h / g, 0.125f,
                want.data() + static_cast<size_t>(h) * d);
  }
  EXPECT_LT(RelErr(a, want), 1e-5);
  EXPECT_LT(RelErr(run(b_chunk, b_begin, b_end, false), want), 1e-5);
}

}  // namespace
}  // namespace banyan::kernels::cpu
