#include "kvcache/attention_plan.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "common/check.h"

namespace banyan::kvcache {
namespace {

using Node = PrefixTree::Node;

struct NodeRows {
  int32_t count = 0;
  int32_t first = 0;
  int32_t last = 0;
  int32_t segment = -1;  // segment the node's chunks belong to, -1: read privately
  bool cut = false;      // some row reads only a prefix of the node: never shared
};

// The spans of the node's first `tokens` tokens (all of them when tokens < 0).
void AddNodeSpans(const Node* n, int32_t chunk_size, std::vector<int32_t>* chunk,
                  std::vector<int32_t>* begin, std::vector<int32_t>* end, int32_t tokens = -1) {
  const int32_t stop = n->first_slot + (tokens < 0 ? n->size() : tokens);  // global slot bound
  for (size_t k = 0; k < n->chunks.size(); ++k) {
    auto [b, e] = n->SlotRange(k, chunk_size);
    const int32_t base = static_cast<int32_t>(k) * chunk_size;
    if (base + b >= stop) break;
    chunk->push_back(n->chunks[k]);
    begin->push_back(b);
    end->push_back(std::min(e, stop - base));
  }
}

struct SpanList {
  std::vector<int32_t> chunk, begin, end;
  void Add(const Node* n, int32_t c) { AddNodeSpans(n, c, &chunk, &begin, &end); }
};

}  // namespace

int64_t AttentionPlan::shared_tokens() const {
  int64_t t = 0;
  for (int32_t s : seg_tokens) t += s;
  return t;
}

int64_t AttentionPlan::private_tokens() const {
  int64_t t = 0;
  for (int32_t r = 0; r < num_rows(); ++r) {
    for (int32_t s = row_span_begin[r]; s < row_span_end[r]; ++s) t += span_end[s] - span_begin[s];
  }
  return t;
}

AttentionPlan BuildAttentionPlan(const PrefixTree& tree, std::span<const SeqId> rows,
                                 PlanOptions options) {
  return BuildAttentionPlan(tree, rows, {}, options);
}

AttentionPlan BuildAttentionPlan(const PrefixTree& tree, std::span<const SeqId> rows,
                                 std::span<const int32_t> row_lengths, PlanOptions options) {
  const int32_t c = tree.chunk_size();
  const int32_t num_rows = static_cast<int32_t>(rows.size());
  BANYAN_CHECK(row_lengths.empty() || row_lengths.size() == rows.size())
      << row_lengths.size() << " row lengths for " << rows.size() << " rows";
  // Plans may be built on several threads (tests, benchmarks): the counter is the one shared
  // state here.
  static std::atomic<uint64_t> last_build_id{0};
  AttentionPlan plan;
  plan.version = tree.shape_version();
  plan.build_id = last_build_id.fetch_add(1, std::memory_order_relaxed) + 1;
  plan.chunk_size = c;
  plan.rows.assign(rows.begin(), rows.end());
  plan.limited = !row_lengths.empty();

  std::vector<std::vector<const Node*>> paths(num_rows);
  std::vector<int32_t> limit(num_rows, -1);  // the row's context length when it cuts its path
  std::unordered_map<const Node*, NodeRows> info;
  for (int32_t r = 0; r < num_rows; ++r) {
    paths[r] = tree.Path(rows[r]);
    if (plan.limited) {
      const int32_t want = row_lengths[r];
      BANYAN_CHECK(want >= 1 && want <= tree.Length(rows[r]))
          << "row " << r << ": length " << want << " of a " << tree.Length(rows[r])
          << "-token sequence";
      while (!paths[r].empty() && paths[r].back()->depth_tokens >= want) paths[r].pop_back();
      const Node* last = paths[r].back();
      if (last->depth_tokens + last->size() > want) {
        limit[r] = want;
        info[last].cut = true;
      }
    }
    for (const Node* n : paths[r]) {
      NodeRows& ni = info[n];
      if (ni.count == 0) ni.first = r;
      ni.last = r;
      ++ni.count;
    }
  }

  // Phase-1 segments, in order of first appearance walking each row's path top-down. A node
  // joins its parent's segment when both cover the same rows (equal counts: a node's rows are a
  // subset of its parent's).
  std::vector<SpanList> seg_spans;
  if (options.share) {
    for (int32_t r = 0; r < num_rows; ++r) {
      for (const Node* n : paths[r]) {
        NodeRows& ni = info[n];
        if (ni.first != r || ni.count < 2 || ni.last - ni.first + 1 != ni.count || ni.cut) {
          continue;
        }
        auto parent = info.find(n->parent);
        if (parent != info.end() && parent->second.segment >= 0 &&
            parent->second.count == ni.count) {
          ni.segment = parent->second.segment;
        } else {
          ni.segment = static_cast<int32_t>(seg_spans.size());
          seg_spans.emplace_back();
          plan.seg_row_begin.push_back(ni.first);
          plan.seg_row_end.push_back(ni.last + 1);
          plan.seg_tokens.push_back(0);
        }
        seg_spans[ni.segment].Add(n, c);
        plan.seg_tokens[ni.segment] += n->size();
      }
    }
  }
  for (size_t s = 0; s < seg_spans.size(); ++s) {
    plan.seg_span_begin.push_back(plan.num_spans());
    plan.span_chunk.insert(plan.span_chunk.end(), seg_spans[s].chunk.begin(),
                           seg_spans[s].chunk.end());
    plan.span_begin.insert(plan.span_begin.end(), seg_spans[s].begin.begin(),
                           seg_spans[s].begin.end());
    plan.span_end.insert(plan.span_end.end(), seg_spans[s].end.begin(), seg_spans[s].end.end());
    plan.seg_span_end.push_back(plan.num_spans());
    plan.seg_partial_offset.push_back(plan.num_partials);
    plan.num_partials += plan.seg_row_end[s] - plan.seg_row_begin[s];
  }

  // Per row: private spans and segment membership, in path order.
  for (int32_t r = 0; r < num_rows; ++r) {
    plan.row_span_begin.push_back(plan.num_spans());
    plan.row_seg_begin.push_back(static_cast<int32_t>(plan.row_seg_ids.size()));
    plan.row_tail_span.push_back(-1);
    int32_t length = 0;
    int32_t last_seg = -1;
    for (const Node* n : paths[r]) {
      const bool cut_here = n == paths[r].back() && limit[r] >= 0;
      const int32_t tokens = cut_here ? limit[r] - n->depth_tokens : n->size();
      length += tokens;
      const NodeRows& ni = info[n];
      if (ni.segment >= 0) {
        if (ni.segment != last_seg) plan.row_seg_ids.push_back(ni.segment);
        last_seg = ni.segment;
        continue;
      }
      AddNodeSpans(n, c, &plan.span_chunk, &plan.span_begin, &plan.span_end, tokens);
      if (n == paths[r].back() && ni.count == 1 && !plan.limited) {
        plan.row_tail_span.back() = plan.num_spans() - 1;
      }
    }
    plan.row_span_end.push_back(plan.num_spans());
    plan.row_seg_end.push_back(static_cast<int32_t>(plan.row_seg_ids.size()));
    plan.row_length.push_back(length);
  }
  return plan;
}

bool PlanReusable(const AttentionPlan& plan, const PrefixTree& tree,
                  std::span<const SeqId> rows) {
  return !plan.limited && plan.version == tree.shape_version() &&
         std::equal(plan.rows.begin(), plan.rows.end(), rows.begin(), rows.end());
}

void AdvanceLengths(AttentionPlan& plan, const PrefixTree& tree) {
  BANYAN_CHECK(plan.version == tree.shape_version()) << "plan is stale: rebuild it";
  for (int32_t r = 0; r < plan.num_rows(); ++r) {
    int32_t length = tree.Length(plan.rows[r]);
    int32_t grown = length - plan.row_length[r];
    if (grown == 0) continue;
    int32_t tail = plan.row_tail_span[r];
    // Without a version change, a row can only have grown inside its private last chunk.
    BANYAN_CHECK(tail >= 0 && plan.span_end[tail] + grown <= plan.chunk_size)
        << "row " << r << " grew by " << grown << " without a shape change";
    plan.span_end[tail] += grown;
    plan.row_length[r] = length;
  }
}

}  // namespace banyan::kvcache
