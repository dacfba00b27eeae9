// Host-only tests of TppWorkPlan (no GPU needed): the work partition covers every segment's
// spans x M tiles and every row's private spans exactly once, each row merges exactly its
// segments' split states, and the split choices follow the options.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "engine/plan_view.h"
#include "kvcache/attention_plan.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cuda::tpp {
namespace {

using kvcache::AttentionPlan;

const int32_t* At(const TppWorkPlan& wp, int64_t offset) { return wp.image().data() + offset; }

void CheckPartition(const AttentionPlan& plan, const TppWorkPlan& wp, int g) {
  const TppImageLayout& l = wp.layout();
  const int32_t block_m = wp.p1_block_m();
  // Phase 1: per segment, the items' span ranges tile [seg_span_begin, seg_span_end) and each
  // range appears once per M tile; states are distinct per (split, row).
  std::map<int, std::vector<std::pair<int, int>>> ranges;  // seg -> (lo, hi) per split
  std::map<std::pair<int, int>, std::set<int>> tiles;       // (seg, lo) -> m_begin
  std::set<int> p1_states;
  for (int i = 0; i < wp.num_p1_items(); ++i) {
    const int s = At(wp, l.p1_seg)[i], lo = At(wp, l.p1_span_lo)[i], hi = At(wp, l.p1_span_hi)[i];
    const int m0 = At(wp, l.p1_m_begin)[i];
    EXPECT_EQ(m0 % block_m, 0);
    if (tiles[{s, lo}].empty()) ranges[s].push_back({lo, hi});
    EXPECT_TRUE(tiles[std::make_pair(s, lo)].insert(m0).second);
    const int rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
    for (int r = 0; r < rows; ++r) p1_states.insert(At(wp, l.p1_state)[i] + r);
  }
  int expected_states = 0;
  for (int s = 0; s < plan.num_segments(); ++s) {
    auto& rs = ranges[s];
    std::sort(rs.begin(), rs.end());
    ASSERT_FALSE(rs.empty()) << "segment " << s;
    EXPECT_EQ(rs.front().first, plan.seg_span_begin[s]);
    EXPECT_EQ(rs.back().second, plan.seg_span_end[s]);
    for (size_t j = 1; j < rs.size(); ++j) EXPECT_EQ(rs[j].first, rs[j - 1].second);
    const int m = (plan.seg_row_end[s] - plan.seg_row_begin[s]) * g;
    for (auto& r : rs) EXPECT_EQ(static_cast<int>(tiles[{s, r.first}].size()), (m + block_m - 1) / block_m);
    expected_states += static_cast<int>(rs.size()) * (plan.seg_row_end[s] - plan.seg_row_begin[s]);
  }
  EXPECT_EQ(static_cast<int>(p1_states.size()), expected_states);

  // Phase 2: per row, the items tile its private spans; exactly one final item or >= 2 pieces.
  std::map<int, std::vector<std::pair<int, int>>> row_ranges;
  std::map<int, int> finals;
  std::set<int> p2_states;
  for (int i = 0; i < wp.num_p2_items(); ++i) {
    const int r = At(wp, l.p2_row)[i];
    row_ranges[r].push_back({At(wp, l.p2_span_lo)[i], At(wp, l.p2_span_hi)[i]});
    const int st = At(wp, l.p2_state)[i];
    if (st < 0) {
      ++finals[r];
    } else {
      EXPECT_FALSE(p1_states.count(st));
      EXPECT_TRUE(p2_states.insert(st).second);
    }
  }
  std::set<int> merge_rows(At(wp, l.merge_rows), At(wp, l.merge_rows) + wp.num_merge_rows());
  for (int r = 0; r < plan.num_rows(); ++r) {
    auto& rs = row_ranges[r];
    std::sort(rs.begin(), rs.end());
    ASSERT_FALSE(rs.empty()) << "row " << r;
    EXPECT_EQ(rs.front().first, plan.row_span_begin[r]);
    EXPECT_EQ(rs.back().second, plan.row_span_end[r]);
    for (size_t j = 1; j < rs.size(); ++j) EXPECT_EQ(rs[j].first, rs[j - 1].second);
    const bool has_segments = plan.row_seg_end[r] > plan.row_seg_begin[r];
    const bool final_row = rs.size() == 1 && !(wp.deferred_merge() && has_segments);
    EXPECT_EQ(finals[r], final_row ? 1 : 0) << "row " << r;
    EXPECT_EQ(merge_rows.count(r) == 1, !final_row) << "row " << r;
    // Merge list: one state per (segment of the row, split), plus the row's pieces if split.
    std::multiset<int> want;
    for (int i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      const int s = plan.row_seg_ids[i];
      const int rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
      for (auto& rg : ranges[s]) {
        // the state of split rg for this row: find an item with that range
        for (int it = 0; it < wp.num_p1_items(); ++it) {
          if (At(wp, l.p1_seg)[it] == s && At(wp, l.p1_span_lo)[it] == rg.first) {
            want.insert(At(wp, l.p1_state)[it] + r - plan.seg_row_begin[s]);
            break;
          }
        }
        (void)rows;
      }
    }
    const int mb = At(wp, l.row_merge_begin)[r], me = At(wp, l.row_merge_end)[r];
    std::multiset<int> got(At(wp, l.merge_states) + mb, At(wp, l.merge_states) + me);
    for (int x : got) {
      if (p2_states.count(x)) want.insert(x);
    }
    EXPECT_EQ(got, want) << "row " << r;
  }
  EXPECT_EQ(wp.num_states(), expected_states + static_cast<int>(p2_states.size()));
}

TEST(TppWorkPlanTest, PartitionCoversThePlanExactly) {
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 30; ++trial) {
    const int chunk = 16 << (trial % 3);
    auto pool = *kvcache::ChunkPool::Create(20000, chunk);
    kvcache::PrefixTree tree(&pool);
    testing::RandomTreeSpec spec;
    spec.num_groups = 1 + trial % 6;
    spec.rows_per_group_max = 8;
    spec.global_prefix_min = trial % 2;
    spec.global_prefix_max = 3000;
    spec.group_prefix_max = 600;
    spec.tail_max = trial % 4 == 0 ? 4000 : 100;
    testing::BuildRandomTree(tree, rng, spec);
    auto rows = tree.DfsOrder();
    if (trial % 5 == 4) std::shuffle(rows.begin(), rows.end(), rng);
    for (bool share : {true, false}) {
      AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = share});
      const int g = 1 << (trial % 4);
      TppProblem pr{2 * g, 2, 128, chunk};
      TppOptions opt;
      opt.p1_block_m = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? 64 : 128);
      opt.p2_min_split_tokens = 256;
      opt.defer_merge = trial % 3 - 1;
      auto wp = TppWorkPlan::Build(engine::ViewOf(plan), pr, opt);
      ASSERT_TRUE(wp.ok()) << wp.status();
      CheckPartition(plan, *wp, g);
      if (!share) {
        EXPECT_EQ(wp->num_p1_items(), 0);
      }
    }
  }
}

// Head dims without a compiled family (the bundled model's 8; 96): no phase 1, every row reads
// its segments' spans and its private spans in phase 2, each span exactly once, and a row with
// segments merges exactly its own pieces.
TEST(TppWorkPlanTest, GenericHeadDimsReadSegmentsInPhase2) {
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 12; ++trial) {
    const int chunk = 16 << (trial % 3);
    auto pool = *kvcache::ChunkPool::Create(20000, chunk);
    kvcache::PrefixTree tree(&pool);
    testing::RandomTreeSpec spec;
    // At least two groups under a global prefix of at least 200 tokens: every trial has a
    // segment (a single row, or a prefix shorter than a chunk, would have none).
    spec.num_groups = 2 + trial % 4;
    spec.rows_per_group_max = 6;
    spec.global_prefix_min = 200;
    spec.global_prefix_max = 2000;
    spec.group_prefix_max = 400;
    spec.tail_max = trial % 3 == 0 ? 3000 : 80;
    testing::BuildRandomTree(tree, rng, spec);
    const auto rows = tree.DfsOrder();
    AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = true});
    ASSERT_GT(plan.num_segments(), 0);
    const int head_dim = trial % 2 ? 8 : 96;
    ASSERT_FALSE(TppHasCompiledFamily(head_dim));
    TppOptions opt;
    if (trial % 4 == 3) opt.p2_max_split_tokens = 48;
    auto wp = TppWorkPlan::Build(engine::ViewOf(plan), TppProblem{4, 2, head_dim, chunk}, opt);
    ASSERT_TRUE(wp.ok()) << wp.status();
    EXPECT_EQ(wp->num_p1_items(), 0);
    EXPECT_EQ(wp->p2_path(), Phase2Path::kGeneric);
    EXPECT_FALSE(wp->deferred_merge());
    const TppImageLayout& l = wp->layout();
    std::map<int, std::multiset<int>> read;    // row -> spans its items read
    std::map<int, std::multiset<int>> states;  // row -> states its items write
    std::map<int, int> finals;
    for (int i = 0; i < wp->num_p2_items(); ++i) {
      const int r = At(*wp, l.p2_row)[i];
      for (int sp = At(*wp, l.p2_span_lo)[i]; sp < At(*wp, l.p2_span_hi)[i]; ++sp) {
        read[r].insert(sp);
      }
      const int st = At(*wp, l.p2_state)[i];
      if (st < 0) {
        ++finals[r];
      } else {
        states[r].insert(st);
      }
    }
    for (int r = 0; r < plan.num_rows(); ++r) {
      std::multiset<int> want;
      for (int i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
        const int seg = plan.row_seg_ids[i];
        for (int sp = plan.seg_span_begin[seg]; sp < plan.seg_span_end[seg]; ++sp) want.insert(sp);
      }
      for (int sp = plan.row_span_begin[r]; sp < plan.row_span_end[r]; ++sp) want.insert(sp);
      EXPECT_EQ(read[r], want) << "row " << r;
      const int mb = At(*wp, l.row_merge_begin)[r], me = At(*wp, l.row_merge_end)[r];
      if (plan.row_seg_end[r] > plan.row_seg_begin[r]) {
        EXPECT_EQ(finals[r], 0) << "row " << r;
        EXPECT_EQ(std::multiset<int>(At(*wp, l.merge_states) + mb, At(*wp, l.merge_states) + me),
                  states[r])
            << "row " << r;
      }
    }
  }
}

// One sequence alone (a single user's decode): its private tail is cut into pieces of at least
// p2_min_split_tokens so that the SMs have work, but never into more than p2_max_splits, since
// the merge reads a row's states a few at a time.
TEST(TppWorkPlanTest, OneRowSplitsItsTailWithinTheMergeBound) {
  BANYAN_SEEDED_RNG(rng);
  for (int context : {2048, 16384}) {
    auto pool = *kvcache::ChunkPool::Create(600, 64);
    kvcache::PrefixTree tree(&pool);
    std::vector<int32_t> tokens(context);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 50000);
    const kvcache::SeqId seq = tree.Insert("", tokens)->seq;
    const std::vector<kvcache::SeqId> rows = {seq};
    AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = false});
    TppProblem pr{32, 32, 128, 64};  // the 7B shape's heads
    TppOptions opt;
    auto wp = TppWorkPlan::Build(engine::ViewOf(plan), pr, opt);
    ASSERT_TRUE(wp.ok()) << wp.status();
    CheckPartition(plan, *wp, 1);
    // 2K: pieces of 256 (8 of them, where pieces of 1,024 left 2 x 32 CTAs for 132 SMs); 16K:
    // the bound, 16 pieces.
    EXPECT_EQ(wp->max_p2_splits(), context == 2048 ? 8 : opt.p2_max_splits) << context;
    EXPECT_EQ(wp->num_merge_rows(), 1) << context;
  }
}

TEST(TppWorkPlanTest, SplitsOnlyAsFarAsNeeded) {
  BANYAN_SEEDED_RNG(rng);
  auto pool = *kvcache::ChunkPool::Create(4000, 64);
  kvcache::PrefixTree tree(&pool);
  std::vector<int32_t> prefix(32768);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % 50000);
  std::vector<kvcache::SeqId> rows;
  for (int r = 0; r < 1024; ++r) {
    auto seq = prefix;
    seq.push_back(100000 + r);
    rows.push_back(tree.Insert("", seq)->seq);
  }
  AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = true});
  ASSERT_EQ(plan.num_segments(), 1);
  // Hydragen shape: 8 q heads, 1 kv head, M = 8192: already >= one wave of M tiles.
  auto big = TppWorkPlan::Build(engine::ViewOf(plan), TppProblem{8, 1, 128, 64}, TppOptions{});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->p1_block_m(), 128);
  EXPECT_LE(big->max_p1_splits(), 4);
  EXPECT_GE(big->num_p1_items(), 64);
  // Two rows only: the segment is split to fill the SMs.
  std::vector<kvcache::SeqId> two(rows.begin(), rows.begin() + 2);
  AttentionPlan small = kvcache::BuildAttentionPlan(tree, two, {.share = true});
  auto wp = TppWorkPlan::Build(engine::ViewOf(small), TppProblem{8, 1, 128, 64}, TppOptions{});
  ASSERT_TRUE(wp.ok());
  EXPECT_GT(wp->max_p1_splits(), 16);
  EXPECT_EQ(wp->p1_block_m(), 64);
  // A forced split count (TppOptions::p1_splits) overrides the model, within the minimum length.
  for (int32_t k : {1, 3, 8}) {
    TppOptions o;
    o.p1_splits = k;
    auto forced = TppWorkPlan::Build(engine::ViewOf(small), TppProblem{8, 1, 128, 64}, o);
    ASSERT_TRUE(forced.ok());
    EXPECT_EQ(forced->max_p1_splits(), k);
  }
  TppOptions few;
  few.p1_splits = 64;
  few.p1_min_split_tokens = 1024;
  auto capped = TppWorkPlan::Build(engine::ViewOf(small), TppProblem{8, 1, 128, 64}, few);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->max_p1_splits(), 32);  // 32,769 tokens, splits of at least 1,024

  // The phase-1 path is resolved once, at Build; auto follows the device.
  const std::pair<int32_t, Phase1Path> paths[] = {{0, Phase1Path::kMmaSync},
                                                  {1, Phase1Path::kWgmma},
                                                  {2, Phase1Path::kWgmmaCooperative}};
  for (const auto& [option, path] : paths) {
    TppOptions o;
    o.p1_wgmma = option;
    auto forced = TppWorkPlan::Build(engine::ViewOf(plan), TppProblem{8, 1, 128, 64}, o);
    ASSERT_TRUE(forced.ok());
    EXPECT_EQ(forced->p1_path(), path) << "p1_wgmma " << option;
  }
  EXPECT_EQ(big->p1_path(),
            TppPhase1WgmmaAvailable() ? Phase1Path::kWgmma : Phase1Path::kMmaSync);
}

// Phase 2's kernel: tensor cores (head group 16) by default for g >= 4 with tails of 64 tokens or
// more on average, a warp per head for tails of at most 128 on average, CUDA cores otherwise; the
// options force each; the tensor-core kernel's 64-slot tiles set the pipeline-depth rule.
TEST(TppWorkPlanTest, Phase2KernelChoice) {
  auto pool = *kvcache::ChunkPool::Create(400, 64);
  kvcache::PrefixTree tree(&pool);
  std::vector<kvcache::SeqId> rows;
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> seq(300 + 100 * r);  // tails of 300-600 tokens: 5-10 tiles of 64
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>(1000 * r + i);
    rows.push_back(tree.Insert("", seq)->seq);
  }
  AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = false});
  struct Case {
    int g, option, group, groups;
  };
  for (const Case c : {Case{1, -1, 1, 1}, Case{2, -1, 2, 1}, Case{4, -1, 16, 1},  // tails > 128
                       Case{8, -1, 16, 1}, Case{20, -1, 16, 2}, Case{8, 0, 8, 1},
                       Case{12, 0, 8, 2}, Case{2, 1, 16, 1}, Case{1, 1, 1, 1}}) {
    TppOptions o;
    o.p2_mma = c.option;
    o.p2_min_split_tokens = 1024;  // tails kept whole: the stage rule below sees them
    auto wp = TppWorkPlan::Build(engine::ViewOf(plan), TppProblem{2 * c.g, 2, 128, 64}, o);
    ASSERT_TRUE(wp.ok()) << wp.status();
    EXPECT_EQ(wp->p2_head_group(), c.group) << "g " << c.g << " p2_mma " << c.option;
    EXPECT_EQ(wp->p2_head_groups(), c.groups) << "g " << c.g << " p2_mma " << c.option;
    EXPECT_EQ(wp->p2_path(), c.group == 16 ? Phase2Path::kTensorCores : Phase2Path::kCudaCores)
        << "g " << c.g << " p2_mma " << c.option;
    // The longest tail (600 tokens) is 10 tiles of 64 (3 stages) or 19 of 32 (3 stages); at
    // most 8 tiles pick 2 stages.
    EXPECT_EQ(wp->p2_stages(), 3) << "g " << c.g;
  }
  {
    std::vector<kvcache::SeqId> few(rows.begin(), rows.begin() + 1);  // 300 tokens
    AttentionPlan p1 = kvcache::BuildAttentionPlan(tree, few, {.share = false});
    TppOptions whole;
    whole.p2_min_split_tokens = 1024;  // the 300-token tail in one piece
    auto mma = TppWorkPlan::Build(engine::ViewOf(p1), TppProblem{16, 2, 128, 64}, whole);
    ASSERT_TRUE(mma.ok());
    EXPECT_EQ(mma->p2_stages(), 2);  // 5 tiles of 64
    TppOptions cuda_cores = whole;
    cuda_cores.p2_mma = 0;
    auto ffma = TppWorkPlan::Build(engine::ViewOf(p1), TppProblem{16, 2, 128, 64}, cuda_cores);
    ASSERT_TRUE(ffma.ok());
    EXPECT_EQ(ffma->p2_stages(), 3);  // 10 tiles of 32
  }
  {
    // 256 rows of short tails (1-10 tokens): a warp per (kv head, up to 4 q heads) by default,
    // four warps per CTA; without it the CUDA-core kernel (below a tile: no tensor cores).
    std::vector<kvcache::SeqId> short_rows;
    for (int r = 0; r < 256; ++r) {
      std::vector<int32_t> seq(1 + r % 10);
      for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>(50000 + 100 * r + i);
      short_rows.push_back(tree.Insert("", seq)->seq);
    }
    AttentionPlan ps = kvcache::BuildAttentionPlan(tree, short_rows, {.share = false});
    {
      // Three of them: too few warps to cover the machine, so the CTA kernel.
      std::vector<kvcache::SeqId> three(short_rows.begin(), short_rows.begin() + 3);
      AttentionPlan p3 = kvcache::BuildAttentionPlan(tree, three, {.share = false});
      auto cta = TppWorkPlan::Build(engine::ViewOf(p3), TppProblem{6, 6, 128, 64}, TppOptions{});
      ASSERT_TRUE(cta.ok());
      EXPECT_EQ(cta->p2_path(), Phase2Path::kCudaCores);
    }
    struct Short {
      int g, warp_group, warp_groups, cta_group;
    };
    for (const Short c : {Short{1, 1, 1, 1}, Short{2, 2, 1, 2}, Short{3, 4, 1, 4},
                          Short{8, 4, 2, 8}, Short{12, 4, 3, 8}}) {
      const TppProblem pr{6 * c.g, 6, 128, 64};
      auto warp = TppWorkPlan::Build(engine::ViewOf(ps), pr, TppOptions{});
      ASSERT_TRUE(warp.ok());
      EXPECT_EQ(warp->p2_path(), Phase2Path::kWarpPerHead) << "g " << c.g;
      EXPECT_EQ(warp->p2_head_group(), c.warp_group) << "g " << c.g;
      EXPECT_EQ(warp->p2_head_groups(), c.warp_groups) << "g " << c.g;
      EXPECT_EQ(warp->p2_grid_y(), (6 * c.warp_groups + 3) / 4) << "g " << c.g;
      TppOptions no_warp;
      no_warp.p2_warp = 0;
      auto cta = TppWorkPlan::Build(engine::ViewOf(ps), pr, no_warp);
      ASSERT_TRUE(cta.ok());
      EXPECT_EQ(cta->p2_path(), Phase2Path::kCudaCores) << "g " << c.g;
      EXPECT_EQ(cta->p2_head_group(), c.cta_group) << "g " << c.g;
      EXPECT_EQ(cta->p2_grid_y(), 6 * cta->p2_head_groups()) << "g " << c.g;
      TppOptions forced;
      forced.p2_mma = 1;
      auto mma = TppWorkPlan::Build(engine::ViewOf(ps), pr, forced);
      ASSERT_TRUE(mma.ok());
      EXPECT_EQ(mma->p2_path(),
                c.g >= 2 ? Phase2Path::kTensorCores : Phase2Path::kWarpPerHead) << "g " << c.g;
    }
  }
}

// Long tails on the warp kernel only when they re-read common chunks (a plan without sharing
// over a common prefix) and the machine is full; long distinct tails stay on the CTA kernel.
TEST(TppWorkPlanTest, WarpKernelForReReadLongTails) {
  auto pool = *kvcache::ChunkPool::Create(1000, 64);
  kvcache::PrefixTree tree(&pool);
  std::vector<int32_t> prefix(512);
  for (size_t i = 0; i < prefix.size(); ++i) prefix[i] = static_cast<int32_t>(i);
  std::vector<kvcache::SeqId> common, distinct;
  for (int r = 0; r < 128; ++r) {
    auto seq = prefix;
    seq.push_back(10000 + r);
    common.push_back(tree.Insert("", seq)->seq);
  }
  for (int r = 0; r < 128; ++r) {
    std::vector<int32_t> seq(200);
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>(20000 + 1000 * r + i);
    distinct.push_back(tree.Insert("", seq)->seq);
  }
  const TppProblem mha{32, 32, 128, 64};  // 128 rows x 32 kv heads = 4,096 warps
  AttentionPlan re_read = kvcache::BuildAttentionPlan(tree, common, {.share = false});
  auto warp = TppWorkPlan::Build(engine::ViewOf(re_read), mha, TppOptions{});
  ASSERT_TRUE(warp.ok());
  EXPECT_EQ(warp->p2_path(), Phase2Path::kWarpPerHead);
  AttentionPlan own = kvcache::BuildAttentionPlan(tree, distinct, {.share = false});
  auto cta = TppWorkPlan::Build(engine::ViewOf(own), mha, TppOptions{});
  ASSERT_TRUE(cta.ok());
  EXPECT_EQ(cta->p2_path(), Phase2Path::kCudaCores);
  // Half the rows: 2,048 warps, not enough to fill the machine.
  std::vector<kvcache::SeqId> half(common.begin(), common.begin() + 64);
  AttentionPlan few = kvcache::BuildAttentionPlan(tree, half, {.share = false});
  auto few_cta = TppWorkPlan::Build(engine::ViewOf(few), mha, TppOptions{});
  ASSERT_TRUE(few_cta.ok());
  EXPECT_EQ(few_cta->p2_path(), Phase2Path::kCudaCores);
}

// Llama-3-8B's heads (32 q / 8 kv) with tails of 1..64 tokens behind a shared prefix: at 256
// rows (2,048 warps of 4 heads) the warp kernel, which the H200 measured 5 % faster there
// (docs/benchmarks_tpp.md); at 64 rows (512 warps, the tree's size) the CTA kernel.
TEST(TppWorkPlanTest, WarpKernelForLlama3ShortTailsAtB256) {
  auto pool = *kvcache::ChunkPool::Create(4000, 64);
  kvcache::PrefixTree tree(&pool);
  std::vector<int32_t> prefix(256);
  for (size_t i = 0; i < prefix.size(); ++i) prefix[i] = static_cast<int32_t>(i);
  std::vector<kvcache::SeqId> rows;
  for (int r = 0; r < 256; ++r) {
    auto seq = prefix;
    for (int i = 0; i < 1 + r % 64; ++i) seq.push_back(10000 + 100 * r + i);
    rows.push_back(tree.Insert("", seq)->seq);
  }
  const TppProblem llama3{32, 8, 128, 64};
  AttentionPlan b256 = kvcache::BuildAttentionPlan(tree, rows);
  ASSERT_GT(b256.seg_tokens.size(), 0u);  // the prefix is shared
  auto warp = TppWorkPlan::Build(engine::ViewOf(b256), llama3, TppOptions{});
  ASSERT_TRUE(warp.ok());
  EXPECT_EQ(warp->p2_path(), Phase2Path::kWarpPerHead);
  std::vector<kvcache::SeqId> quarter(rows.begin(), rows.begin() + 64);
  AttentionPlan b64 = kvcache::BuildAttentionPlan(tree, quarter);
  auto cta = TppWorkPlan::Build(engine::ViewOf(b64), llama3, TppOptions{});
  ASSERT_TRUE(cta.ok());
  EXPECT_EQ(cta->p2_path(), Phase2Path::kCudaCores);
}

TEST(TppWorkPlanTest, RejectsBadProblems) {
  AttentionPlan empty;
  EXPECT_FALSE(TppWorkPlan::Build(engine::ViewOf(empty), TppProblem{6, 4, 128, 64}).ok());
  EXPECT_FALSE(TppWorkPlan::Build(engine::ViewOf(empty), TppProblem{8, 2, 100, 64}).ok());
  auto wp = TppWorkPlan::Build(engine::ViewOf(empty), TppProblem{8, 2, 128, 64});
  ASSERT_TRUE(wp.ok());
  EXPECT_EQ(wp->num_p2_items(), 0);
  EXPECT_GT(wp->workspace_bytes(), 0u);
}

}  // namespace
}  // namespace banyan::kernels::cuda::tpp
