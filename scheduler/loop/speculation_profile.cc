// EngineLoop::ProfileSpeculation: the start-up profile of speculation's step cost that the
// governor's answers rest on from a size class's first step (speculation_governor.h).
//
// For each size class from one row up to speculation_max_rows (and the running sequences), a
// load of that many synthetic requests is decoded twice: once without candidates and once with
// candidates in every step, through the real step (placement, graphs, drafting, verification,
// acceptance). The median wall time of each way's steady decode-only steps of that class (the
// first kSettle ones of a run are not counted: graph captures, cold caches) goes to the
// governor. The requests are greedy: the second run of a prompt-lookup loop finds the first
// run's continuation, so its chains are whole. What the synthetic text accepts is not used
// (tokens per row come from the served load).
//
// It leaves no trace: the requests' KV is evicted from the tree (before a KV event sink is set:
// routers never hear of it), the continuations, metrics and loop counters are as before.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/engine_loop.h"
#include "scheduler/request_stream.h"

namespace banyan::scheduler {

namespace {

constexpr int kPromptTokens = 16;
constexpr size_t kSettle = 4;        // decode-only steps of a run not counted
constexpr size_t kMinMeasured = 3;   // steps a way needs for its median to count

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<EngineLoop::SpeculationProfileRow> EngineLoop::ProfileSpeculation() {
  std::vector<SpeculationProfileRow> rows;
  if (options_.speculation == LoopOptions::Speculation::kOff || !options_.speculation_adaptive ||
      !idle()) {
    return rows;
  }
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  const int depth = heads ? static_cast<int>(draft_branching_.size()) : options_.draft_tokens;
  // Enough tokens for kSettle + 8 steps that accept every candidate (a lookup's second run).
  const int max_tokens =
      std::min(static_cast<int>(kSettle + 8) * (depth + 1), config_.max_seq_len - kPromptTokens - 1);
  const int64_t max_rows = std::min<int64_t>(options_.speculation_max_rows,
                                             options_.max_running_sequences);
  if (max_tokens < static_cast<int>(kSettle + kMinMeasured) || max_rows < 1) return rows;

  speculation_governor_.SetPrior(1 + 0.5 * depth);  // half the candidates accepted
  const MetricsSnapshot metrics_before = metrics_;
  const LoopStats stats_before = stats_;
  const float min_accept = options_.speculation_min_accept;
  options_.speculation_min_accept = 0;  // synthetic text accepts little: speculate anyway
  std::mt19937 rng(20261206);
  std::uniform_int_distribution<int32_t> token(0, config_.vocab_size - 1);
  ProfileRun run;
  for (int c = 0; (int64_t{1} << c) <= max_rows && c < SpeculationGovernor::kClasses; ++c) {
    const int64_t b = int64_t{1} << c;
    std::vector<Request> load;
    for (int64_t i = 0; i < b; ++i) {
      Request r;
      r.id = absl::StrCat("speculation-profile-", c, "-", i);
      for (int t = 0; t < kPromptTokens; ++t) r.prompt.push_back(token(rng));
      r.params.temperature = 0;
      r.params.max_tokens = max_tokens;
      r.params.ignore_eos = true;
      r.cache_namespace = "\x01speculation-profile";
      load.push_back(std::move(r));
    }
    if (!std::all_of(load.begin(), load.end(), [&](const Request& r) { return Check(r).ok(); })) {
      break;  // more than the cache holds: larger classes stay unprofiled
    }
    SpeculationProfileRow row{.size_class = c, .rows = b};
    bool failed = false;
    for (const bool with : {false, true}) {
      run = ProfileRun{.size_class = c};
      speculation_forced_ = with;
      profile_run_ = &run;
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const Request& r : load) {
        streams.push_back(std::make_shared<RequestStream>());
        Add(r, streams.back(), std::chrono::steady_clock::now());
      }
      while (!idle()) Step();
      profile_run_ = nullptr;
      for (const auto& s : streams) failed = failed || !s->status().ok();
      std::vector<double>& steps = with ? run.with : run.without;
      if (steps.size() > kSettle) steps.erase(steps.begin(), steps.begin() + kSettle);
      (with ? row.steps_with : row.steps_without) = static_cast<int64_t>(steps.size());
      (with ? row.seconds_with : row.seconds_without) =
          steps.size() >= kMinMeasured ? Median(steps) : 0;
    }
    if (failed) break;
    if (row.seconds_with > 0 && row.seconds_without > 0) {
      speculation_governor_.SetProfile(c, row.seconds_with, row.seconds_without);
    }
    rows.push_back(row);
  }
  speculation_forced_.reset();
  profile_run_ = nullptr;
  options_.speculation_min_accept = min_accept;
  // No trace: the synthetic prefixes leave the cache, and counters read as before.
  tree_.Evict(chunks_total_);
  continuations_.clear();
  continuation_order_.clear();
  metrics_ = metrics_before;
  stats_ = stats_before;
  return rows;
}

}  // namespace banyan::scheduler
