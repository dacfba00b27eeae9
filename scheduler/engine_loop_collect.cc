// EngineLoop::CollectInflight: taking a finished step's results (engine_loop.cc launches the
// steps; engine_loop_speculation.cc takes a speculating sample's candidates).
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "common/check.h"
#include "scheduler/engine_loop.h"
#include "scheduler/engine_loop_live.h"

namespace banyan::scheduler {

bool EngineLoop::CollectInflight() {
  ++collects_;
  InFlight& f = inflight_;
  f.active = false;
  engine::StepOutput& out = f.out;
  const absl::Status st = runner_.Collect(&out);
  collected_clocks_ = ThreadClocks::Now();
  const auto t_done = f.collected = collected_clocks_.wall;
  f.collected_this_step = true;
  if (!st.ok()) {
    FailAll(st);
    return false;
  }
  if (ahead_.active) {
    // The fed step launched since: its rows' pending tokens are this step's samples (a token of
    // -1, no distribution, was read as 0 on the device, and so goes into the tree).
    for (auto [seq, spec] : ahead_.patches) {
      const int32_t token = std::max(out.samples.at(static_cast<size_t>(spec)).token, 0);
      const absl::Status set = tree_.SetPendingToken(seq, token);
      BANYAN_CHECK(set.ok()) << set;
    }
    ahead_.patches.clear();
  }
  ++metrics_.iterations_total;
  // out.samples: the decode rows in out.decode_rows order, then the prompts'. A speculating
  // sample's rows (its root and candidates) are taken together once all are known. Draft heads
  // need the hidden state of the row each continuing sample's next token came from.
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  std::vector<std::pair<Live::Sample*, int32_t>> want_draft;
  std::vector<std::pair<Live*, size_t>> speculated;
  const size_t rows = out.decode_rows.size();
  const size_t tokens_before = pending_.size();
  for (size_t r = 0; r < rows; ++r) {
    auto [l, k] = f.owner.at(out.decode_rows[r]);
    if (l->state != RequestState::kDecoding) continue;
    Live::Sample& s = l->samples[k];
    const int32_t node = f.item_node.empty() ? -1 : f.item_node[out.decode_items[r]];
    if (node < 0) {
      TakeSample(*l, k, out.samples[r], t_done);
      if (heads && !s.finished) want_draft.emplace_back(&s, static_cast<int32_t>(r));
      continue;
    }
    if (s.cand.empty()) continue;  // dropped meanwhile
    s.cand.row[node] = static_cast<int32_t>(r);
    if (node == 0) speculated.emplace_back(l, k);
  }
  for (auto [l, k] : speculated) {
    Live::Sample& s = l->samples[k];
    if (l->state != RequestState::kDecoding || s.cand.empty()) continue;
    const int32_t last = TakeCandidates(*l, k, out.samples, t_done);
    if (heads && !s.finished && l->state == RequestState::kDecoding) {
      want_draft.emplace_back(&s, last);
    }
  }
  const size_t decode_tokens = pending_.size() - tokens_before;
  size_t next = rows;
  int32_t logit_row = static_cast<int32_t>(rows);
  for (Live* l : f.logit_owners) {
    const size_t first = next;
    next += l->samples.size();
    const int32_t row = logit_row++;
    if (l->state != RequestState::kPrefilling) continue;  // failed or cancelled meanwhile
    if (absl::Status s = MakeSamples(*l); !s.ok()) {
      Finish(*l, s, FinishReason::kError);
      continue;
    }
    l->state = RequestState::kDecoding;
    for (size_t k = 0; k < l->samples.size(); ++k) {
      TakeSample(*l, k, out.samples[first + k], t_done);
      if (heads && !l->samples[k].finished) want_draft.emplace_back(&l->samples[k], row);
    }
  }
  // The heads draft only where the next step may speculate (on a GPU they run on the device
  // over the step's hidden states; only the trees' tokens come back). Trees are drafted to
  // their full depth here and cut to each sample's budget when placed.
  for (auto& [s, row] : want_draft) s->drafted = {};
  const int64_t next_rows = static_cast<int64_t>(want_draft.size());
  std::erase_if(want_draft, [](const auto& w) { return w.first->speculation_pause > 0; });
  if (!want_draft.empty() && !draft_branching_.empty() &&
      next_rows <= options_.speculation_max_rows &&
      (!options_.speculation_adaptive ||
       speculation_governor_.MaySpeculate(SpeculationGovernor::ClassOf(next_rows)))) {
    std::vector<int32_t> draft_rows, roots;
    for (auto& [s, row] : want_draft) {
      draft_rows.push_back(row);
      roots.push_back(s->next_token);
    }
    std::vector<engine::DraftHeads::Tree> trees;
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status ds =
        options_.draft_on_host
            ? backend_->Backend::DraftTrees(*options_.draft_heads, draft_rows, roots,
                                            draft_branching_, &trees)
            : backend_->DraftTrees(*options_.draft_heads, draft_rows, roots, draft_branching_,
                                   &trees);
    stats_.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.draft_steps;
    if (ds.ok()) {  // no drafts otherwise: the samples decode plainly
      for (size_t j = 0; j < want_draft.size(); ++j) want_draft[j].first->drafted = std::move(trees[j]);
    } else {
      ++stats_.draft_failures;
      if (stats_.draft_failures == 1) {
        Log()->warn("draft heads failed ({}); the samples decode without candidates",
                     std::string(ds.message()));
      }
    }
  }
  BANYAN_CHECK(next == out.samples.size()) << next << " of " << out.samples.size() << " samples";
  ++stats_.steps;
  const double step_seconds = std::chrono::duration<double>(t_done - f.t_begin).count();
  stats_.host_seconds += step_seconds - out.forward_seconds;
  if (f.speculation_class >= 0 && f.prefill_tokens == 0 && step_seconds > 0) {
    speculation_governor_.Record(f.speculation_class, f.speculated,
                                 static_cast<double>(decode_tokens), step_seconds);
  }
  if (f.prefill_tokens == 0) {
    const double device = backend_->device_seconds() - f.device_before;
    ++stats_.decode_steps;
    stats_.decode_seconds += step_seconds;
    stats_.decode_device_seconds += device;
    stats_.decode_launch_seconds += f.launch_seconds;
    stats_.decode_backend_launch_seconds += f.backend_launch_seconds;
    stats_.decode_take_seconds += f.take_seconds;
    stats_.decode_schedule_seconds += f.schedule_seconds;
    stats_.decode_place_seconds += f.place_seconds;
    stats_.decode_launch_cpu_seconds += f.launch_cpu_seconds;
    stats_.decode_launch_context_switches += f.launch_context_switches;
    ++metrics_.decode_steps_total;
    if (f.fed) ++metrics_.decode_fed_steps_total;
    metrics_.decode_rows_total += f.decode_rows;
    metrics_.decode_step_seconds_total += step_seconds;
    metrics_.decode_forward_seconds_total += out.forward_seconds;
    metrics_.decode_launch_seconds_total += f.launch_seconds;
    metrics_.decode_device_seconds_total += device;
  } else {
    stats_.prefill_seconds += step_seconds;
  }
  stats_.decode_tokens += f.decode_rows;
  stats_.prefill_tokens += f.prefill_tokens;
  stats_.plan_builds = runner_.stats().plan_builds;
  f.owner.clear();
  f.logit_owners.clear();
  return true;
}

}  // namespace banyan::scheduler
