#include "kernels/cuda/attention_work.h"

#include <algorithm>

#include "common/check.h"

namespace banyan::kernels::cuda {

void BuildDecodeWork(const PlanView& plan, int32_t item_tokens, DecodeWork* work) {
  BANYAN_CHECK(item_tokens >= 1) << item_tokens;
  DecodeWork& w = *work;
  w = DecodeWork{};
  w.num_rows = plan.num_rows;
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    const int32_t first_item = w.num_items();
    int32_t in_item = 0;  // tokens in the open item
    auto open_item = [&]() {
      w.item_row.push_back(r);
      w.item_span_begin.push_back(static_cast<int32_t>(w.span_chunk.size()));
      w.item_span_end.push_back(static_cast<int32_t>(w.span_chunk.size()));
      w.item_partial.push_back(-1);
      in_item = 0;
    };
    auto add_spans = [&](int32_t lo, int32_t hi) {
      for (int32_t s = lo; s < hi; ++s) {
        int32_t b = plan.span_begin[s];
        const int32_t e = plan.span_end[s];
        while (b < e) {
          if (w.num_items() == first_item || in_item == item_tokens) open_item();
          const int32_t take = std::min(e - b, item_tokens - in_item);
          w.span_chunk.push_back(plan.span_chunk[s]);
          w.span_begin.push_back(b);
          w.span_end.push_back(b + take);
          w.item_span_end.back() = static_cast<int32_t>(w.span_chunk.size());
          in_item += take;
          b += take;
        }
      }
    };
    for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      const int32_t seg = plan.row_seg_ids[i];
      add_spans(plan.seg_span_begin[seg], plan.seg_span_end[seg]);
    }
    add_spans(plan.row_span_begin[r], plan.row_span_end[r]);
    if (w.num_items() == first_item) open_item();  // no context: one empty item writes zeros
    const int32_t items = w.num_items() - first_item;
    if (items > 1) {
      w.merge_row.push_back(r);
      w.merge_partial_begin.push_back(w.num_partials);
      w.merge_count.push_back(items);
      for (int32_t k = 0; k < items; ++k) w.item_partial[first_item + k] = w.num_partials++;
    }
  }
}

void BuildPrefillWork(std::span<const PrefillSeq> seqs, int32_t group, int32_t block_m,
                      PrefillWork* work) {
  BANYAN_CHECK(group >= 1 && block_m >= 1) << group << " " << block_m;
  PrefillWork& w = *work;
  w = PrefillWork{};
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

}  // namespace banyan::kernels::cuda
