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

// Sequences of random lengths (up to 2,000 keys) over chunks of 32, most of them decode rows.
struct RandomSeqs {
  std::vector<std::vector<int32_t>> chunk, begin, end;
  std::vector<PrefillSeq> seqs;
  RandomSeqs(int n, std::mt19937_64& rng) : chunk(n), begin(n), end(n) {
    int row = 0;
    for (int i = 0; i < n; ++i) {
      const int len = 1 + static_cast<int>(rng() % 2000);
      for (int p = 0; p < len; p += 32) {
        chunk[i].push_back(i * 100 + p / 32);
        begin[i].push_back(0);
        end[i].push_back(std::min(32, len - p));
      }
      const int num_q = i % 5 == 4 ? 1 + static_cast<int>(rng() % std::min(len, 120)) : 1;
      seqs.push_back(PrefillSeq{chunk[i], begin[i], end[i], len - num_q, num_q, row});
      row += num_q;
    }
  }
};

// The deterministic mode's shared-prefix groups: a group takes the whole pieces its members all
// see before their own token (its shared positions, and each member's keys before its token),
// only members with one new token, each sequence at most once; its tiles pack every member's q
// heads once per piece.
TEST(AttentionWork, SharedPrefixGroupsTakeWholePiecesEveryMemberSees) {
  BANYAN_SEEDED_RNG(rng);
  const int group_heads = 1 + static_cast<int>(rng() % 8);
  const int n = 40;
  const RandomSeqs rs(n, rng);
  PrefillWork w;
  BuildPrefillWork(rs.seqs, group_heads, kPrefillBlockM, &w);
  // Three groups over random members; the third repeats the first (kept, the first leaves it
  // no member; dropped, so is the third).
  std::vector<SharedPrefix> groups(3);
  for (int i = 0; i < n; ++i) groups[rng() % 2].seqs.push_back(i);
  for (SharedPrefix& g : groups) g.positions = static_cast<int32_t>(rng() % 1800);
  groups[2] = groups[0];
  AddSharedPrefixGroups(groups, group_heads, INT64_MAX, &w);

  ASSERT_EQ(w.seq_piece0.size(), static_cast<size_t>(n));
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
      EXPECT_EQ(w.seq_piece0[s], w.grp_pieces[grp]);
      seen = std::min<int64_t>(seen, w.seq_pos0[s]);
    }
    // Groups 0 and 1 split the sequences (the third repeats the first one's, so it keeps none).
    const int first = w.grp_members[w.grp_first[grp]];
    const SharedPrefix& g = groups[std::count(groups[0].seqs.begin(), groups[0].seqs.end(),
                                              first) > 0 ? 0 : 1];
    EXPECT_EQ(w.grp_pieces[grp], std::min<int64_t>(seen, g.positions) / kInvariantPieceKeys);
    EXPECT_GE(w.grp_pieces[grp], 1);
    // Every (piece, first row) once.
    std::vector<std::pair<int, int64_t>> tiles;
    for (int t = 0; t < w.num_gtiles(); ++t) {
      if (w.gtile_group[t] == static_cast<int>(grp)) tiles.push_back({w.gtile_piece[t], w.gtile_m0[t]});
    }
    std::sort(tiles.begin(), tiles.end());
    const int64_t per_piece = (members * group_heads + kPrefillBlockM - 1) / kPrefillBlockM;
    ASSERT_EQ(static_cast<int64_t>(tiles.size()), per_piece * w.grp_pieces[grp]);
    for (size_t t = 0; t < tiles.size(); ++t) {
      EXPECT_EQ(tiles[t].first, static_cast<int64_t>(t) / per_piece);
      EXPECT_EQ(tiles[t].second, static_cast<int64_t>(t) % per_piece * kPrefillBlockM);
    }
  }
  EXPECT_LE(w.grp_first.size(), 2u);
  for (int s = 0; s < n; ++s) {
    if (in_group[s] < 0) {
      EXPECT_EQ(w.seq_piece0[s], 0) << s;
    }
  }
  // Every eligible member of a group that has pieces is in it: a decode row the group's
  // positions and its own earlier keys give a whole piece to.
  for (int gi = 0; gi < 2; ++gi) {
    int eligible = 0;
    int64_t seen = groups[gi].positions;
    for (const int32_t s : groups[gi].seqs) {
      if (w.seq_num_q[s] != 1) continue;
      ++eligible;
      seen = std::min<int64_t>(seen, w.seq_pos0[s]);
    }
    if (eligible >= 2 && seen >= kInvariantPieceKeys) {
      for (const int32_t s : groups[gi].seqs) {
        if (w.seq_num_q[s] == 1) {
          EXPECT_GE(in_group[s], 0) << "group " << gi << " left out " << s;
        }
      }
    }
  }
}

// The deterministic mode's items: every tile runs once, either as one folding item (its
// sequence's rows span several tiles, or its keys one piece) or as one item per piece from its
// sequence's first own piece on; those sequences get disjoint state slots (rows x pieces) and
// are merged; folding items come first.
TEST(AttentionWork, InvariantPiecesCoverEveryTileOnce) {
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 50; ++trial) {
    const int group_heads = 1 + static_cast<int>(rng() % 8);
    const int n = 1 + static_cast<int>(rng() % 40);
    const RandomSeqs rs(n, rng);
    PrefillWork w;
    BuildPrefillWork(rs.seqs, group_heads, kPrefillBlockM, &w);
    // Half the trials cap the state buffer: a group only where its members fit, the others
    // fold where they do not.
    const int64_t cap = trial % 4 < 2 ? INT64_MAX : static_cast<int64_t>(rng() % 64);
    if (trial % 2 == 1) {
      std::vector<SharedPrefix> groups(1);
      for (int i = 0; i < n; ++i) groups[0].seqs.push_back(i);
      groups[0].positions = static_cast<int32_t>(rng() % 1800);
      AddSharedPrefixGroups(groups, group_heads, cap, &w);
    }
    AddInvariantPieces(group_heads, cap, &w);
    std::vector<int> folded(w.num_tiles(), 0);
    std::vector<std::vector<int>> pieces(w.num_tiles());
    bool split_seen = false;
    for (int i = 0; i < w.num_items(); ++i) {
      const int t = w.item_tile[i];
      ASSERT_GE(t, 0);
      ASSERT_LT(t, w.num_tiles());
      if (w.item_piece[i] < 0) {
        EXPECT_FALSE(split_seen) << "a folding item after a piece item";
        ++folded[t];
      } else {
        split_seen = true;
        pieces[t].push_back(w.item_piece[i]);
      }
    }
    EXPECT_EQ(w.num_fold_items, static_cast<int>(std::count(folded.begin(), folded.end(), 1)));
    for (int i = 0; i < w.num_items(); ++i) EXPECT_EQ(w.item_piece[i] < 0, i < w.num_fold_items);
    int64_t slots = 0;
    std::vector<int> merged(n, 0);
    for (const int32_t s : w.merge_seq) ++merged[s];
    for (int t = 0; t < w.num_tiles(); ++t) {
      const int s = w.tile_seq[t];
      const int64_t keys = int64_t{w.seq_pos0[s]} + w.seq_num_q[s];
      const int64_t all = (keys + kInvariantPieceKeys - 1) / kInvariantPieceKeys;
      const bool one_tile = int64_t{w.seq_num_q[s]} * group_heads <= kPrefillBlockM;
      if (w.seq_piece0[s] > 0 || (one_tile && all > 1 && cap == INT64_MAX)) {
        EXPECT_EQ(folded[t], 0);
        EXPECT_EQ(w.seq_pieces[s], all);
        EXPECT_EQ(merged[s], 1);
        std::vector<int> want;
        for (int k = w.seq_piece0[s]; k < all; ++k) want.push_back(k);
        EXPECT_EQ(pieces[t], want) << "tile " << t;
        slots += int64_t{w.seq_num_q[s]} * all;
      } else if (cap != INT64_MAX && w.seq_pieces[s] > 0) {  // split within the cap
        EXPECT_TRUE(one_tile && all > 1);
        EXPECT_EQ(folded[t], 0);
        slots += int64_t{w.seq_num_q[s]} * all;
      } else {
        EXPECT_EQ(folded[t], 1) << "tile " << t;
        EXPECT_TRUE(pieces[t].empty());
        EXPECT_EQ(w.seq_pieces[s], 0);
        EXPECT_EQ(merged[s], 0);
      }
    }
    EXPECT_EQ(w.state_slots, slots);
    if (cap != INT64_MAX) EXPECT_LE(w.state_slots, cap);
    // Slots: each merged sequence's [seq_state, + num_q x pieces) apart from every other's.
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const int32_t s : w.merge_seq) {
      ranges.push_back({w.seq_state[s], w.seq_state[s] + int64_t{w.seq_num_q[s]} * w.seq_pieces[s]});
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 0; i + 1 < ranges.size(); ++i) EXPECT_LE(ranges[i].second, ranges[i + 1].first);
    if (!ranges.empty()) EXPECT_LE(ranges.back().second, w.state_slots);
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
