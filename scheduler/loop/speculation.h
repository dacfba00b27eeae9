// The speculation stage of the engine loop (LoopOptions::Speculation): after placement, each
// decode row's sample may add candidate rows that the same step verifies. The stage's members
// live in speculation.cc (EngineLoop::Speculate, PlaceCandidates, TakeCandidates); what decides
// whether a step may speculate at all is here.
#pragma once

#include <cstddef>

#include "scheduler/engine_loop.h"

namespace banyan::scheduler {

// The size class (SpeculationGovernor::ClassOf) a step with `decode_rows` is measured in, or -1
// when it cannot speculate: speculation off, no decode rows, or more than speculation_max_rows.
int SpeculationClassFor(const LoopOptions& options, size_t decode_rows);

}  // namespace banyan::scheduler
