// The launch stage of the engine loop: every decode row of a placed step samples with its own
// request's parameters and state (candidate rows have theirs already; a fed row samples as the
// state will be once the step before's token is taken), then the step goes to the backend
// (EngineLoop::LaunchPlaced, launch.cc) and becomes the step in flight.
#pragma once

#include "scheduler/loop/placement.h"

namespace banyan::scheduler {

// Sets the sampling spec of every decode row that has none. A constrained row is never fed
// (its mask needs the token before on the host): checked.
void BindSampling(PlacementHooks& hooks, PlacedStep* step);

}  // namespace banyan::scheduler
