// The cost model's split from the packer (tpp_cost_model.h, tpp_work_plan.cc) changed no work
// plan: BuildReference below is TppWorkPlan::Build as it was before the split (6119034's
// kernels/cuda/tpp/tpp_work_plan.cc, copied once, only its output type renamed: the reference of
// the split, not code to maintain), and every public field of Build's plan, the image with every
// work item first, must equal it on a few hundred random plans and options, and on broken plans
// the error must be the same.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/plan_view.h"
#include "gtest/gtest.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "kvcache/attention_plan.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cuda::tpp {
namespace {

// TppWorkPlan's fields, as the reference sets them.
struct ReferencePlan {
  TppProblem problem;
  TppOptions options;
  TppImageLayout layout;
  std::vector<int32_t> image;
  int32_t num_rows = 0, num_segments = 0, num_spans = 0;
  int32_t num_p1 = 0, num_p2 = 0, num_merge_rows = 0, num_states = 0;
  int32_t p1_block_m = 64, p2_group = 1, p2_groups = 1, p2_stages = 3;
  Phase1Path p1_path = Phase1Path::kMmaSync;
  Phase2Path p2_path = Phase2Path::kCudaCores;
  int32_t max_p1_splits = 0, max_p2_splits = 0;
  bool deferred = false;
};

int32_t ReferenceGridY(const ReferencePlan& wp);

// ---- The reference: TppWorkPlan::Build before the split.
// Attainable rates used by the split model (H200, measured for these kernels; docs/tpp.md).
constexpr double kBytesPerSecond = 3.6e12;
constexpr double kWaveSeconds = 1e-6;  // Q tile load + first K/V tiles of a CTA
// Two latencies that bandwidth and FLOPs do not show, fitted on forced split counts of 15 shared
// cases (docs/benchmarks_tpp.md, 2026-12-03, "the split model"): each CTA's own fill and
// epilogue (work tables, Q, the first K/V tiles, the partials' stores), counted as the CTAs per
// resident slot on average (items / slots, so a fraction when the grid does not fill the
// machine); and each round of the merge's dependent loads (MergeList: the state indices, then
// up to kTppMergeAhead states at a time) over the longest merge list.
constexpr double kCtaSeconds = 6e-6;
constexpr double kMergeRoundSeconds = 1.5e-6;

// The phase-1 kernel's resident CTAs per SM and its attainable MMA rate.
struct Phase1Rates {
  int32_t occupancy;
  double flops_per_second;
};
Phase1Rates RatesFor(Phase1Path path, int32_t block_m) {
  if (path != Phase1Path::kWgmma) return {2, 350e12};  // mma.sync (and the cooperative wgmma)
  if (block_m == 128) return {1, 460e12};              // warp-specialised wgmma, 384 threads
  return {2, 360e12};                                  // wgmma, one warpgroup
}

Phase1Path ResolvePath(int32_t p1_wgmma) {
  switch (p1_wgmma) {
    case 0: return Phase1Path::kMmaSync;
    case 2: return Phase1Path::kWgmmaCooperative;
    case 1: return Phase1Path::kWgmma;
    default: return TppPhase1WgmmaAvailable() ? Phase1Path::kWgmma : Phase1Path::kMmaSync;
  }
}

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

absl::StatusOr<ReferencePlan> BuildReference(const PlanView& plan, const TppProblem& problem,
                                             const TppOptions& options) {
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

  ReferencePlan wp;
  wp.problem = problem;
  wp.options = options;
  wp.num_rows = plan.num_rows;
  wp.num_segments = plan.num_segments;
  const int32_t g = problem.num_q_heads / problem.num_kv_heads;
  const int32_t hkv = problem.num_kv_heads;
  const int32_t hq = problem.num_q_heads;
  const int32_t d = problem.head_dim;
  // Head dims without a compiled family have no phase 1: every row reads its segments' spans in
  // phase 2 too (as pieces of its own, merged with its private ones), on the generic kernel.
  const bool generic = !TppHasCompiledFamily(d);
  const int32_t all_segs = plan.num_segments;
  const int32_t nseg = generic ? 0 : all_segs;  // segments phase 1 reads

  int32_t num_spans = 0;
  for (int32_t s = 0; s < all_segs; ++s) num_spans = std::max(num_spans, plan.seg_span_end[s]);
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    num_spans = std::max(num_spans, plan.row_span_end[r]);
  }
  wp.num_spans = num_spans;
  for (int32_t s = 0; s < num_spans; ++s) {
    if (plan.span_begin[s] < 0 || plan.span_end[s] < plan.span_begin[s] ||
        plan.span_end[s] > problem.chunk_size || plan.span_chunk[s] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tpp: bad span ", s));
    }
  }

  for (int32_t s = 0; s < all_segs; ++s) {
    if (plan.seg_row_begin[s] < 0 || plan.seg_row_end[s] <= plan.seg_row_begin[s] ||
        plan.seg_row_end[s] > plan.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat("tpp: segment ", s, " has rows [",
                                                     plan.seg_row_begin[s], ", ",
                                                     plan.seg_row_end[s], ") of ",
                                                     plan.num_rows));
    }
  }

  // ---- Phase 1: M tile and KV splits.
  std::vector<int64_t> seg_tokens(nseg);
  std::vector<int32_t> seg_m(nseg);
  double weighted_m = 0, weight = 0;
  for (int32_t s = 0; s < nseg; ++s) {
    seg_tokens[s] = SpanTokens(plan, plan.seg_span_begin[s], plan.seg_span_end[s]);
    seg_m[s] = (plan.seg_row_end[s] - plan.seg_row_begin[s]) * g;
    weighted_m += static_cast<double>(seg_m[s]) * seg_tokens[s];
    weight += static_cast<double>(seg_tokens[s]);
  }
  int32_t block_m = options.p1_block_m;
  if (block_m != 64 && block_m != 128) {
    block_m = (weight > 0 && weighted_m / weight >= 128) ? 128 : 64;
  }
  wp.p1_block_m = block_m;
  wp.p1_path = ResolvePath(options.p1_wgmma);
  const Phase1Rates rates = RatesFor(wp.p1_path, block_m);
  const int32_t occupancy = rates.occupancy;  // resident phase-1 CTAs per SM
  const double kMmaFlopsPerSecond = rates.flops_per_second;

  int64_t max_tokens = 0;
  for (int32_t s = 0; s < nseg; ++s) max_tokens = std::max(max_tokens, seg_tokens[s]);
  auto splits_for = [&](int32_t s, int64_t len) {
    const int32_t spans = plan.seg_span_end[s] - plan.seg_span_begin[s];
    int32_t k = CeilDiv(seg_tokens[s], std::max<int64_t>(len, 1));
    k = std::min({k, options.p1_max_splits, std::max(spans, 1),
                  std::max(1, static_cast<int32_t>(seg_tokens[s] / options.p1_min_split_tokens))});
    return std::max(k, 1);
  };
  // A row merges the states of every segment on its path. The segments' row ranges nest (they
  // are subtrees in DFS order), so a row's list is its deepest segment's chain of enclosing
  // ones: order the segments outermost first and link each to the one that encloses it, once,
  // so that estimate() sums the chains in O(segments) instead of walking the rows.
  std::vector<int32_t> seg_order(nseg), seg_parent(nseg, -1);
  for (int32_t s = 0; s < nseg; ++s) seg_order[s] = s;
  std::sort(seg_order.begin(), seg_order.end(), [&](int32_t a, int32_t b) {
    return plan.seg_row_begin[a] != plan.seg_row_begin[b]
               ? plan.seg_row_begin[a] < plan.seg_row_begin[b]
               : plan.seg_row_end[a] > plan.seg_row_end[b];
  });
  {
    std::vector<int32_t> open;  // enclosing segments of the current one, outermost first
    for (int32_t s : seg_order) {
      while (!open.empty() && plan.seg_row_end[open.back()] <= plan.seg_row_begin[s]) {
        open.pop_back();
      }
      if (!open.empty()) seg_parent[s] = open.back();
      open.push_back(s);
    }
  }
  std::vector<int32_t> chain(nseg);  // estimate's scratch: states merged down to the segment
  auto estimate = [&](int64_t len) {
    double bytes = 0, partial_bytes = 0, flops = 0, items = 0, item_time = 0;
    const double cta_bytes_per_second = kBytesPerSecond / (occupancy * options.num_sms);
    const double cta_flops_per_second = kMmaFlopsPerSecond / (occupancy * options.num_sms);
    for (int32_t s = 0; s < nseg; ++s) {
      const int32_t k = splits_for(s, len);
      const int32_t tiles = CeilDiv(seg_m[s], block_m);
      const int32_t rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
      const double seg_bytes = 4.0 * seg_tokens[s] * hkv * d;  // K and V, 2 bytes each
      const double seg_flops = 4.0 * CeilDiv(seg_m[s], 16) * 16.0 * seg_tokens[s] * d * hkv;
      bytes += seg_bytes;
      partial_bytes += k * rows * hq * (4.0 * d + 4.0);  // partial states (o, lse)
      flops += seg_flops;
      items += static_cast<double>(k) * tiles * hkv;
      // The largest CTA of the segment runs at one CTA's share of the machine.
      item_time = std::max(item_time, std::max(seg_bytes / (k * hkv) / cta_bytes_per_second,
                                               seg_flops / (k * tiles * hkv) / cta_flops_per_second));
    }
    // One mma.sync CTA per SM cannot stream at the SM's share of bandwidth (a tile's latency
    // is exposed): count full bandwidth from `occupancy` CTAs per SM (the warp-specialised
    // kernel's producer keeps four tiles in flight on its own).
    const double mem_util =
        std::min(1.0, items / (occupancy * static_cast<double>(options.num_sms)));
    const double capacity = static_cast<double>(options.num_sms) * occupancy;
    const double waves = std::ceil(items / capacity);
    const double flop_util = items / (waves * capacity);
    // The longest merge list (outermost first, so a parent's chain is ready before its children).
    int32_t max_states = 0;
    for (int32_t s : seg_order) {
      chain[s] = splits_for(s, len) + (seg_parent[s] >= 0 ? chain[seg_parent[s]] : 0);
      max_states = std::max(max_states, chain[s]);
    }
    // Phase 1 (written partials overlap its reads or its MMAs) with the CTAs' own latencies
    // spread over the slots, then the merge reads the partials back in rounds of dependent
    // loads, and every wave of CTAs pays a pipeline fill.
    const double merge_rounds = max_states > 1 ? CeilDiv(max_states, kTppMergeAhead) : 0;
    return std::max({(bytes + partial_bytes) / (kBytesPerSecond * mem_util),
                     flops / (kMmaFlopsPerSecond * flop_util), item_time}) +
           items / capacity * kCtaSeconds + partial_bytes / kBytesPerSecond +
           merge_rounds * kMergeRoundSeconds + waves * kWaveSeconds;
  };
  int64_t best_len = std::max<int64_t>(max_tokens, 1);
  double best = nseg > 0 ? estimate(best_len) : 0;
  if (options.p1_splits > 0 && nseg > 0) {
    best_len = std::max<int64_t>(CeilDiv(max_tokens, options.p1_splits), 1);
    best = estimate(best_len);  // the deferred-merge choice below reads it
  }
  for (int32_t k = 2; options.p1_splits <= 0 && k <= options.p1_max_splits && nseg > 0; ++k) {
    const int64_t len = (max_tokens + k - 1) / k;
    if (len < options.p1_min_split_tokens) break;
    const double t = estimate(len);
    if (t < best * 0.97) {  // a split must pay for itself clearly
      best = t;
      best_len = len;
    }
  }

  std::vector<int32_t> p1_seg, p1_lo, p1_hi, p1_m, p1_state;
  std::vector<int32_t> seg_state(nseg), seg_splits(nseg);
  int32_t states = 0;
  for (int32_t s = 0; s < nseg; ++s) {
    const int32_t rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
    if (rows <= 0) return absl::InvalidArgumentError(absl::StrCat("tpp: empty segment ", s));
    auto pieces = CutSpans(plan, plan.seg_span_begin[s], plan.seg_span_end[s],
                           splits_for(s, best_len));
    seg_state[s] = states;
    seg_splits[s] = static_cast<int32_t>(pieces.size());
    wp.max_p1_splits = std::max(wp.max_p1_splits, seg_splits[s]);
    for (size_t j = 0; j < pieces.size(); ++j) {
      for (int32_t m0 = 0; m0 < seg_m[s]; m0 += block_m) {
        p1_seg.push_back(s);
        p1_lo.push_back(pieces[j].lo);
        p1_hi.push_back(pieces[j].hi);
        p1_m.push_back(m0);
        p1_state.push_back(states + static_cast<int32_t>(j) * rows);
      }
    }
    states += seg_splits[s] * rows;
  }
  wp.num_p1 = static_cast<int32_t>(p1_seg.size());

  // ---- Phase 2: private-span splits; deferred merge when overlapping the phases pays.
  {
    int64_t private_tokens = 0;
    for (int32_t r = 0; r < plan.num_rows; ++r) {
      private_tokens += SpanTokens(plan, plan.row_span_begin[r], plan.row_span_end[r]);
    }
    const double t1 = nseg > 0 ? best : 0.0;
    const double t2 = 4.0 * private_tokens * hkv * d / kBytesPerSecond;
    const double merge = 2.0 * plan.num_rows * hq * (4.0 * d + 4.0) / kBytesPerSecond + 3e-6;
    wp.deferred = nseg > 0 && (options.defer_merge == 1 ||
                                (options.defer_merge < 0 && std::min(t1, t2) > merge + 5e-6));
  }
  // The tokens each row reads in phase 2: its private spans, and on the generic path its
  // segments' spans too.
  std::vector<int64_t> row_tokens(plan.num_rows);
  int64_t total = 0;
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    row_tokens[r] = SpanTokens(plan, plan.row_span_begin[r], plan.row_span_end[r]);
    for (int32_t i = plan.row_seg_begin[r]; generic && i < plan.row_seg_end[r]; ++i) {
      const int32_t s = plan.row_seg_ids[i];
      if (s < 0 || s >= all_segs) {
        return absl::InvalidArgumentError(absl::StrCat("tpp: row ", r, " not in segment ", s));
      }
      row_tokens[r] += SpanTokens(plan, plan.seg_span_begin[s], plan.seg_span_end[s]);
    }
    total += row_tokens[r];
  }
  // Tensor cores for phase 2 where they pay (measured on the H200, docs/tpp.md): GQA >= 4 with
  // private tails of a 64-slot tile or more on average (2x at 32K-token tails, 9 % at 32..256);
  // below that a CTA is latency-bound and the CUDA-core kernel, more CTAs per SM, is 4-11 %
  // faster (tails of 1..64).
  const int64_t rows = std::max<int64_t>(plan.num_rows, 1);
  const bool p2_mma =
      options.p2_mma == 1 ? g >= 2 : (options.p2_mma < 0 && g >= 4 && total >= 64 * rows);
  // One warp per (item, kv head, up to 4 of its q heads) (fits to the H200 measurements in
  // docs/tpp.md, not a model):
  //  - where the CTA kernels wait on latency: short tails, with enough warps that each one's
  //    serial walk over its tail and heads is covered many times over (>= 1,024 warps and
  //    >= 12 x mean tail x heads per warp; below it, e.g. 64 rows of a tree or Hydragen's
  //    B = 64 / 256, the CTA kernels' 128 threads per (row, kv head) win by 3-40 %);
  //  - and for long tails that re-read the same chunks (a plan without sharing over a common
  //    prefix, the paged baseline: served from L2, where the warp kernel's direct loads ran
  //    1.3-1.5x faster than the cp.async pipeline) when the machine is full (>= 4,096 warps).
  //    Tails of distinct KV stream from HBM, where the CTA kernel was 5-10 % faster.
  const int32_t warp_heads = g >= 3 ? 4 : g;
  const int64_t warps = rows * hkv * CeilDiv(g, warp_heads);
  const bool short_tails = total <= options.p2_warp_max_mean_tail * rows && warps >= 1024 &&
                           warps * rows >= 12 * total * warp_heads;
  bool p2_warp = !p2_mma && (options.p2_warp == 1 || (options.p2_warp < 0 && short_tails));
  if (!p2_mma && !p2_warp && options.p2_warp < 0 && warps >= 4096) {
    p2_warp = PrivateReuse(plan, problem.chunk_size) >= 2.0;
  }
  if (generic) {
    wp.p2_path = Phase2Path::kGeneric;
    wp.p2_group = 1;  // a warp per q head
  } else if (p2_mma) {
    wp.p2_path = Phase2Path::kTensorCores;
    wp.p2_group = 16;
  } else if (p2_warp) {
    wp.p2_path = Phase2Path::kWarpPerHead;
    wp.p2_group = warp_heads;  // q heads per warp; four warps per CTA
  } else {
    wp.p2_path = Phase2Path::kCudaCores;
    wp.p2_group = g >= 8 ? 8 : (g > 4 ? 8 : (g > 2 ? 4 : g));
  }
  wp.p2_groups = CeilDiv(g, wp.p2_group);
  const int64_t target_ctas = static_cast<int64_t>(options.p2_ctas_per_sm) * options.num_sms;
  const int64_t per_row_ctas = ReferenceGridY(wp);
  int64_t split_len = std::max<int64_t>(options.p2_min_split_tokens,
                                        (total * per_row_ctas + target_ctas - 1) / target_ctas);
  if (options.p2_max_split_tokens > 0) {
    split_len = std::min<int64_t>(split_len, options.p2_max_split_tokens);
  }
  std::vector<int32_t> p2_row, p2_lo, p2_hi, p2_state, merge_rows;
  std::vector<int32_t> merge_begin(plan.num_rows), merge_end(plan.num_rows), merge_states;
  int64_t longest_item = 0;  // tokens of the longest phase-2 item (about: pieces are near equal)
  // A span range cut into pieces of about split_len tokens (at most p2_max_splits). The count
  // rounds down, so that the items stay within the CTA target: rounding up put Hydragen's B = 64
  // paged case (64 rows of 32K) at 9 pieces a row, 576 tensor-core CTAs for 528 resident slots,
  // a second wave of 48 CTAs (measured on the H200: 308 us, 263 us at 8 pieces). It rounds up
  // where p2_max_split_tokens set the length: pieces are at most that long.
  const bool length_capped =
      options.p2_max_split_tokens > 0 && split_len == options.p2_max_split_tokens;
  auto cut = [&](int32_t lo, int32_t hi) {
    const int64_t tokens = SpanTokens(plan, lo, hi);
    const int64_t pieces = length_capped ? CeilDiv(tokens, split_len) : tokens / split_len;
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(
        {pieces, options.p2_max_splits, std::max(hi - lo, 1)}));
    return CutSpans(plan, lo, hi, std::max(k, 1));
  };
  for (int32_t r = 0; r < plan.num_rows; ++r) {
    std::vector<Range> pieces;
    merge_begin[r] = static_cast<int32_t>(merge_states.size());
    for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      const int32_t s = plan.row_seg_ids[i];
      if (s < 0 || s >= all_segs || r < plan.seg_row_begin[s] || r >= plan.seg_row_end[s]) {
        return absl::InvalidArgumentError(absl::StrCat("tpp: row ", r, " not in segment ", s));
      }
      if (generic) {
        for (const Range& piece : cut(plan.seg_span_begin[s], plan.seg_span_end[s])) {
          pieces.push_back(piece);
        }
        continue;
      }
      const int32_t rows = plan.seg_row_end[s] - plan.seg_row_begin[s];
      for (int32_t j = 0; j < seg_splits[s]; ++j) {
        merge_states.push_back(seg_state[s] + j * rows + (r - plan.seg_row_begin[s]));
      }
    }
    for (const Range& piece : cut(plan.row_span_begin[r], plan.row_span_end[r])) {
      pieces.push_back(piece);
    }
    wp.max_p2_splits = std::max(wp.max_p2_splits, static_cast<int32_t>(pieces.size()));
    longest_item = std::max<int64_t>(
        longest_item, CeilDiv(row_tokens[r], static_cast<int64_t>(std::max<size_t>(pieces.size(), 1))));
    // Rows with segments on the generic path have at least two pieces: merged, never final.
    const bool has_segments = plan.row_seg_end[r] > plan.row_seg_begin[r];
    if (pieces.size() == 1 && !(wp.deferred && has_segments)) {
      p2_row.push_back(r);
      p2_lo.push_back(pieces[0].lo);
      p2_hi.push_back(pieces[0].hi);
      p2_state.push_back(-1);  // final: merge and write the output in the same CTA
    } else {
      merge_rows.push_back(r);
      for (const Range& piece : pieces) {
        p2_row.push_back(r);
        p2_lo.push_back(piece.lo);
        p2_hi.push_back(piece.hi);
        p2_state.push_back(states);
        merge_states.push_back(states);
        ++states;
      }
    }
    merge_end[r] = static_cast<int32_t>(merge_states.size());
  }
  wp.num_p2 = static_cast<int32_t>(p2_row.size());
  {
    // A phase-2 tile: 64 slots on tensor cores; on CUDA cores 4 slots per token lane,
    // 128 / (d / 8) lanes (32 slots at d = 128).
    const int64_t tile = p2_mma ? 64 : 4 * 128 / (d / 8);
    const bool no_pipeline =
        wp.p2_path == Phase2Path::kWarpPerHead || wp.p2_path == Phase2Path::kGeneric;
    wp.p2_stages = no_pipeline ? 2  // one value, so that it never changes a launch signature
                    : options.p2_stages == 2 || options.p2_stages == 3
                        ? options.p2_stages
                        : (longest_item <= 8 * tile ? 2 : 3);
  }
  wp.num_merge_rows = static_cast<int32_t>(merge_rows.size());
  wp.num_states = states;

  // ---- The image.
  auto copy = [](const int32_t* p, int32_t n) {
    return n > 0 ? std::vector<int32_t>(p, p + n) : std::vector<int32_t>();
  };
  TppImageLayout& l = wp.layout;
  std::vector<int32_t>& im = wp.image;
  Append(im, &l.span_chunk, copy(plan.span_chunk, num_spans));
  Append(im, &l.span_begin, copy(plan.span_begin, num_spans));
  Append(im, &l.span_end, copy(plan.span_end, num_spans));
  Append(im, &l.seg_row_begin, copy(plan.seg_row_begin, nseg));
  Append(im, &l.seg_row_end, copy(plan.seg_row_end, nseg));
  Append(im, &l.p1_seg, p1_seg);
  Append(im, &l.p1_span_lo, p1_lo);
  Append(im, &l.p1_span_hi, p1_hi);
  Append(im, &l.p1_m_begin, p1_m);
  Append(im, &l.p1_state, p1_state);
  Append(im, &l.p2_row, p2_row);
  Append(im, &l.p2_span_lo, p2_lo);
  Append(im, &l.p2_span_hi, p2_hi);
  Append(im, &l.p2_state, p2_state);
  Append(im, &l.row_merge_begin, merge_begin);
  Append(im, &l.row_merge_end, merge_end);
  Append(im, &l.merge_states, merge_states);
  Append(im, &l.merge_rows, merge_rows);
  if (im.empty()) im.resize(4, 0);
  return wp;
}

int32_t ReferenceGridY(const ReferencePlan& wp) {
  if (wp.p2_path == Phase2Path::kGeneric) return CeilDiv(wp.problem.num_q_heads, 4);
  if (wp.p2_path == Phase2Path::kWarpPerHead) {
    return CeilDiv(static_cast<int64_t>(wp.problem.num_kv_heads) * wp.p2_groups, 4);
  }
  return wp.problem.num_kv_heads * wp.p2_groups;
}

size_t ReferenceWorkspaceBytes(const ReferencePlan& wp) {
  auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t states = static_cast<size_t>(std::max(wp.num_states, 1));
  return round(states * wp.problem.num_q_heads * wp.problem.head_dim * sizeof(float)) +
         round(states * wp.problem.num_q_heads * sizeof(float));
}

// ---- The comparison.

void ExpectSame(const absl::StatusOr<TppWorkPlan>& got, const absl::StatusOr<ReferencePlan>& want,
                const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.ok(), want.ok()) << (got.ok() ? want.status() : got.status());
  if (!got.ok()) {
    EXPECT_EQ(got.status(), want.status());
    return;
  }
  const TppWorkPlan& g = *got;
  const ReferencePlan& w = *want;
  EXPECT_EQ(g.image(), w.image);  // every work item, merge list and table, in order
  const TppImageLayout& gl = g.layout();
  const TppImageLayout& wl = w.layout;
  const int64_t got_offsets[] = {gl.span_chunk, gl.span_begin, gl.span_end, gl.seg_row_begin,
                                 gl.seg_row_end, gl.p1_seg, gl.p1_span_lo, gl.p1_span_hi,
                                 gl.p1_m_begin, gl.p1_state, gl.p2_row, gl.p2_span_lo,
                                 gl.p2_span_hi, gl.p2_state, gl.row_merge_begin,
                                 gl.row_merge_end, gl.merge_states, gl.merge_rows};
  const int64_t want_offsets[] = {wl.span_chunk, wl.span_begin, wl.span_end, wl.seg_row_begin,
                                  wl.seg_row_end, wl.p1_seg, wl.p1_span_lo, wl.p1_span_hi,
                                  wl.p1_m_begin, wl.p1_state, wl.p2_row, wl.p2_span_lo,
                                  wl.p2_span_hi, wl.p2_state, wl.row_merge_begin,
                                  wl.row_merge_end, wl.merge_states, wl.merge_rows};
  for (size_t i = 0; i < std::size(got_offsets); ++i) {
    EXPECT_EQ(got_offsets[i], want_offsets[i]) << "layout array " << i;
  }
  EXPECT_EQ(g.num_rows(), w.num_rows);
  EXPECT_EQ(g.num_segments(), w.num_segments);
  EXPECT_EQ(g.span_end_bytes(), static_cast<size_t>(w.num_spans) * sizeof(int32_t));
  EXPECT_EQ(g.num_p1_items(), w.num_p1);
  EXPECT_EQ(g.num_p2_items(), w.num_p2);
  EXPECT_EQ(g.num_merge_rows(), w.num_merge_rows);
  EXPECT_EQ(g.num_states(), w.num_states);
  EXPECT_EQ(g.p1_block_m(), w.p1_block_m);
  EXPECT_EQ(g.p1_path(), w.p1_path);
  EXPECT_EQ(g.p2_path(), w.p2_path);
  EXPECT_EQ(g.p2_head_group(), w.p2_group);
  EXPECT_EQ(g.p2_head_groups(), w.p2_groups);
  EXPECT_EQ(g.p2_grid_y(), ReferenceGridY(w));
  EXPECT_EQ(g.p2_stages(), w.p2_stages);
  EXPECT_EQ(g.max_p1_splits(), w.max_p1_splits);
  EXPECT_EQ(g.max_p2_splits(), w.max_p2_splits);
  EXPECT_EQ(g.deferred_merge(), w.deferred);
  EXPECT_EQ(g.workspace_bytes(), ReferenceWorkspaceBytes(w));
}

template <typename T, size_t N>
T Pick(std::mt19937_64& rng, const T (&values)[N]) {
  return values[std::uniform_int_distribution<size_t>(0, N - 1)(rng)];
}

TppOptions RandomOptions(std::mt19937_64& rng) {
  TppOptions o;
  if (rng() % 4 == 0) return o;  // the defaults
  const int32_t sms[] = {132, 132, 78, 8, 1};
  o.num_sms = Pick(rng, sms);
  const int32_t block_m[] = {0, 0, 64, 128, 32};
  o.p1_block_m = Pick(rng, block_m);
  const int32_t min_split[] = {128, 128, 16, 1024};
  o.p1_min_split_tokens = Pick(rng, min_split);
  const int32_t max_splits[] = {64, 64, 4, 1};
  o.p1_max_splits = Pick(rng, max_splits);
  const int32_t p1_splits[] = {0, 0, 0, 1, 3, 100};
  o.p1_splits = Pick(rng, p1_splits);
  const int32_t p2_min[] = {256, 256, 16, 1};
  o.p2_min_split_tokens = Pick(rng, p2_min);
  const int32_t ctas[] = {4, 4, 1, 16};
  o.p2_ctas_per_sm = Pick(rng, ctas);
  const int32_t p2_max[] = {16, 16, 2, 1};
  o.p2_max_splits = Pick(rng, p2_max);
  const int32_t p2_max_tokens[] = {0, 0, 0, 48, 300};
  o.p2_max_split_tokens = Pick(rng, p2_max_tokens);
  const int32_t stages[] = {0, 0, 2, 3};
  o.p2_stages = Pick(rng, stages);
  const int32_t tri[] = {-1, -1, 0, 1};
  o.p2_mma = Pick(rng, tri);
  o.p2_warp = Pick(rng, tri);
  o.defer_merge = Pick(rng, tri);
  const int32_t mean_tail[] = {128, 128, 8, 4000};
  o.p2_warp_max_mean_tail = Pick(rng, mean_tail);
  const int32_t wgmma[] = {-1, -1, 0, 1, 2};
  o.p1_wgmma = Pick(rng, wgmma);
  return o;
}

TppProblem RandomProblem(std::mt19937_64& rng, int32_t chunk) {
  const int32_t kv[] = {1, 2, 4, 8, 32};
  const int32_t group[] = {1, 2, 3, 4, 5, 8, 12, 16};
  const int32_t dims[] = {128, 128, 64, 96, 8};
  const int32_t hkv = Pick(rng, kv);
  return TppProblem{hkv * Pick(rng, group), hkv, Pick(rng, dims), chunk};
}

kvcache::AttentionPlan RandomPlan(std::mt19937_64& rng, kvcache::PrefixTree& tree, int trial) {
  testing::RandomTreeSpec spec;
  spec.num_groups = 1 + trial % 6;
  spec.rows_per_group_max = trial % 7 == 0 ? 48 : 8;  // up to 288 rows: full machines of warps
  spec.global_prefix_min = trial % 2;
  spec.global_prefix_max = trial % 3 == 0 ? 3000 : 400;
  spec.group_prefix_max = trial % 5 == 0 ? 600 : 100;
  spec.tail_max = trial % 4 == 0 ? 2000 : (trial % 4 == 1 ? 8 : 100);
  testing::BuildRandomTree(tree, rng, spec);
  auto rows = tree.DfsOrder();
  if (trial % 5 == 4) std::shuffle(rows.begin(), rows.end(), rng);
  return kvcache::BuildAttentionPlan(tree, rows, {.share = trial % 3 != 2});
}

TEST(TppWorkPlanSplitTest, SamePlansAsTheReference) {
  BANYAN_SEEDED_RNG(rng);
  int paths[4] = {0, 0, 0, 0}, deferred = 0, with_p1 = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t chunk = 16 << (trial % 3);
    auto pool = *kvcache::ChunkPool::Create(40000, chunk);
    kvcache::PrefixTree tree(&pool);
    const kvcache::AttentionPlan plan = RandomPlan(rng, tree, trial);
    for (int k = 0; k < 3; ++k) {
      const TppProblem problem = RandomProblem(rng, chunk);
      const TppOptions options = RandomOptions(rng);
      const PlanView view = engine::ViewOf(plan);
      auto got = TppWorkPlan::Build(view, problem, options);
      ExpectSame(got, BuildReference(view, problem, options),
                 absl::StrCat("trial ", trial, ".", k, ": ", plan.num_rows(), " rows, ",
                              plan.num_segments(), " segments, heads ", problem.num_q_heads, "/",
                              problem.num_kv_heads, ", head_dim ", problem.head_dim));
      if (got.ok()) {
        ++paths[static_cast<int>(got->p2_path())];
        deferred += got->deferred_merge();
        with_p1 += got->num_p1_items() > 0;
      }
    }
  }
  // The random set reaches every phase-2 kernel, the deferred merge and phase 1.
  for (int p = 0; p < 4; ++p) EXPECT_GT(paths[p], 0) << "phase-2 path " << p;
  EXPECT_GT(deferred, 0);
  EXPECT_GT(with_p1, 0);
}

// Broken plans (a span past its chunk, a segment's rows out of range, a row in a segment that does
// not hold it) and bad problems fail with the same status.
TEST(TppWorkPlanSplitTest, SameErrorsAsTheReference) {
  BANYAN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t chunk = 32;
    auto pool = *kvcache::ChunkPool::Create(20000, chunk);
    kvcache::PrefixTree tree(&pool);
    kvcache::AttentionPlan plan = RandomPlan(rng, tree, trial);
    auto any = [&](const std::vector<int32_t>& v) {
      return std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng);
    };
    switch (trial % 5) {
      case 0:
        if (!plan.span_end.empty()) plan.span_end[any(plan.span_end)] = chunk + 1;
        break;
      case 1:
        if (!plan.seg_row_end.empty()) plan.seg_row_end[any(plan.seg_row_end)] = plan.num_rows() + 1;
        break;
      case 2:
        if (!plan.row_seg_ids.empty()) plan.row_seg_ids[any(plan.row_seg_ids)] = plan.num_segments();
        break;
      case 3:
        if (!plan.row_seg_ids.empty() && plan.num_segments() > 1) {
          plan.row_seg_ids[any(plan.row_seg_ids)] = static_cast<int32_t>(rng() % plan.num_segments());
        }
        break;
      default:
        break;
    }
    for (const int32_t head_dim : {128, 96}) {
      TppProblem problem{8, 2, head_dim, chunk};
      if (trial % 5 == 4) problem = trial % 2 ? TppProblem{6, 4, 128, chunk} : TppProblem{8, 2, 100, chunk};
      TppOptions options;
      if (trial % 10 == 9) options.num_sms = 0;
      const PlanView view = engine::ViewOf(plan);
      ExpectSame(TppWorkPlan::Build(view, problem, options), BuildReference(view, problem, options),
                 absl::StrCat("trial ", trial, ", head_dim ", head_dim));
    }
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda::tpp
