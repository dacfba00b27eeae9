#include "scheduler/loop/launch.h"

#include <utility>

#include "common/check.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/live_request.h"

namespace banyan::scheduler {

void BindSampling(PlacementHooks& hooks, PlacedStep* step) {
  for (engine::DecodeItem& d : step->decode) {
    if (d.sample.state != nullptr) continue;
    auto [l, k] = step->owner.at(d.seq);
    BANYAN_CHECK(d.feed < 0 || l->req.constraint == nullptr) << "a constrained row was fed";
    d.sample = {.params = &l->req.params, .state = &l->samples[k].sampling,
                .step_ahead = d.feed >= 0 ? 1 : 0, .allowed = hooks.MaskFor(*l, k)};
  }
}

bool EngineLoop::LaunchPlaced(PlacedStep step, const LaunchClock& clock, bool fed,
                              InFlightStep* f) {
  f->fed = fed;
  f->owner = std::move(step.owner);
  f->logit_owners = std::move(step.logit_owners);
  f->patches = std::move(step.patches);
  f->decode_rows = static_cast<int64_t>(step.decode.size());
  f->prefill_tokens = step.PrefillTokens();
  f->times = clock.BeforeLaunch(backend_->device_seconds());
  if (absl::Status run = runner_.Launch(step.copies, step.decode, step.prefill, &f->out);
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

}  // namespace banyan::scheduler
