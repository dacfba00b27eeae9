// The output stage of the engine loop: a collected token reaches its sample (TakeSample: the
// sampling state, the grammar, EOS and max_tokens), then its event goes out (EmitPending: text,
// stop strings, metrics, the stream), and finished requests leave (Retire). The members live in
// output.cc; the token between the two halves is here.
#pragma once

#include <chrono>
#include <cstddef>

#include "engine/sampler/sampler.h"
#include "engine/step_runner.h"

namespace banyan::scheduler {

struct LiveRequest;

// A token taken into its sample, its event not yet pushed.
struct PendingToken {
  LiveRequest* live;
  size_t sample;
  engine::SampleResult result;
  engine::FinishReason stop;  // EOS / max_tokens, from TakeSample
  std::chrono::steady_clock::time_point at;
};

}  // namespace banyan::scheduler
