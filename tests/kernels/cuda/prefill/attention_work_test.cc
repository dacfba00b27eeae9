// The host-side work lists of the CUDA prefill attention kernels (no GPU needed): prefill tiles
// cover every packed row once, the tiles that see the most keys first, in tiles of 64 and 128 rows. (Decode's work plan: tests/kernels/cuda/tpp/tpp_work_plan_test.cc.)
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/prefill/attention_work.h"
#include "tests/testing/random.h"

namespace banyan::kernels::cuda {
namespace {

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
  for (const int32_t block_m : {kPrefillBlockM, kPrefillWgmmaBlockM}) {  // both kernels' tiles
    SCOPED_TRACE(block_m);
    PrefillWork w;
    BuildPrefillWork(seqs, group, block_m, &w);
    EXPECT_EQ(w.block_m, block_m);
    EXPECT_EQ(w.num_tokens, row - 3);
    EXPECT_EQ(w.q_row_begin, 3);
    std::map<int, std::vector<int>> covered;
    int64_t last_keys = INT64_MAX;  // tiles seeing more keys first
    for (int t = 0; t < w.num_tiles(); ++t) {
      const PrefillSeq& s = seqs[w.tile_seq[t]];
      const int64_t last = std::min<int64_t>(int64_t{s.num_q} * group, w.tile_m0[t] + block_m) - 1;
      const int64_t keys = s.pos0 + last / group + 1;
      EXPECT_LE(keys, last_keys);
      last_keys = keys;
      for (int m = w.tile_m0[t]; m < w.tile_m0[t] + block_m; ++m) covered[w.tile_seq[t]].push_back(m);
    }
    for (int i = 0; i < 5; ++i) {
      const auto& c = covered[i];
      ASSERT_GE(static_cast<int>(c.size()), seqs[i].num_q * group);
      for (int m = 0; m < seqs[i].num_q * group; ++m) EXPECT_EQ(std::count(c.begin(), c.end(), m), 1);
      EXPECT_EQ(w.span_pos[w.seq_span_begin[i]], 0);
    }
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
