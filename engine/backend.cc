#include "engine/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/philox.h"

namespace banyan::engine {

absl::Status Backend::ForwardSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                    std::vector<SampleResult>* out) {
  std::vector<float> logits;
  if (absl::Status s = Forward(batch, &logits); !s.ok()) return s;
  out->clear();
  out->resize(specs.size());
  if (specs.empty()) return absl::OkStatus();
  const size_t rows = batch.decode.size() + [&] {
    size_t n = 0;
    for (const SeqWork& w : batch.prefill) n += w.want_logits ? 1 : 0;
    return n;
  }();
  const size_t vocab = logits.size() / std::max<size_t>(rows, 1);
  SamplerScratch scratch;
  for (size_t i = 0; i < specs.size(); ++i) {
    const SampleSpec& spec = specs[i];
    if (spec.row < 0 || static_cast<size_t>(spec.row) >= rows) {
      return absl::InternalError(absl::StrCat("sample ", i, " reads logits row ", spec.row,
                                              " of ", rows));
    }
    const float u = SampleUniform(spec.state->seed(), spec.state->stream(),
                                  spec.state->step() + static_cast<uint64_t>(spec.step_ahead));
    auto r = SampleWithUniform(std::span<const float>(logits).subspan(spec.row * vocab, vocab),
                               *spec.params, *spec.state, u, &scratch,
                               static_cast<uint64_t>(spec.step_ahead), spec.allowed);
    if (r.ok()) {
      (*out)[i] = std::move(*r);
    } else {
      (*out)[i].token = -1;  // no distribution: the caller fails the request
    }
  }
  return absl::OkStatus();
}

namespace {

// `batch` with each fed row's token set to the token the step before sampled for its spec.
absl::Status FedBatch(const StepBatch& batch, std::span<const int32_t> feed,
                      const std::vector<SampleResult>& before, StepBatch* fed) {
  if (feed.size() != batch.decode.size()) {
    return absl::InvalidArgumentError("a fed step has one feed entry per decode row");
  }
  *fed = batch;
  for (size_t r = 0; r < feed.size(); ++r) {
    if (feed[r] < 0) continue;
    if (static_cast<size_t>(feed[r]) >= before.size() || fed->decode[r].tokens.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("fed row reads token ", feed[r], " of ", before.size()));
    }
    fed->decode[r].tokens[0] = std::max(before[feed[r]].token, 0);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Backend::LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                   std::span<const int32_t> feed) {
  if (forward_only_.has_value()) {
    return absl::FailedPreconditionError("a step launched by LaunchForward awaits its sampling");
  }
  if (launched_.size() >= static_cast<size_t>(kMaxStepsInFlight)) {
    return absl::FailedPreconditionError("two steps are in flight: collect one first");
  }
  std::vector<SampleResult> results;
  if (feed.empty()) {
    if (absl::Status s = ForwardSample(batch, specs, &results); !s.ok()) return s;
  } else {
    if (launched_.empty()) {
      return absl::FailedPreconditionError("fed rows need the step before still in flight");
    }
    StepBatch fed;
    if (absl::Status s = FedBatch(batch, feed, launched_.back(), &fed); !s.ok()) return s;
    // A fed row's penalties count its fed token: they read a copy of the state that has taken
    // it (whose step is then one further: step_ahead one less, the same Philox counter).
    std::vector<SampleSpec> ahead(specs.begin(), specs.end());
    std::deque<SequenceSamplingState> taken;  // stable addresses
    for (SampleSpec& spec : ahead) {
      if (!spec.params->HasPenalties() || spec.row < 0 || static_cast<size_t>(spec.row) >= feed.size() ||
          feed[spec.row] < 0) {
        continue;
      }
      taken.push_back(*spec.state);
      taken.back().Accept(fed.decode[spec.row].tokens[0]);
      spec.state = &taken.back();
      spec.step_ahead -= 1;
    }
    if (absl::Status s = ForwardSample(fed, ahead, &results); !s.ok()) return s;
  }
  launched_.push_back(std::move(results));
  return absl::OkStatus();
}

absl::Status Backend::LaunchForward(const StepBatch& batch, int32_t /*num_specs*/,
                                    std::span<const int32_t> feed) {
  if (forward_only_.has_value()) {
    return absl::FailedPreconditionError("a step launched by LaunchForward awaits its sampling");
  }
  if (launched_.size() >= static_cast<size_t>(kMaxStepsInFlight)) {
    return absl::FailedPreconditionError("two steps are in flight: collect one first");
  }
  if (feed.empty()) {
    forward_only_ = batch;
    return absl::OkStatus();
  }
  if (launched_.empty()) {
    return absl::FailedPreconditionError("fed rows need the step before still in flight");
  }
  StepBatch fed;
  if (absl::Status s = FedBatch(batch, feed, launched_.back(), &fed); !s.ok()) return s;
  forward_only_ = std::move(fed);
  return absl::OkStatus();
}

absl::Status Backend::LaunchSampling(std::span<const SampleSpec> specs) {
  if (!forward_only_.has_value()) {
    return absl::FailedPreconditionError("LaunchSampling without a step from LaunchForward");
  }
  // The default computes here, so the step's batch (and its plan) must still be as launched:
  // the caller changes neither between the two halves.
  std::vector<SampleResult> results;
  const absl::Status s = ForwardSample(*forward_only_, specs, &results);
  forward_only_.reset();
  if (!s.ok()) return s;
  launched_.push_back(std::move(results));
  return absl::OkStatus();
}

absl::Status Backend::CollectSample(std::vector<SampleResult>* out) {
  if (launched_.empty()) {
    return absl::FailedPreconditionError(forward_only_.has_value()
                                             ? "the step awaits its sampling (LaunchSampling)"
                                             : "no step was launched");
  }
  *out = std::move(launched_.front());
  launched_.pop_front();
  return absl::OkStatus();
}

absl::Status Backend::HiddenRows(std::span<const int32_t>, std::vector<float>*) const {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend does not return hidden states (draft heads)"));
}

absl::Status Backend::DraftTrees(const DraftHeads& heads, std::span<const int32_t> rows,
                                 std::span<const int32_t> roots,
                                 std::span<const int32_t> branching,
                                 std::vector<DraftHeads::Tree>* out) {
  if (rows.size() != roots.size()) {
    return absl::InvalidArgumentError("DraftTrees: one root per row");
  }
  std::vector<float> h;
  if (absl::Status s = HiddenRows(rows, &h); !s.ok()) return s;
  return heads.TreeBatch(h, roots, branching, out);
}

}  // namespace banyan::engine
