// EngineLoop::CollectInflight: taking a finished step's results. engine_loop.cc launches the
// steps; speculation.cc takes a speculating sample's candidates; output.cc takes each token into
// its sample; step_stats.cc counts the step.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "common/check.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/placement.h"
#include "scheduler/loop/step_stats.h"

namespace banyan::scheduler {

// A sample whose next candidates the draft heads draft, from the hidden state of `row`.
struct DraftWant {
  LiveRequest::Sample* sample;
  int32_t row;
};

bool EngineLoop::CollectInflight() {
  ++collects_;
  InFlightStep& f = inflight_;
  f.active = false;
  engine::StepOutput& out = f.out;
  const absl::Status st = runner_.Collect(&out);
  collected_clocks_ = ThreadClocks::Now();
  const auto t_done = collected_clocks_.wall;
  f.collected_this_step = true;
  if (!st.ok()) {
    FailAll(st);
    return false;
  }
  PatchFedStep(out);
  ++metrics_.iterations_total;
  // out.samples: the decode rows in out.decode_rows order, then the prompts'. Draft heads need
  // the hidden state of the row each continuing sample's next token came from.
  std::vector<DraftWant> want_draft;
  const size_t decode_tokens = TakeDecodeRows(out, t_done, &want_draft);
  TakePromptRows(out, t_done, &want_draft);
  DraftNext(&want_draft);
  const double step_seconds = Seconds(f.times.begin, t_done);
  if (f.speculation.size_class >= 0 && step_seconds > 0) {
    // A step that also prefilled counts with its decode rows' share of the step's tokens (most of
    // a step scales with its tokens). Under continuous arrivals most steps carry a prompt: when
    // only decode-only steps were measured, the governor kept speculating, unmeasured.
    const double share =
        f.prefill_tokens == 0
            ? 1.0
            : static_cast<double>(f.decode_rows) / static_cast<double>(f.decode_rows + f.prefill_tokens);
    if (profile_run_ != nullptr) {
      if (f.prefill_tokens == 0 && f.speculation.size_class == profile_run_->size_class) {
        (f.speculation.speculated ? profile_run_->with : profile_run_->without)
            .push_back(step_seconds);
      }
    } else {
      // Rows of samples (a candidate's row is not one).
      const std::vector<int32_t>& nodes = f.speculation.item_node;
      const int64_t sample_rows =
          nodes.empty() ? f.decode_rows
                        : std::count_if(nodes.begin(), nodes.end(), [](int32_t n) { return n <= 0; });
      speculation_governor_.Record(f.speculation.size_class, f.speculation.speculated,
                                   static_cast<double>(sample_rows),
                                   static_cast<double>(decode_tokens), step_seconds * share);
    }
  }
  const double device =
      f.prefill_tokens == 0 ? backend_->device_seconds() - f.times.device_before : 0;
  RecordStep(f,
             {.step_seconds = step_seconds, .forward_seconds = out.forward_seconds,
              .device_seconds = device, .plan_builds = runner_.stats().plan_builds},
             &stats_, &metrics_);
  f.owner.clear();
  f.logit_owners.clear();
  return true;
}

void EngineLoop::PatchFedStep(const engine::StepOutput& out) {
  if (!ahead_.active) return;
  // The fed step launched since: its rows' pending tokens are this step's samples (a token of
  // -1, no distribution, was read as 0 on the device, and so goes into the tree).
  for (auto [seq, spec] : ahead_.patches) {
    const int32_t token = std::max(out.samples.at(static_cast<size_t>(spec)).token, 0);
    const absl::Status set = tree_.SetPendingToken(seq, token);
    BANYAN_CHECK(set.ok()) << set;
  }
  ahead_.patches.clear();
}

size_t EngineLoop::TakeDecodeRows(const engine::StepOutput& out,
                                  std::chrono::steady_clock::time_point at,
                                  std::vector<DraftWant>* want_draft) {
  // A speculating sample's rows (its root and candidates) are taken together once all are known.
  const InFlightStep& f = inflight_;
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  const std::vector<int32_t>& item_node = f.speculation.item_node;
  std::vector<std::pair<Live*, size_t>> speculated;
  const size_t tokens_before = pending_.size();
  for (size_t r = 0; r < out.decode_rows.size(); ++r) {
    auto [l, k] = f.owner.at(out.decode_rows[r]);
    if (l->state != RequestState::kDecoding) continue;
    Live::Sample& s = l->samples[k];
    const int32_t node = item_node.empty() ? -1 : item_node[out.decode_items[r]];
    if (node < 0) {
      TakeSample(*l, k, out.samples[r], at);
      if (heads && !s.finished) want_draft->push_back({&s, static_cast<int32_t>(r)});
      continue;
    }
    if (s.cand.empty()) continue;  // dropped meanwhile
    s.cand.row[node] = static_cast<int32_t>(r);
    if (node == 0) speculated.emplace_back(l, k);
  }
  for (auto [l, k] : speculated) {
    Live::Sample& s = l->samples[k];
    if (l->state != RequestState::kDecoding || s.cand.empty()) continue;
    const int32_t last = TakeCandidates(*l, k, out.samples, at);
    if (heads && !s.finished && l->state == RequestState::kDecoding) {
      want_draft->push_back({&s, last});
    }
  }
  return pending_.size() - tokens_before;
}

void EngineLoop::TakePromptRows(const engine::StepOutput& out,
                                std::chrono::steady_clock::time_point at,
                                std::vector<DraftWant>* want_draft) {
  const bool heads = options_.speculation == LoopOptions::Speculation::kHeads;
  const size_t rows = out.decode_rows.size();
  size_t next = rows;
  int32_t logit_row = static_cast<int32_t>(rows);
  for (Live* l : inflight_.logit_owners) {
    const size_t first = next;
    next += l->samples.size();
    const int32_t row = logit_row++;
    if (l->state != RequestState::kPrefilling) continue;  // failed or cancelled meanwhile
    if (absl::Status s = MakeSamples(tree_, *l); !s.ok()) {
      Finish(*l, s, FinishReason::kError);
      continue;
    }
    l->state = RequestState::kDecoding;
    for (size_t k = 0; k < l->samples.size(); ++k) {
      TakeSample(*l, k, out.samples[first + k], at);
      if (heads && !l->samples[k].finished) want_draft->push_back({&l->samples[k], row});
    }
  }
  BANYAN_CHECK(next == out.samples.size()) << next << " of " << out.samples.size() << " samples";
}

void EngineLoop::DraftNext(std::vector<DraftWant>* want_draft) {
  // The heads draft only where the next step may speculate (on a GPU they run on the device
  // over the step's hidden states; only the trees' tokens come back). Trees are drafted to
  // their full depth here and cut to each sample's budget when placed.
  for (DraftWant& w : *want_draft) w.sample->drafted = {};
  const int64_t next_rows = static_cast<int64_t>(want_draft->size());
  std::erase_if(*want_draft, [](const DraftWant& w) { return w.sample->SpeculationPaused(); });
  // A fed step already launched after this one carries no candidates, and the backend's hidden
  // rows are its own by now.
  if (want_draft->empty() || draft_branching_.empty() || ahead_.active ||
      next_rows > options_.speculation_max_rows ||
      !GovernorMaySpeculate(SpeculationGovernor::ClassOf(next_rows))) {
    return;
  }
  std::vector<int32_t> draft_rows, roots;
  for (const DraftWant& w : *want_draft) {
    draft_rows.push_back(w.row);
    roots.push_back(w.sample->next_token);
  }
  std::vector<engine::DraftHeads::Tree> trees;
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status ds =
      options_.draft_on_host
          ? backend_->Backend::DraftTrees(*options_.draft_heads, draft_rows, roots,
                                          draft_branching_, &trees)
          : backend_->DraftTrees(*options_.draft_heads, draft_rows, roots, draft_branching_,
                                 &trees);
  stats_.draft_seconds += Seconds(t0, std::chrono::steady_clock::now());
  ++stats_.draft_steps;
  if (ds.ok()) {  // no drafts otherwise: the samples decode plainly
    for (size_t j = 0; j < want_draft->size(); ++j) (*want_draft)[j].sample->drafted = std::move(trees[j]);
  } else if (++stats_.draft_failures == 1) {
    Log()->warn("draft heads failed ({}); the samples decode without candidates",
                std::string(ds.message()));
  }
}

}  // namespace banyan::scheduler
