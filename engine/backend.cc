#include "engine/backend.h"

#include "absl/strings/str_cat.h"

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
    auto r = Sample(std::span<const float>(logits).subspan(spec.row * vocab, vocab), *spec.params,
                    *spec.state, &scratch);
    if (r.ok()) {
      (*out)[i] = std::move(*r);
    } else {
      (*out)[i].token = -1;  // no distribution: the caller fails the request
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs) {
  launched_.clear();
  return ForwardSample(batch, specs, &launched_);
}

absl::Status Backend::CollectSample(std::vector<SampleResult>* out) {
  *out = std::move(launched_);
  launched_.clear();
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
