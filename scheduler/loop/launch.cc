#include "scheduler/loop/launch.h"

#include <utility>

#include "common/check.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/live_request.h"
#include "text/grammar/token_mask.h"

namespace banyan::scheduler {

void BindSampling(PlacementHooks& hooks, PlacedStep* step) {
  for (engine::DecodeItem& d : step->decode) {
    if (d.sample.state != nullptr) continue;
    auto [l, k] = step->owner.at(d.seq);
    if (d.feed >= 0 && l->req.constraint != nullptr) {
      // Its mask follows the fed token, which only the step before's collection brings to the
      // host: the whole step's sampling is launched then (EngineLoop::FinishLateSampling).
      step->late_sampling = true;
      d.sample = {.params = &l->req.params, .state = &l->samples[k].sampling, .step_ahead = 1};
      continue;
    }
    d.sample = {.params = &l->req.params, .state = &l->samples[k].sampling,
                .step_ahead = d.feed >= 0 ? 1 : 0, .allowed = hooks.MaskFor(*l, k)};
  }
}

bool EngineLoop::LaunchPlaced(PlacedStep step, const LaunchClock& clock, bool fed,
                              InFlightStep* f) {
  f->fed = fed;
  f->late_sampling = step.late_sampling;
  f->owner = std::move(step.owner);
  f->logit_owners = std::move(step.logit_owners);
  f->patches = std::move(step.patches);
  f->decode_rows = static_cast<int64_t>(step.decode.size());
  f->prefill_tokens = step.PrefillTokens();
  f->times = clock.BeforeLaunch(backend_->device_seconds());
  if (absl::Status run =
          runner_.Launch(step.copies, step.decode, step.prefill, &f->out, step.late_sampling);
      !run.ok()) {
    FailAll(run);
    return false;
  }
  f->active = true;
  const ThreadClocks launched = ThreadClocks::Now();
  if (fed) {
    // The device did not wait for this host work: it ran beside step N.
    ++stats_.fed_steps;
    stats_.fed_launch_seconds += Seconds(clock.cycle_start(), launched.wall);
  }
  LaunchClock::Launched(launched, clock.from(), fed, f->out.forward_seconds, &f->times);
  return true;
}

bool EngineLoop::FinishLateSampling() {
  InFlightStep& f = ahead_;
  const auto t0 = std::chrono::steady_clock::now();
  // Every decode row of the fed step is fed: its sample's state took the step before's token
  // (step_ahead 0 now, and no pending token for its penalties), and a constrained one's matcher
  // too, so its mask is known.
  // The constrained rows' masks first, on the fill threads (FillMasks); the callback below then
  // takes each as it is.
  std::vector<std::pair<Live*, size_t>> masked;
  for (kvcache::SeqId seq : runner_.late_seqs()) {
    auto [l, k] = f.owner.at(seq);
    if (l->state == RequestState::kDecoding && !l->samples[k].finished &&
        l->samples[k].matcher.has_value()) {
      masked.emplace_back(l, k);
    }
  }
  // Straight into the backend's upload where it has one (no copy of 16 KB per row at 128K
  // tokens on this thread), else into each sample's own mask.
  const size_t words = text::grammar::MaskWords(config_.vocab_size);
  const std::span<uint64_t> staging =
      masked.empty() ? std::span<uint64_t>{}
                     : runner_.MaskStaging(static_cast<int32_t>(masked.size()),
                                           static_cast<int64_t>(words));
  FillMasks(masked, staging);
  const auto t1 = std::chrono::steady_clock::now();
  size_t next_slot = 0;
  const absl::Status s = runner_.FinishLaunch([&](kvcache::SeqId seq, engine::SampleSpec* spec) {
    auto [l, k] = f.owner.at(seq);
    spec->step_ahead = 0;
    spec->allowed = {};
    if (l->state != RequestState::kDecoding || l->samples[k].finished) return;
    if (!staging.empty() && l->samples[k].matcher.has_value()) {
      // The same samples in the same order as `masked`.
      BANYAN_CHECK(next_slot < masked.size() && masked[next_slot].first == l &&
                   masked[next_slot].second == k);
      spec->allowed = staging.subspan(next_slot++ * words, words);
    } else {
      spec->allowed = MaskFor(*l, k);
    }
  });
  if (!staging.empty()) {
    BANYAN_CHECK(next_slot == masked.size());
    stats_.late_masks_staged += static_cast<int64_t>(masked.size());
  }
  const auto t2 = std::chrono::steady_clock::now();
  ++stats_.late_sampled_steps;
  stats_.late_sampling_seconds += Seconds(t0, t2);
  stats_.late_fill_seconds += Seconds(t0, t1);
  stats_.late_launch_seconds += Seconds(t1, t2);
  if (s.ok()) return true;
  FailAll(s);
  f = InFlightStep{};  // the runner dropped it; the failed requests' sequences went with FailAll
  return false;
}

}  // namespace banyan::scheduler
