// Greedy steps of the CUDA backend through its one step API, the sampling path (ForwardSample,
// LaunchSample / CollectSample), as the engine loop runs them: every output row sampled once
// with temperature 0, which is the argmax of its logits with the lowest id on ties
// (engine/sampler/sampler.h, step 4). One spec per output row, in row order, so spec i is row i:
// a fed row's feed entry is the row index in the step before, and tokens come back by row.
// A row with no distribution (token -1) is an error, as a model producing such a row is one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/sampling_params.h"

namespace banyan::testing {

class GreedySteps {
 public:
  GreedySteps() { params_.temperature = 0; }
  GreedySteps(const GreedySteps&) = delete;
  GreedySteps& operator=(const GreedySteps&) = delete;

  // The tokens of one step run to completion.
  absl::Status Forward(engine::CudaBackend& backend, const engine::StepBatch& batch,
                       std::vector<int32_t>* tokens) {
    std::vector<engine::SampleResult> results;
    if (absl::Status s = backend.ForwardSample(batch, Specs(batch), &results); !s.ok()) return s;
    return Tokens(results, tokens);
  }
  // A step launched ahead; `feed` as LaunchSample's (here: row indices of the step before).
  absl::Status Launch(engine::CudaBackend& backend, const engine::StepBatch& batch,
                      std::span<const int32_t> feed) {
    return backend.LaunchSample(batch, Specs(batch), feed);
  }
  // The oldest step launched ahead. `tokens` is only written on success.
  absl::Status Collect(engine::CudaBackend& backend, std::vector<int32_t>* tokens) {
    std::vector<engine::SampleResult> results;
    if (absl::Status s = backend.CollectSample(&results); !s.ok()) return s;
    return Tokens(results, tokens);
  }

 private:
  // One greedy spec per output row: the decode rows, then the prefill rows with want_logits.
  std::span<const engine::SampleSpec> Specs(const engine::StepBatch& batch) {
    int32_t rows = 0;
    for (const engine::SeqWork& w : batch.decode) rows += w.want_logits ? 1 : 0;
    for (const engine::SeqWork& w : batch.prefill) rows += w.want_logits ? 1 : 0;
    specs_.clear();
    for (int32_t r = 0; r < rows; ++r) {
      specs_.push_back(engine::SampleSpec{.row = r, .params = &params_, .state = &state_});
    }
    return specs_;
  }
  static absl::Status Tokens(const std::vector<engine::SampleResult>& results,
                             std::vector<int32_t>* tokens) {
    tokens->clear();
    for (const engine::SampleResult& r : results) {
      if (r.token < 0) {
        return absl::InternalError("the model produced a row of logits with no number");
      }
      tokens->push_back(r.token);
    }
    return absl::OkStatus();
  }

  engine::SamplingParams params_;
  const engine::SequenceSamplingState state_{0, {}};
  std::vector<engine::SampleSpec> specs_;
};

}  // namespace banyan::testing
