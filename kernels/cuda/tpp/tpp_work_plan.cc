// TppWorkPlan::Build: the host-side work partition of TPP decode attention, the mechanism. It
// checks the plan, summarizes its shape for the cost model (tpp_cost_model.h: which kernels, how
// far to split, how long the pieces), and executes the choices:
//
// Phase 1: every segment s (rows [r0, r1), M_s = (r1 - r0) * g queries per kv head) is cut into
// at most TppChoices::p1_splits[s] KV splits of about equal tokens at span boundaries, each into
// M tiles of p1_block_m queries: one item per (split, tile), one partial state per (split, row).
//
// Phase 2: each row's private spans (and on the generic path its segments' spans, as pieces of
// their own) are cut into at most TppPhase2Pieces pieces; a row with one piece merges its phase-1
// partials and writes the output in the same CTA, the others write a state per piece and the
// merge kernel finishes them.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "kernels/cuda/tpp/tpp_cost_model.h"

namespace banyan::kernels::cuda::tpp {
namespace {

struct Range {
  int32_t lo;
  int32_t hi;
};

int64_t SpanTokens(const PlanView& p, int32_t lo, int32_t hi) {
  int64_t t = 0;
  for (int32_t s = lo; s < hi; ++s) t += p.span_end[s] - p.span_begin[s];
  return t;
}

// Cuts spans [lo, hi) into at most n pieces of about equal token counts, at span boundaries.
// Always returns at least one piece (an empty range when lo == hi).
std::vector<Range> CutSpans(const PlanView& p, int32_t lo, int32_t hi, int32_t n) {
  std::vector<Range> out;
  const int64_t total = SpanTokens(p, lo, hi);
  if (n <= 1 || hi - lo <= 1 || total == 0) return {{lo, hi}};
  int32_t start = lo;
  int64_t acc = 0;
  int64_t k = 1;
  for (int32_t s = lo; s < hi; ++s) {
    acc += p.span_end[s] - p.span_begin[s];
    if (acc * n >= total * k && s + 1 < hi && static_cast<int32_t>(out.size()) < n - 1) {
      out.push_back({start, s + 1});
      start = s + 1;
      while (acc * n >= total * k) ++k;
    }
  }
  out.push_back({start, hi});
  return out;
}

int32_t CeilDiv(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

// Tokens the rows' private spans read per token of distinct chunk they touch: about 1 when every
// row's tail is its own KV, about the row count when the rows read one common prefix as private
// spans (a plan built without sharing).
double PrivateReuse(const PlanView& plan, int32_t chunk_size) {
  int32_t max_chunk = -1;
  int64_t tokens = 0;
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    for (int32_t s = plan.row_span_begin[r]; s < plan.row_span_end[r]; ++s) {
      max_chunk = std::max(max_chunk, plan.span_chunk[s]);
      tokens += plan.span_end[s] - plan.span_begin[s];
    }
  }
  if (max_chunk < 0) return 0.0;
  std::vector<uint8_t> seen(static_cast<size_t>(max_chunk) + 1, 0);
  int64_t distinct = 0;
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    for (int32_t s = plan.row_span_begin[r]; s < plan.row_span_end[r]; ++s) {
      uint8_t& b = seen[static_cast<size_t>(plan.span_chunk[s])];
      distinct += b == 0;
      b = 1;
    }
  }
  return static_cast<double>(tokens) / (static_cast<double>(distinct) * chunk_size);
}

void Append(std::vector<int32_t>& image, int64_t* offset, const std::vector<int32_t>& v) {
  *offset = static_cast<int64_t>(image.size());
  image.insert(image.end(), v.begin(), v.end());
  while (image.size() % 4 != 0) image.push_back(0);  // 16-byte aligned arrays
}

// Rejects problems and plans the kernels cannot run; sets *num_spans (the spans any segment or
// row reads).
absl::Status CheckPlan(const PlanView& plan, const TppProblem& problem, const TppOptions& options,
                       int32_t* num_spans) {
  if (problem.num_kv_heads <= 0 || problem.num_q_heads <= 0 ||
      problem.num_q_heads % problem.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tpp: ", problem.num_q_heads, " q heads and ",
                                                   problem.num_kv_heads, " kv heads"));
  }
  if (problem.head_dim <= 0 || problem.head_dim % 8 != 0 || problem.chunk_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("tpp: head_dim ", problem.head_dim,
                                                   ", chunk_size ", problem.chunk_size));
  }
  if (options.num_sms <= 0) return absl::InvalidArgumentError("tpp: num_sms must be positive");

  *num_spans = 0;
  for (int32_t s = 0; s < plan.num_segments; ++s) {
    *num_spans = std::max(*num_spans, plan.seg_span_end[s]);
  }
  for (int32_t r = 0; r < plan.num_rows; ++r) *num_spans = std::max(*num_spans, plan.row_span_end[r]);
  for (int32_t s = 0; s < *num_spans; ++s) {
    if (plan.span_begin[s] < 0 || plan.span_end[s] < plan.span_begin[s] ||
        plan.span_end[s] > problem.chunk_size || plan.span_chunk[s] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tpp: bad span ", s));
    }
  }
  for (int32_t s = 0; s < plan.num_segments; ++s) {
    if (plan.seg_row_begin[s] < 0 || plan.seg_row_end[s] <= plan.seg_row_begin[s] ||
        plan.seg_row_end[s] > plan.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat("tpp: segment ", s, " has rows [",
                                                     plan.seg_row_begin[s], ", ",
                                                     plan.seg_row_end[s], ") of ",
                                                     plan.num_rows));
    }
  }
  return absl::OkStatus();
}

// The cost model's view of a checked plan. Fails where a row lists a segment that does not hold
// it (first a segment id out of range on the generic path, which reads the segments' spans
// here, then any row outside its segment).
absl::StatusOr<TppShapeSummary> Summarize(const PlanView& plan, const TppProblem& problem,
                                          const TppOptions& options) {
  TppShapeSummary shape;
  shape.num_rows = plan.num_rows;
  shape.compiled_family = TppHasCompiledFamily(problem.head_dim);
  // Head dims without a compiled family have no phase 1: every row reads its segments' spans in
  // phase 2 too (as pieces of its own, merged with its private ones), on the generic kernel.
  const bool generic = !shape.compiled_family;
  for (int32_t s = 0; !generic && s < plan.num_segments; ++s) {
    shape.segments.push_back(TppSegmentShape{
        .tokens = SpanTokens(plan, plan.seg_span_begin[s], plan.seg_span_end[s]),
        .spans = plan.seg_span_end[s] - plan.seg_span_begin[s],
        .row_begin = plan.seg_row_begin[s],
        .row_end = plan.seg_row_end[s]});
  }
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    const int64_t private_tokens = SpanTokens(plan, plan.row_span_begin[r], plan.row_span_end[r]);
    shape.private_tokens += private_tokens;
    shape.phase2_tokens += private_tokens;
    for (int32_t i = plan.row_seg_begin[r]; generic && i < plan.row_seg_end[r]; ++i) {
      const int32_t s = plan.row_seg_ids[i];
      if (s < 0 || s >= plan.num_segments) {
        return absl::InvalidArgumentError(absl::StrCat("tpp: row ", r, " not in segment ", s));
      }
      shape.phase2_tokens += SpanTokens(plan, plan.seg_span_begin[s], plan.seg_span_end[s]);
    }
  }
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      const int32_t s = plan.row_seg_ids[i];
      if (s < 0 || s >= plan.num_segments || r < plan.seg_row_begin[s] ||
          r >= plan.seg_row_end[s]) {
        return absl::InvalidArgumentError(absl::StrCat("tpp: row ", r, " not in segment ", s));
      }
    }
  }
  if (TppReadsPrivateReuse(problem, plan.num_rows)) {
    shape.private_reuse = PrivateReuse(plan, problem.chunk_size);
  }
  // Only p1_wgmma -1 follows the device: ask it only then.
  const bool follows_device =
      options.p1_wgmma != 0 && options.p1_wgmma != 1 && options.p1_wgmma != 2;
  shape.wgmma_available = follows_device && TppPhase1WgmmaAvailable();
  return shape;
}

// Phase-1 work items (one per split x M tile) and the partial states they write.
struct Phase1Items {
  std::vector<int32_t> seg, lo, hi, m_begin, state;
  std::vector<int32_t> seg_state;   // per segment: its first state, then one per (split, row)
  std::vector<int32_t> seg_splits;  // per segment: the splits it was cut into
  int32_t states = 0;
  int32_t max_splits = 0;
};

Phase1Items PackPhase1(const PlanView& plan, int32_t g, const TppChoices& choices) {
  const int32_t nseg = static_cast<int32_t>(choices.p1_splits.size());
  Phase1Items p1;
  p1.seg_state.resize(nseg);
  p1.seg_splits.resize(nseg);
  for (int32_t s = 0; s < nseg; ++s) {
    const int32_t rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
    const int32_t m = rows * g;
    auto pieces = CutSpans(plan, plan.seg_span_begin[s], plan.seg_span_end[s],
                           choices.p1_splits[s]);
    p1.seg_state[s] = p1.states;
    p1.seg_splits[s] = static_cast<int32_t>(pieces.size());
    p1.max_splits = std::max(p1.max_splits, p1.seg_splits[s]);
    for (size_t j = 0; j < pieces.size(); ++j) {
      for (int32_t m0 = 0; m0 < m; m0 += choices.p1_block_m) {
        p1.seg.push_back(s);
        p1.lo.push_back(pieces[j].lo);
        p1.hi.push_back(pieces[j].hi);
        p1.m_begin.push_back(m0);
        p1.state.push_back(p1.states + static_cast<int32_t>(j) * rows);
      }
    }
    p1.states += p1.seg_splits[s] * rows;
  }
  return p1;
}

// Phase-2 work items (one per piece) and each row's merge list.
struct Phase2Items {
  std::vector<int32_t> row, lo, hi, state;  // state -1: final (merge and write in the same CTA)
  std::vector<int32_t> merge_begin, merge_end, merge_states, merge_rows;
  int32_t states = 0;        // all states, phase 1's first
  int32_t max_splits = 0;
  int64_t longest_item = 0;  // tokens of the longest item (about: pieces are near equal)
};

Phase2Items PackPhase2(const PlanView& plan, const TppChoices& choices, const Phase1Items& p1,
                       bool generic) {
  Phase2Items p2;
  p2.states = p1.states;
  p2.merge_begin.resize(plan.num_rows);
  p2.merge_end.resize(plan.num_rows);
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    std::vector<Range> pieces;
    int64_t row_tokens = 0;  // what the row reads in phase 2
    auto cut = [&](int32_t lo, int32_t hi) {
      const int64_t tokens = SpanTokens(plan, lo, hi);
      row_tokens += tokens;
      for (const Range& piece : CutSpans(plan, lo, hi, TppPhase2Pieces(choices, tokens, hi - lo))) {
        pieces.push_back(piece);
      }
    };
    p2.merge_begin[r] = static_cast<int32_t>(p2.merge_states.size());
    for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      const int32_t s = plan.row_seg_ids[i];
      if (generic) {
        cut(plan.seg_span_begin[s], plan.seg_span_end[s]);
        continue;
      }
      const int32_t rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
      for (int32_t j = 0; j < p1.seg_splits[s]; ++j) {
        p2.merge_states.push_back(p1.seg_state[s] + j * rows + (r - plan.seg_row_begin[s]));
      }
    }
    cut(plan.row_span_begin[r], plan.row_span_end[r]);
    p2.max_splits = std::max(p2.max_splits, static_cast<int32_t>(pieces.size()));
    p2.longest_item = std::max<int64_t>(
        p2.longest_item,
        CeilDiv(row_tokens, static_cast<int64_t>(std::max<size_t>(pieces.size(), 1))));
    // Rows with segments on the generic path have at least two pieces: merged, never final.
    const bool has_segments = plan.row_seg_end[r] > plan.row_seg_begin[r];
    if (pieces.size() == 1 && !(choices.deferred_merge && has_segments)) {
      p2.row.push_back(r);
      p2.lo.push_back(pieces[0].lo);
      p2.hi.push_back(pieces[0].hi);
      p2.state.push_back(-1);
    } else {
      p2.merge_rows.push_back(r);
      for (const Range& piece : pieces) {
        p2.row.push_back(r);
        p2.lo.push_back(piece.lo);
        p2.hi.push_back(piece.hi);
        p2.state.push_back(p2.states);
        p2.merge_states.push_back(p2.states);
        ++p2.states;
      }
    }
    p2.merge_end[r] = static_cast<int32_t>(p2.merge_states.size());
  }
  return p2;
}

}  // namespace

absl::StatusOr<TppWorkPlan> TppWorkPlan::Build(const PlanView& plan, const TppProblem& problem,
                                               const TppOptions& options) {
  int32_t num_spans = 0;
  if (absl::Status s = CheckPlan(plan, problem, options, &num_spans); !s.ok()) return s;
  absl::StatusOr<TppShapeSummary> shape = Summarize(plan, problem, options);
  if (!shape.ok()) return shape.status();
  const TppChoices choices = ChooseTppConfig(*shape, problem, options);
  const bool generic = !shape->compiled_family;
  const int32_t nseg = static_cast<int32_t>(shape->segments.size());  // segments phase 1 reads

  const Phase1Items p1 = PackPhase1(plan, problem.num_q_heads / problem.num_kv_heads, choices);
  const Phase2Items p2 = PackPhase2(plan, choices, p1, generic);

  TppWorkPlan wp;
  wp.problem_ = problem;
  wp.options_ = options;
  wp.num_rows_ = plan.num_rows;
  wp.num_segments_ = plan.num_segments;
  wp.num_spans_ = num_spans;
  wp.p1_block_m_ = choices.p1_block_m;
  wp.p1_path_ = choices.p1_path;
  wp.max_p1_splits_ = p1.max_splits;
  wp.num_p1_ = static_cast<int32_t>(p1.seg.size());
  wp.deferred_ = choices.deferred_merge;
  wp.p2_path_ = choices.p2_path;
  wp.p2_group_ = choices.p2_head_group;
  wp.p2_groups_ = choices.p2_head_groups;
  wp.max_p2_splits_ = p2.max_splits;
  wp.num_p2_ = static_cast<int32_t>(p2.row.size());
  wp.p2_stages_ = ChooseTppPhase2Stages(choices, problem, options, p2.longest_item);
  wp.num_merge_rows_ = static_cast<int32_t>(p2.merge_rows.size());
  wp.num_states_ = p2.states;

  // ---- The image.
  auto copy = [](const int32_t* p, int32_t n) {
    return n > 0 ? std::vector<int32_t>(p, p + n) : std::vector<int32_t>();
  };
  TppImageLayout& l = wp.layout_;
  std::vector<int32_t>& im = wp.image_;
  Append(im, &l.span_chunk, copy(plan.span_chunk, num_spans));
  Append(im, &l.span_begin, copy(plan.span_begin, num_spans));
  Append(im, &l.span_end, copy(plan.span_end, num_spans));
  Append(im, &l.seg_row_begin, copy(plan.seg_row_begin, nseg));
  Append(im, &l.seg_row_end, copy(plan.seg_row_end, nseg));
  Append(im, &l.p1_seg, p1.seg);
  Append(im, &l.p1_span_lo, p1.lo);
  Append(im, &l.p1_span_hi, p1.hi);
  Append(im, &l.p1_m_begin, p1.m_begin);
  Append(im, &l.p1_state, p1.state);
  Append(im, &l.p2_row, p2.row);
  Append(im, &l.p2_span_lo, p2.lo);
  Append(im, &l.p2_span_hi, p2.hi);
  Append(im, &l.p2_state, p2.state);
  Append(im, &l.row_merge_begin, p2.merge_begin);
  Append(im, &l.row_merge_end, p2.merge_end);
  Append(im, &l.merge_states, p2.merge_states);
  Append(im, &l.merge_rows, p2.merge_rows);
  if (im.empty()) im.resize(4, 0);
  return wp;
}

int32_t TppWorkPlan::p2_grid_y() const { return TppPhase2GridY(p2_path_, p2_groups_, problem_); }

size_t TppWorkPlan::workspace_bytes() const {
  auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t states = static_cast<size_t>(std::max(num_states_, 1));
  return round(states * problem_.num_q_heads * problem_.head_dim * sizeof(float)) +
         round(states * problem_.num_q_heads * sizeof(float));
}

void TppWorkPlan::UpdateSpanEnds(const int32_t* span_end) {
  std::copy(span_end, span_end + num_spans_, image_.begin() + layout_.span_end);
}

}  // namespace banyan::kernels::cuda::tpp
