// The host-side work lists of the CUDA attention kernels (no GPU needed): every row's items
// cover its context exactly once, in order, within the item size; partial states are numbered
// contiguously per merged row; prefill tiles cover every packed row once.
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/attention_work.h"
#include "kvcache/attention_plan.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cuda {
namespace {

// (chunk, slot) of every token a list of spans covers, in order.
std::vector<std::pair<int, int>> Tokens(const std::vector<int32_t>& chunk,
                                        const std::vector<int32_t>& begin,
                                        const std::vector<int32_t>& end, int lo, int hi) {
  std::vector<std::pair<int, int>> t;
  for (int s = lo; s < hi; ++s) {
    for (int x = begin[s]; x < end[s]; ++x) t.emplace_back(chunk[s], x);
  }
  return t;
}

TEST(AttentionWork, DecodeItemsCoverEachRowOnce) {
  BANYAN_SEEDED_RNG(rng);
  for (int iter = 0; iter < 20; ++iter) {
    auto pool = kvcache::ChunkPool::Create(2048, 16);
    ASSERT_TRUE(pool.ok());
    kvcache::PrefixTree tree(&*pool);
    ::banyan::testing::RandomTreeSpec spec;
    spec.global_prefix_max = 400;
    ::banyan::testing::BuildRandomTree(tree, rng, spec);
    const auto rows = tree.DfsOrder();
    for (bool share : {true, false}) {
      const auto plan = kvcache::BuildAttentionPlan(tree, rows, {.share = share});
      PlanView v;
      v.num_rows = plan.num_rows();
      v.span_chunk = plan.span_chunk.data();
      v.span_begin = plan.span_begin.data();
      v.span_end = plan.span_end.data();
      v.seg_span_begin = plan.seg_span_begin.data();
      v.seg_span_end = plan.seg_span_end.data();
      v.row_span_begin = plan.row_span_begin.data();
      v.row_span_end = plan.row_span_end.data();
      v.row_seg_begin = plan.row_seg_begin.data();
      v.row_seg_end = plan.row_seg_end.data();
      v.row_seg_ids = plan.row_seg_ids.data();
      const int item_tokens = 1 + static_cast<int>(rng() % 300);
      DecodeWork w;
      BuildDecodeWork(v, item_tokens, &w);
      std::map<int, std::vector<std::pair<int, int>>> got;
      std::map<int, int> items_of_row;
      for (int i = 0; i < w.num_items(); ++i) {
        const auto t = Tokens(w.span_chunk, w.span_begin, w.span_end, w.item_span_begin[i],
                              w.item_span_end[i]);
        EXPECT_LE(static_cast<int>(t.size()), item_tokens);
        EXPECT_GT(t.size(), 0u);
        auto& row = got[w.item_row[i]];
        row.insert(row.end(), t.begin(), t.end());
        ++items_of_row[w.item_row[i]];
      }
      int partials = 0;
      for (int m = 0; m < w.num_merge_rows(); ++m) {
        EXPECT_EQ(w.merge_partial_begin[m], partials);
        EXPECT_EQ(w.merge_count[m], items_of_row[w.merge_row[m]]);
        partials += w.merge_count[m];
      }
      EXPECT_EQ(partials, w.num_partials);
      for (int r = 0; r < plan.num_rows(); ++r) {
        std::vector<std::pair<int, int>> want;
        for (int i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
          const int seg = plan.row_seg_ids[i];
          const auto t = Tokens(plan.span_chunk, plan.span_begin, plan.span_end,
                                plan.seg_span_begin[seg], plan.seg_span_end[seg]);
          want.insert(want.end(), t.begin(), t.end());
        }
        const auto t = Tokens(plan.span_chunk, plan.span_begin, plan.span_end,
                              plan.row_span_begin[r], plan.row_span_end[r]);
        want.insert(want.end(), t.begin(), t.end());
        EXPECT_EQ(got[r], want) << "row " << r;
        EXPECT_EQ(static_cast<int>(want.size()), plan.row_length[r]);
      }
    }
  }
}

TEST(AttentionWork, PrefillTilesCoverEveryPackedRow) {
  BANYAN_SEEDED_RNG(rng);
  std::vector<std::vector<int32_t>> chunk(5), begin(5), end(5);
  std::vector<PrefillSeq> seqs;
  int row = 3;
  const int group = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < 5; ++i) {
    const int len = 1 + static_cast<int>(rng() % 500);
    for (int p = 0; p < len; p += 16) {
      chunk[i].push_back(i * 100 + p / 16);
      begin[i].push_back(0);
      end[i].push_back(std::min(16, len - p));
    }
    const int num_q = 1 + static_cast<int>(rng() % len);
    seqs.push_back(PrefillSeq{chunk[i], begin[i], end[i], len - num_q, num_q, row});
    row += num_q;
  }
  PrefillWork w;
  BuildPrefillWork(seqs, group, 64, &w);
  EXPECT_EQ(w.num_tokens, row - 3);
  EXPECT_EQ(w.q_row_begin, 3);
  std::map<int, std::vector<int>> covered;
  for (int t = 0; t < w.num_tiles(); ++t) {
    for (int m = w.tile_m0[t]; m < w.tile_m0[t] + 64; ++m) covered[w.tile_seq[t]].push_back(m);
  }
  for (int i = 0; i < 5; ++i) {
    const auto& c = covered[i];
    ASSERT_GE(static_cast<int>(c.size()), seqs[i].num_q * group);
    for (int m = 0; m < seqs[i].num_q * group; ++m) EXPECT_EQ(std::count(c.begin(), c.end(), m), 1);
    EXPECT_EQ(w.span_pos[w.seq_span_begin[i]], 0);
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
