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

// The deterministic mode's shared-prefix groups: a group takes the whole 64-key tiles its
// members all see (its shared positions, and each member's keys up to its token), only members
// with one new token, each sequence at most once; its tiles pack every member's q heads once.
TEST(AttentionWork, SharedPrefixGroupsTakeWholeTilesEveryMemberSees) {
  BANYAN_SEEDED_RNG(rng);
  const int group_heads = 1 + static_cast<int>(rng() % 8);
  const int n = 40;
  std::vector<std::vector<int32_t>> chunk(n), begin(n), end(n);
  std::vector<PrefillSeq> seqs;
  int row = 0;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + static_cast<int>(rng() % 700);
    for (int p = 0; p < len; p += 32) {
      chunk[i].push_back(i * 100 + p / 32);
      begin[i].push_back(0);
      end[i].push_back(std::min(32, len - p));
    }
    const int num_q = i % 5 == 4 ? 1 + static_cast<int>(rng() % len) : 1;
    seqs.push_back(PrefillSeq{chunk[i], begin[i], end[i], len - num_q, num_q, row});
    row += num_q;
  }
  PrefillWork w;
  BuildPrefillWork(seqs, group_heads, kPrefillBlockM, &w);
  // Three groups over random members; the third repeats the first (kept, the first leaves it
  // no member; dropped, so is the third).
  std::vector<SharedPrefix> groups(3);
  for (int i = 0; i < n; ++i) groups[rng() % 2].seqs.push_back(i);
  for (SharedPrefix& g : groups) g.positions = static_cast<int32_t>(rng() % 600);
  groups[2] = groups[0];
  AddSharedPrefixGroups(groups, group_heads, &w);

  ASSERT_EQ(w.seq_t0.size(), static_cast<size_t>(n));
  std::vector<int> in_group(n, -1);
  for (size_t grp = 0; grp < w.grp_first.size(); ++grp) {
    const int64_t members = w.grp_count[grp];
    EXPECT_GE(members, 2);
    int64_t seen = 1 << 30;
    for (int64_t k = 0; k < members; ++k) {
      const int s = w.grp_members[w.grp_first[grp] + k];
      EXPECT_EQ(in_group[s], -1) << "sequence " << s << " in two groups";
      in_group[s] = static_cast<int>(grp);
      EXPECT_EQ(w.seq_num_q[s], 1);
      EXPECT_EQ(w.seq_t0[s], w.grp_tiles[grp]);
      seen = std::min<int64_t>(seen, w.seq_pos0[s] + 1);
    }
    // Groups 0 and 1 split the sequences (the third repeats the first one's, so it keeps none).
    const int first = w.grp_members[w.grp_first[grp]];
    const SharedPrefix& g = groups[std::count(groups[0].seqs.begin(), groups[0].seqs.end(),
                                              first) > 0 ? 0 : 1];
    EXPECT_EQ(w.grp_tiles[grp], std::min<int64_t>(seen, g.positions) / kPrefillBlockM);
    EXPECT_GE(w.grp_tiles[grp], 1);
    std::vector<int64_t> m0s;
    for (int t = 0; t < w.num_gtiles(); ++t) {
      if (w.gtile_group[t] == static_cast<int>(grp)) m0s.push_back(w.gtile_m0[t]);
    }
    std::sort(m0s.begin(), m0s.end());
    ASSERT_EQ(static_cast<int64_t>(m0s.size()),
              (members * group_heads + kPrefillBlockM - 1) / kPrefillBlockM);
    for (size_t t = 0; t < m0s.size(); ++t) {
      EXPECT_EQ(m0s[t], static_cast<int64_t>(t) * kPrefillBlockM);
    }
  }
  EXPECT_LE(w.grp_first.size(), 2u);
  for (int s = 0; s < n; ++s) {
    if (in_group[s] < 0) {
      EXPECT_EQ(w.seq_t0[s], 0) << s;
    }
  }
  // Every eligible member of a group that has tiles is in it: a decode row the group's
  // positions and its own keys give a whole tile to.
  for (int gi = 0; gi < 2; ++gi) {
    int eligible = 0;
    int64_t seen = groups[gi].positions;
    for (const int32_t s : groups[gi].seqs) {
      if (w.seq_num_q[s] != 1) continue;
      ++eligible;
      seen = std::min<int64_t>(seen, w.seq_pos0[s] + 1);
    }
    if (eligible >= 2 && seen >= kPrefillBlockM) {
      for (const int32_t s : groups[gi].seqs) {
        if (w.seq_num_q[s] == 1) {
          EXPECT_GE(in_group[s], 0) << "group " << gi << " left out " << s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
