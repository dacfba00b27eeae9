#include "kernels/cuda/prefill/attention_work.h"

#include <algorithm>
#include <climits>

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
                           int64_t max_slots, PrefillWork* work) {
  PrefillWork& w = *work;
  BANYAN_CHECK(w.block_m == kPrefillBlockM)
      << "shared-prefix groups need tiles of " << kPrefillBlockM << ", not " << w.block_m;
  BANYAN_CHECK(group_heads >= 1) << group_heads;
  w.seq_piece0.assign(static_cast<size_t>(w.num_seqs()), 0);
  w.grp_first.clear();
  w.grp_count.clear();
  w.grp_pieces.clear();
  w.grp_members.clear();
  w.gtile_group.clear();
  w.gtile_m0.clear();
  w.gtile_piece.clear();
  std::vector<int32_t> members;
  int64_t slots = 0;  // of the groups' members: AddInvariantPieces gives each its pieces' slots
  for (const SharedPrefix& g : groups) {
    members.clear();
    int64_t seen = g.positions;  // keys every member sees, its own new token's not included
    for (const int32_t s : g.seqs) {
      BANYAN_CHECK(s >= 0 && s < w.num_seqs()) << s;
      if (w.seq_num_q[s] != 1 || w.seq_piece0[s] != 0) continue;  // one group per sequence
      members.push_back(s);
      seen = std::min<int64_t>(seen, w.seq_pos0[s]);
    }
    const int32_t pieces = static_cast<int32_t>(seen / kInvariantPieceKeys);
    if (members.size() < 2 || pieces == 0) continue;
    int64_t need = 0;
    for (const int32_t s : members) {
      need += (int64_t{w.seq_pos0[s]} + kInvariantPieceKeys) / kInvariantPieceKeys;
    }
    if (slots + need > max_slots) continue;  // its members read the prefix each (same bits)
    slots += need;
    const int32_t grp = static_cast<int32_t>(w.grp_first.size());
    w.grp_first.push_back(static_cast<int32_t>(w.grp_members.size()));
    w.grp_count.push_back(static_cast<int32_t>(members.size()));
    w.grp_pieces.push_back(pieces);
    for (const int32_t s : members) {
      w.grp_members.push_back(s);
      w.seq_piece0[s] = pieces;
    }
    const int64_t packed = static_cast<int64_t>(members.size()) * group_heads;
    for (int32_t k = 0; k < pieces; ++k) {
      for (int64_t m0 = 0; m0 < packed; m0 += kPrefillBlockM) {
        w.gtile_group.push_back(grp);
        w.gtile_m0.push_back(static_cast<int32_t>(m0));
        w.gtile_piece.push_back(k);
      }
    }
  }
}

void AddInvariantPieces(int32_t group_heads, int64_t max_slots, PrefillWork* work) {
  PrefillWork& w = *work;
  BANYAN_CHECK(w.block_m == kPrefillBlockM)
      << "pieces need tiles of " << kPrefillBlockM << ", not " << w.block_m;
  const int32_t n = w.num_seqs();
  if (w.seq_piece0.empty()) w.seq_piece0.assign(static_cast<size_t>(n), 0);
  w.seq_pieces.assign(static_cast<size_t>(n), 0);
  w.seq_state.assign(static_cast<size_t>(n), 0);
  w.item_tile.clear();
  w.item_piece.clear();
  w.merge_seq.clear();
  w.num_fold_items = 0;
  w.state_slots = 0;
  // Group members first (their group's pieces are in the buffer already), then the others
  // while they fit max_slots.
  for (const bool members : {true, false}) {
    for (int32_t s = 0; s < n; ++s) {
      if ((w.seq_piece0[s] > 0) != members) continue;
      const int64_t keys = int64_t{w.seq_pos0[s]} + w.seq_num_q[s];
      const int32_t pieces =
          static_cast<int32_t>((keys + kInvariantPieceKeys - 1) / kInvariantPieceKeys);
      const bool one_tile = int64_t{w.seq_num_q[s]} * group_heads <= w.block_m;
      const int64_t need = int64_t{w.seq_num_q[s]} * pieces;
      if (!members && !(one_tile && pieces > 1 && w.state_slots + need <= max_slots)) continue;
      BANYAN_CHECK(one_tile && w.seq_piece0[s] < pieces)
          << "a group member of " << w.seq_num_q[s] << " rows, piece " << w.seq_piece0[s]
          << " of " << pieces;
      w.seq_pieces[s] = pieces;
      w.seq_state[s] = static_cast<int32_t>(w.state_slots);
      w.state_slots += need;
      BANYAN_CHECK(w.state_slots <= INT32_MAX) << "piece slots";
      w.merge_seq.push_back(s);
    }
  }
  // Tiles are longest first: the folding ones walk whole contexts, so they start first.
  for (int32_t t = 0; t < w.num_tiles(); ++t) {
    if (w.seq_pieces[w.tile_seq[t]] == 0) {
      w.item_tile.push_back(t);
      w.item_piece.push_back(-1);
    }
  }
  w.num_fold_items = w.num_items();
  for (int32_t t = 0; t < w.num_tiles(); ++t) {
    const int32_t s = w.tile_seq[t];
    for (int32_t k = w.seq_piece0[s]; k < w.seq_pieces[s]; ++k) {
      w.item_tile.push_back(t);
      w.item_piece.push_back(k);
    }
  }
}

}  // namespace banyan::kernels::cuda
