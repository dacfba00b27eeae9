#include "kernels/cuda/prefill/attention_work.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/prefill/attention.h"

namespace banyan::kernels::cuda {

void BuildPrefillWork(std::span<const PrefillSeq> seqs, int32_t group, int32_t block_m,
                      PrefillWork* work) {
  BANYAN_CHECK(group >= 1 && block_m >= 1) << group << " " << block_m;
  PrefillWork& w = *work;
  w = PrefillWork{};
  w.block_m = block_m;
  w.q_row_begin = seqs.empty() ? 0 : seqs.front().q_row;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const PrefillSeq& s = seqs[i];
    BANYAN_CHECK(s.q_row == w.q_row_begin + w.num_tokens) << "prefill rows are not consecutive";
    w.seq_span_begin.push_back(static_cast<int32_t>(w.span_chunk.size()));
    int32_t pos = 0;
    for (size_t k = 0; k < s.span_chunk.size(); ++k) {
      w.span_chunk.push_back(s.span_chunk[k]);
      w.span_begin.push_back(s.span_begin[k]);
      w.span_end.push_back(s.span_end[k]);
      w.span_pos.push_back(pos);
      pos += s.span_end[k] - s.span_begin[k];
    }
    BANYAN_CHECK(pos >= s.pos0 + s.num_q)
        << "prefill spans hold " << pos << " tokens, need " << s.pos0 + s.num_q;
    w.seq_span_end.push_back(static_cast<int32_t>(w.span_chunk.size()));
    w.seq_pos0.push_back(s.pos0);
    w.seq_num_q.push_back(s.num_q);
    w.seq_q_row.push_back(s.q_row);
    for (int32_t j = 0; j < s.num_q; ++j) w.token_seq.push_back(static_cast<int32_t>(i));
    w.num_tokens += s.num_q;
  }
  // Tiles: later tiles see more keys, so they go first.
  std::vector<std::pair<int64_t, std::pair<int32_t, int32_t>>> tiles;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t packed = static_cast<int64_t>(seqs[i].num_q) * group;
    for (int64_t m0 = 0; m0 < packed; m0 += block_m) {
      const int64_t last_token = std::min(packed, m0 + block_m) - 1;
      const int64_t keys = seqs[i].pos0 + last_token / group + 1;
      tiles.push_back({keys, {static_cast<int32_t>(i), static_cast<int32_t>(m0)}});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& t : tiles) {
    w.tile_seq.push_back(t.second.first);
    w.tile_m0.push_back(t.second.second);
  }
}

void AddSharedPrefixGroups(std::span<const SharedPrefix> groups, int32_t group_heads,
                           PrefillWork* work) {
  PrefillWork& w = *work;
  BANYAN_CHECK(w.block_m == kPrefillBlockM)
      << "shared-prefix groups need tiles of " << kPrefillBlockM << ", not " << w.block_m;
  BANYAN_CHECK(group_heads >= 1) << group_heads;
  w.seq_t0.assign(static_cast<size_t>(w.num_seqs()), 0);
  w.grp_first.clear();
  w.grp_count.clear();
  w.grp_tiles.clear();
  w.grp_members.clear();
  w.gtile_group.clear();
  w.gtile_m0.clear();
  std::vector<int32_t> members;
  for (const SharedPrefix& g : groups) {
    members.clear();
    int64_t seen = g.positions;  // keys every member sees whole
    for (const int32_t s : g.seqs) {
      BANYAN_CHECK(s >= 0 && s < w.num_seqs()) << s;
      if (w.seq_num_q[s] != 1 || w.seq_t0[s] != 0) continue;  // one group per sequence
      members.push_back(s);
      seen = std::min<int64_t>(seen, int64_t{w.seq_pos0[s]} + 1);
    }
    // PrefillMmaKernel's key tiles are as long as its row tiles (kPrefillBlockM).
    const int32_t tiles = static_cast<int32_t>(seen / kPrefillBlockM);
    if (members.size() < 2 || tiles == 0) continue;
    const int32_t grp = static_cast<int32_t>(w.grp_first.size());
    w.grp_first.push_back(static_cast<int32_t>(w.grp_members.size()));
    w.grp_count.push_back(static_cast<int32_t>(members.size()));
    w.grp_tiles.push_back(tiles);
    for (const int32_t s : members) {
      w.grp_members.push_back(s);
      w.seq_t0[s] = tiles;
    }
    const int64_t packed = static_cast<int64_t>(members.size()) * group_heads;
    for (int64_t m0 = 0; m0 < packed; m0 += kPrefillBlockM) {
      w.gtile_group.push_back(grp);
      w.gtile_m0.push_back(static_cast<int32_t>(m0));
    }
  }
}

}  // namespace banyan::kernels::cuda
