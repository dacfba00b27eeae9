// The TPP cost model (tpp_cost_model.h): rules 1-7.
#include "kernels/cuda/tpp/tpp_cost_model.h"

#include <algorithm>
#include <cmath>

namespace banyan::kernels::cuda::tpp {
namespace {

// Attainable rates and latencies of the split model (rule 3), fitted to these kernels on the
// H200 (docs/tpp.md, "The cost model's numbers").
constexpr double kBytesPerSecond = 3.6e12;
constexpr double kWaveSeconds = 1e-6;  // Q tile load + first K/V tiles of a CTA
// Two latencies that bandwidth and FLOPs do not show: each CTA's own fill and epilogue (work
// tables, Q, the first K/V tiles, the partials' stores), counted as the CTAs per resident slot
// on average (items / slots, so a fraction when the grid does not fill the machine); and each
// round of the merge's dependent loads (MergeList: the state indices, then up to
// kTppMergeAhead states at a time) over the longest merge list.
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

// Rule 1.
Phase1Path ResolvePath(int32_t p1_wgmma, bool wgmma_available) {
  switch (p1_wgmma) {
    case 0: return Phase1Path::kMmaSync;
    case 2: return Phase1Path::kWgmmaCooperative;
    case 1: return Phase1Path::kWgmma;
    default: return wgmma_available ? Phase1Path::kWgmma : Phase1Path::kMmaSync;
  }
}

int32_t CeilDiv(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

// The warp kernel's q heads per warp (up to 4 of a kv head's g).
int32_t WarpHeads(int32_t g) { return g >= 3 ? 4 : g; }
constexpr int64_t kFullMachineWarps = 4096;

// The phase-1 split model (rule 3) over the segments of one shape.
class SplitModel {
 public:
  SplitModel(const TppShapeSummary& shape, const TppProblem& problem, const TppOptions& options,
             Phase1Path path, int32_t block_m)
      : segs_(shape.segments), options_(options), block_m_(block_m),
        g_(problem.num_q_heads / problem.num_kv_heads), hkv_(problem.num_kv_heads),
        hq_(problem.num_q_heads), d_(problem.head_dim) {
    const Phase1Rates rates = RatesFor(path, block_m);
    occupancy_ = rates.occupancy;
    flops_per_second_ = rates.flops_per_second;
    const int32_t n = static_cast<int32_t>(segs_.size());
    // A row merges the states of every segment on its path. The segments' row ranges nest (they
    // are subtrees in DFS order), so a row's list is its deepest segment's chain of enclosing
    // ones: order the segments outermost first and link each to the one that encloses it, once,
    // so that Seconds() sums the chains in O(segments) instead of walking the rows.
    order_.resize(n);
    parent_.assign(n, -1);
    chain_.resize(n);
    for (int32_t s = 0; s < n; ++s) order_[s] = s;
    std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
      return segs_[a].row_begin != segs_[b].row_begin ? segs_[a].row_begin < segs_[b].row_begin
                                                      : segs_[a].row_end > segs_[b].row_end;
    });
    std::vector<int32_t> open;  // enclosing segments of the current one, outermost first
    for (int32_t s : order_) {
      while (!open.empty() && segs_[open.back()].row_end <= segs_[s].row_begin) open.pop_back();
      if (!open.empty()) parent_[s] = open.back();
      open.push_back(s);
    }
  }

  // k_s for a split length of `len` tokens.
  int32_t Splits(int32_t s, int64_t len) const {
    const TppSegmentShape& seg = segs_[s];
    int32_t k = CeilDiv(seg.tokens, std::max<int64_t>(len, 1));
    k = std::min({k, options_.p1_max_splits, std::max(seg.spans, 1),
                  std::max(1, static_cast<int32_t>(seg.tokens / options_.p1_min_split_tokens))});
    return std::max(k, 1);
  }

  // time(len) (tpp_cost_model.h).
  double Seconds(int64_t len) {
    double bytes = 0, partial_bytes = 0, flops = 0, items = 0, item_time = 0;
    const double cta_bytes_per_second = kBytesPerSecond / (occupancy_ * options_.num_sms);
    const double cta_flops_per_second = flops_per_second_ / (occupancy_ * options_.num_sms);
    for (int32_t s = 0; s < static_cast<int32_t>(segs_.size()); ++s) {
      const int32_t k = Splits(s, len);
      const int32_t rows = segs_[s].row_end - segs_[s].row_begin;
      const int32_t m = rows * g_;
      const int32_t tiles = CeilDiv(m, block_m_);
      const double seg_bytes = 4.0 * segs_[s].tokens * hkv_ * d_;  // K and V, 2 bytes each
      const double seg_flops = 4.0 * CeilDiv(m, 16) * 16.0 * segs_[s].tokens * d_ * hkv_;
      bytes += seg_bytes;
      partial_bytes += k * rows * hq_ * (4.0 * d_ + 4.0);  // partial states (o, lse)
      flops += seg_flops;
      items += static_cast<double>(k) * tiles * hkv_;
      // The largest CTA of the segment runs at one CTA's share of the machine.
      item_time = std::max(item_time, std::max(seg_bytes / (k * hkv_) / cta_bytes_per_second,
                                               seg_flops / (k * tiles * hkv_) / cta_flops_per_second));
    }
    // One mma.sync CTA per SM cannot stream at the SM's share of bandwidth (a tile's latency
    // is exposed): count full bandwidth from `occupancy` CTAs per SM (the warp-specialised
    // kernel's producer keeps four tiles in flight on its own).
    const double mem_util =
        std::min(1.0, items / (occupancy_ * static_cast<double>(options_.num_sms)));
    const double capacity = static_cast<double>(options_.num_sms) * occupancy_;
    const double waves = std::ceil(items / capacity);
    const double flop_util = items / (waves * capacity);
    // The longest merge list (outermost first, so a parent's chain is ready before its children).
    int32_t max_states = 0;
    for (int32_t s : order_) {
      chain_[s] = Splits(s, len) + (parent_[s] >= 0 ? chain_[parent_[s]] : 0);
      max_states = std::max(max_states, chain_[s]);
    }
    // Phase 1 (written partials overlap its reads or its MMAs) with the CTAs' own latencies
    // spread over the slots, then the merge reads the partials back in rounds of dependent
    // loads, and every wave of CTAs pays a pipeline fill.
    const double merge_rounds = max_states > 1 ? CeilDiv(max_states, kTppMergeAhead) : 0;
    return std::max({(bytes + partial_bytes) / (kBytesPerSecond * mem_util),
                     flops / (flops_per_second_ * flop_util), item_time}) +
           items / capacity * kCtaSeconds + partial_bytes / kBytesPerSecond +
           merge_rounds * kMergeRoundSeconds + waves * kWaveSeconds;
  }

 private:
  const std::vector<TppSegmentShape>& segs_;
  const TppOptions& options_;
  const int32_t block_m_, g_, hkv_, hq_, d_;
  int32_t occupancy_ = 0;  // resident phase-1 CTAs per SM
  double flops_per_second_ = 0;
  std::vector<int32_t> order_, parent_;
  std::vector<int32_t> chain_;  // Seconds()'s scratch: states merged down to the segment
};

// Rules 2 and 3.
void ChoosePhase1(const TppShapeSummary& shape, const TppProblem& problem,
                  const TppOptions& options, TppChoices* c) {
  const int32_t g = problem.num_q_heads / problem.num_kv_heads;
  const int32_t nseg = static_cast<int32_t>(shape.segments.size());
  double weighted_m = 0, weight = 0;
  int64_t max_tokens = 0;
  for (const TppSegmentShape& seg : shape.segments) {
    weighted_m += static_cast<double>((seg.row_end - seg.row_begin) * g) * seg.tokens;
    weight += static_cast<double>(seg.tokens);
    max_tokens = std::max(max_tokens, seg.tokens);
  }
  c->p1_block_m = options.p1_block_m;
  if (c->p1_block_m != 64 && c->p1_block_m != 128) {
    c->p1_block_m = (weight > 0 && weighted_m / weight >= 128) ? 128 : 64;
  }
  c->p1_path = ResolvePath(options.p1_wgmma, shape.wgmma_available);
  if (nseg == 0) return;

  SplitModel model(shape, problem, options, c->p1_path, c->p1_block_m);
  int64_t best_len = std::max<int64_t>(max_tokens, 1);
  double best = model.Seconds(best_len);
  if (options.p1_splits > 0) {
    best_len = std::max<int64_t>(CeilDiv(max_tokens, options.p1_splits), 1);
    best = model.Seconds(best_len);  // rule 4 reads it
  }
  for (int32_t k = 2; options.p1_splits <= 0 && k <= options.p1_max_splits; ++k) {
    const int64_t len = (max_tokens + k - 1) / k;
    if (len < options.p1_min_split_tokens) break;
    const double t = model.Seconds(len);
    if (t < best * 0.97) {  // a split must pay for itself clearly
      best = t;
      best_len = len;
    }
  }
  c->p1_seconds = best;
  c->p1_splits.resize(nseg);
  for (int32_t s = 0; s < nseg; ++s) c->p1_splits[s] = model.Splits(s, best_len);
}

// Rule 5.
void ChoosePhase2Kernel(const TppShapeSummary& shape, const TppProblem& problem,
                        const TppOptions& options, TppChoices* c) {
  const int32_t g = problem.num_q_heads / problem.num_kv_heads;
  const int32_t hkv = problem.num_kv_heads;
  const int64_t total = shape.phase2_tokens;
  const int64_t rows = std::max<int64_t>(shape.num_rows, 1);
  // Tensor cores where they pay: GQA >= 4 with private tails of a 64-slot tile or more on
  // average; below that a CTA is latency-bound and the CUDA-core kernel, more CTAs per SM, wins.
  c->p2_tensor_tiles =
      options.p2_mma == 1 ? g >= 2 : (options.p2_mma < 0 && g >= 4 && total >= 64 * rows);
  // One warp per (item, kv head, up to 4 of its q heads), fitted to measurements, not modelled:
  //  - where the CTA kernels wait on latency: short tails, with enough warps that each one's
  //    serial walk over its tail and heads is covered many times over (>= 1,024 warps and
  //    >= 12 x mean tail x heads per warp; below it, e.g. 64 rows of a tree, the CTA kernels'
  //    128 threads per (row, kv head) win);
  //  - and for long tails that re-read the same chunks (a plan without sharing over a common
  //    prefix, the paged baseline: served from L2, where the warp kernel's direct loads beat
  //    the cp.async pipeline) when the machine is full (>= 4,096 warps). Tails of distinct KV
  //    stream from HBM, where the CTA kernel wins.
  const int32_t warp_heads = WarpHeads(g);
  const int64_t warps = rows * hkv * CeilDiv(g, warp_heads);
  const bool short_tails = total <= options.p2_warp_max_mean_tail * rows && warps >= 1024 &&
                           warps * rows >= 12 * total * warp_heads;
  const bool p2_mma = c->p2_tensor_tiles;
  bool p2_warp = !p2_mma && (options.p2_warp == 1 || (options.p2_warp < 0 && short_tails));
  if (!p2_mma && !p2_warp && options.p2_warp < 0 && warps >= kFullMachineWarps) {
    p2_warp = shape.private_reuse >= 2.0;
  }
  if (!shape.compiled_family) {
    c->p2_path = Phase2Path::kGeneric;
    c->p2_head_group = 1;  // a warp per q head
  } else if (p2_mma) {
    c->p2_path = Phase2Path::kTensorCores;
    c->p2_head_group = 16;
  } else if (p2_warp) {
    c->p2_path = Phase2Path::kWarpPerHead;
    c->p2_head_group = warp_heads;  // q heads per warp; four warps per CTA
  } else {
    c->p2_path = Phase2Path::kCudaCores;
    c->p2_head_group = g >= 8 ? 8 : (g > 4 ? 8 : (g > 2 ? 4 : g));
  }
  c->p2_head_groups = CeilDiv(g, c->p2_head_group);
}

}  // namespace

TppChoices ChooseTppConfig(const TppShapeSummary& shape, const TppProblem& problem,
                           const TppOptions& options) {
  TppChoices c;
  ChoosePhase1(shape, problem, options, &c);

  // Rule 4.
  const int32_t hkv = problem.num_kv_heads;
  const int32_t hq = problem.num_q_heads;
  const int32_t d = problem.head_dim;
  const bool has_p1 = !shape.segments.empty();
  const double t1 = has_p1 ? c.p1_seconds : 0.0;
  const double t2 = 4.0 * shape.private_tokens * hkv * d / kBytesPerSecond;
  const double merge = 2.0 * shape.num_rows * hq * (4.0 * d + 4.0) / kBytesPerSecond + 3e-6;
  c.deferred_merge = has_p1 && (options.defer_merge == 1 ||
                                (options.defer_merge < 0 && std::min(t1, t2) > merge + 5e-6));

  ChoosePhase2Kernel(shape, problem, options, &c);

  // Rule 6.
  const int64_t target_ctas = static_cast<int64_t>(options.p2_ctas_per_sm) * options.num_sms;
  const int64_t per_row_ctas = TppPhase2GridY(c.p2_path, c.p2_head_groups, problem);
  int64_t split_len =
      std::max<int64_t>(options.p2_min_split_tokens,
                        (shape.phase2_tokens * per_row_ctas + target_ctas - 1) / target_ctas);
  if (options.p2_max_split_tokens > 0) {
    split_len = std::min<int64_t>(split_len, options.p2_max_split_tokens);
  }
  c.p2_split_tokens = split_len;
  c.p2_length_capped = options.p2_max_split_tokens > 0 && split_len == options.p2_max_split_tokens;
  c.p2_max_splits = options.p2_max_splits;
  return c;
}

int32_t TppPhase2Pieces(const TppChoices& c, int64_t tokens, int32_t spans) {
  // Rounding down keeps the items within the CTA target (a rounded-up count put a paged case
  // into a second, nearly empty wave); rounding up where the length was capped keeps the pieces
  // at most that long.
  const int64_t pieces =
      c.p2_length_capped ? CeilDiv(tokens, c.p2_split_tokens) : tokens / c.p2_split_tokens;
  const int32_t k =
      static_cast<int32_t>(std::min<int64_t>({pieces, c.p2_max_splits, std::max(spans, 1)}));
  return std::max(k, 1);
}

int32_t ChooseTppPhase2Stages(const TppChoices& c, const TppProblem& problem,
                              const TppOptions& options, int64_t longest_item_tokens) {
  // A phase-2 tile: 64 slots on tensor cores; on CUDA cores 4 slots per token lane,
  // 128 / (d / 8) lanes (32 slots at d = 128).
  const int64_t tile = c.p2_tensor_tiles ? 64 : 4 * 128 / (problem.head_dim / 8);
  const bool no_pipeline =
      c.p2_path == Phase2Path::kWarpPerHead || c.p2_path == Phase2Path::kGeneric;
  if (no_pipeline) return 2;  // one value, so that it never changes a launch signature
  if (options.p2_stages == 2 || options.p2_stages == 3) return options.p2_stages;
  return longest_item_tokens <= 8 * tile ? 2 : 3;
}

bool TppReadsPrivateReuse(const TppProblem& problem, int32_t num_rows) {
  const int32_t g = problem.num_q_heads / problem.num_kv_heads;
  const int64_t rows = std::max<int64_t>(num_rows, 1);
  return rows * problem.num_kv_heads * CeilDiv(g, WarpHeads(g)) >= kFullMachineWarps;
}

int32_t TppPhase2GridY(Phase2Path path, int32_t head_groups, const TppProblem& problem) {
  if (path == Phase2Path::kGeneric) {
    return CeilDiv(problem.num_q_heads, 4);  // kTppGenericWarps q heads per CTA
  }
  if (path == Phase2Path::kWarpPerHead) {
    return CeilDiv(static_cast<int64_t>(problem.num_kv_heads) * head_groups, 4);  // 4 warps
  }
  return problem.num_kv_heads * head_groups;
}

}  // namespace banyan::kernels::cuda::tpp
