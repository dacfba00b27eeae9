// DeviceSampler: the host side of the device sampler (kernels/cuda/sampling.h) for the CUDA
// backend. Per step it packs the samples' parameters and their penalty entries into one upload,
// launches the kernel on the logits the model left on the device, and copies back, through one
// pinned buffer, only the tokens, their logprobs and the top entries that were asked for.
//
// Host work per step: O(samples) plus one entry per penalised token of the samples whose
// penalties are not the defaults (their SequenceSamplingState's generated tokens, and its prompt
// tokens when repetition_penalty != 1), plus a copy of each masked sample's token mask (vocab / 8
// bytes: 16 KiB at 128K) unless the caller wrote it in the upload itself (MaskStaging); every
// mask crosses to the device with the rest of the upload.
//
// Header-only so that it needs no build change beside the backend. Not thread-safe: the engine
// thread owns it with the backend. Buffers are reused across steps: the backend keeps one
// sampler per step in flight and reuses it only once that step was collected.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend.h"
#include "engine/cuda/device_memory.h"
#include "engine/sampler/sampler.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/sampling.h"

namespace banyan::engine::cuda {

// One step's samples packed for the kernel.
struct PackedSamples {
  std::vector<kernels::cuda::SampleSpecDev> specs;
  std::vector<kernels::cuda::SamplePenaltyEntry> entries;  // the specs' penalty entries
  // Token masks, SampleMaskWords(vocab) words each, by mask_index: first `staged_slots` masks
  // written in place by the caller (DeviceSampler::MaskStaging), then `masks`, views of the other
  // specs' own masks (SampleSpec::allowed), copied once, straight into the upload.
  int64_t mask_words = 0;
  int64_t staged_slots = 0;
  std::vector<std::span<const uint64_t>> masks;
  int64_t MaskWords() const {
    return (staged_slots + static_cast<int64_t>(masks.size())) * mask_words;
  }
  // Copies `masks` to their slots of `dst`, an array of MaskWords() words whose staged slots
  // are already in place.
  void CopyMasks(uint64_t* dst) const {
    dst += staged_slots * mask_words;
    for (std::span<const uint64_t> m : masks) dst = std::copy(m.begin(), m.end(), dst);
  }
  int64_t num_top = 0;         // sum of the specs' num_top_logprobs
  int32_t penalized_rows = 0;  // specs with penalty entries (rows of the penalised scratch)
};

// The entries of step 3 for one sample, as ApplyPenalties visits them: every generated token,
// the prompt-only tokens when repetition_penalty != 1, and the biased tokens not among those,
// each with its bias (-inf for min_tokens_banned while fewer than min_tokens are generated:
// `generated`, the draw's state.step() + step_ahead). None when nothing changes the logits.
inline absl::Status AddPenaltyEntries(const SamplingParams& p, const SequenceSamplingState& st,
                                      uint64_t generated, int32_t vocab,
                                      kernels::cuda::SampleSpecDev* d,
                                      std::vector<kernels::cuda::SamplePenaltyEntry>* entries) {
  const bool repetition = p.repetition_penalty != 1.0f;
  if (!p.ChangesLogits()) return absl::OkStatus();
  d->penalty_begin = static_cast<int32_t>(entries->size());
  // min_tokens' bans (-inf) win over logit_bias; both lists are sorted by id (Validate, and the
  // engine loop for the bans).
  const bool ban = generated < static_cast<uint64_t>(p.min_tokens);
  const auto banned = [&](int32_t id) {
    return ban && std::binary_search(p.min_tokens_banned.begin(), p.min_tokens_banned.end(), id);
  };
  const auto user_bias = [&](int32_t id) -> const float* {  // nullptr: none
    const auto it = std::lower_bound(
        p.logit_bias.begin(), p.logit_bias.end(), id,
        [](const std::pair<int32_t, float>& e, int32_t v) { return e.first < v; });
    return it != p.logit_bias.end() && it->first == id ? &it->second : nullptr;
  };
  const auto bias_of = [&](int32_t id) {
    const float* b = user_bias(id);
    return banned(id) ? -INFINITY : b != nullptr ? *b : 0.0f;
  };
  const bool penalties = p.HasPenalties();
  const auto check = [vocab](int32_t id) {
    return id >= 0 && id < vocab
               ? absl::OkStatus()
               : absl::InternalError(absl::StrCat("penalised token id ", id,
                                                  " outside a vocabulary of ", vocab));
  };
  if (penalties) {
    for (const auto& [id, count] : st.generated_counts()) {
      BANYAN_RETURN_IF_ERROR(check(id));
      entries->push_back({id, count, st.prompt_tokens().contains(id) ? 1 : 0, bias_of(id)});
    }
  }
  if (repetition) {
    for (int32_t id : st.prompt_tokens()) {
      if (st.generated_counts().contains(id)) continue;
      BANYAN_RETURN_IF_ERROR(check(id));
      entries->push_back({id, 0, 1, bias_of(id)});
    }
  }
  // The biased or banned tokens that the penalties did not list.
  const auto listed = [&](int32_t id) {
    return penalties && (st.generated_counts().contains(id) ||
                         (repetition && st.prompt_tokens().contains(id)));
  };
  for (const auto& [id, bias] : p.logit_bias) {
    if (listed(id)) continue;
    BANYAN_RETURN_IF_ERROR(check(id));
    entries->push_back({id, 0, 0, bias_of(id)});
  }
  if (ban) {
    for (int32_t id : p.min_tokens_banned) {
      if (listed(id) || user_bias(id) != nullptr) continue;  // listed with the ban already
      BANYAN_RETURN_IF_ERROR(check(id));
      entries->push_back({id, 0, 0, -INFINITY});
    }
  }
  d->penalty_count = static_cast<int32_t>(entries->size()) - d->penalty_begin;
  return absl::OkStatus();
}

// Packs `specs` (rows of a [rows, vocab] logits array). `feed`: the step's (Backend::LaunchSample);
// a spec with penalties on a fed row names its pending token, feed[row] of the fed tokens.
// A spec's token mask (SampleSpec::allowed) is viewed, not copied: its first SampleMaskWords(vocab)
// words, which must stay as they are until the packed samples are uploaded (Enqueue does both).
// A mask that starts on a slot of `staged` (SampleMaskWords(vocab) words each) is taken where it
// is: its spec's mask_index is that slot.
// InternalError for a spec outside the rows, a penalised token outside the vocabulary or a mask
// shorter than the vocabulary (the CPU sampler's invariants).
inline absl::Status PackSamples(std::span<const SampleSpec> specs, int32_t rows, int32_t vocab,
                                PackedSamples* out, std::span<const int32_t> feed = {},
                                std::span<const uint64_t> staged = {}) {
  namespace kc = kernels::cuda;
  const int64_t words = kc::SampleMaskWords(vocab);
  out->specs.resize(specs.size());
  out->entries.clear();
  out->masks.clear();
  out->mask_words = words;
  out->staged_slots = static_cast<int64_t>(staged.size()) / words;
  out->num_top = 0;
  out->penalized_rows = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const SampleSpec& in = specs[i];
    if (in.row < 0 || in.row >= rows || in.params == nullptr || in.state == nullptr) {
      return absl::InternalError(
          absl::StrCat("sample ", i, " reads logits row ", in.row, " of ", rows));
    }
    const SamplingParams& p = *in.params;
    const SequenceSamplingState& st = *in.state;
    kc::SampleSpecDev& d = out->specs[i];
    d = kc::SampleSpecDev{};
    d.row = in.row;
    d.greedy = p.temperature < kGreedyTemperature ? 1 : 0;
    d.temperature = p.temperature;
    d.top_k = p.top_k;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
    d.repetition_penalty = p.repetition_penalty;
    d.frequency_penalty = p.frequency_penalty;
    d.presence_penalty = p.presence_penalty;
    d.num_top_logprobs = std::clamp(p.logprobs, 0, std::min(kc::kSampleMaxTopLogprobs, vocab));
    d.top_offset = static_cast<int32_t>(out->num_top);
    out->num_top += d.num_top_logprobs;
    d.seed = st.seed();
    d.stream = st.stream();
    d.step = st.step() + static_cast<uint64_t>(in.step_ahead);
    BANYAN_RETURN_IF_ERROR(AddPenaltyEntries(p, st, d.step, vocab, &d, &out->entries));
    if (p.HasPenalties() && static_cast<size_t>(in.row) < feed.size() && feed[in.row] >= 0) {
      d.pending_index = feed[in.row];
    }
    if (!in.allowed.empty()) {
      if (static_cast<int64_t>(in.allowed.size()) < words) {
        return absl::InternalError(absl::StrCat("sample ", i, "'s token mask has ",
                                                in.allowed.size() * 64, " bits for a vocabulary of ",
                                                vocab));
      }
      // Pointer order within one array (std::less: a total order for any pointers).
      const uint64_t* m = in.allowed.data();
      const std::less<const uint64_t*> before;
      if (!staged.empty() && !before(m, staged.data()) &&
          before(m, staged.data() + out->staged_slots * words) && (m - staged.data()) % words == 0) {
        d.mask_index = static_cast<int32_t>((m - staged.data()) / words);
      } else {
        d.mask_index = static_cast<int32_t>(out->staged_slots + std::ssize(out->masks));
        out->masks.push_back(in.allowed.first(static_cast<size_t>(words)));
      }
    }
    if (d.penalty_count > 0 || d.pending_index >= 0 || d.mask_index >= 0) {
      d.penalized_row = out->penalized_rows++;
    }
  }
  return absl::OkStatus();
}

// Unpacks the kernel's outputs: tokens [specs.size()] and top entries [num_top].
inline void UnpackSamples(const PackedSamples& packed, const kernels::cuda::SampleTokenDev* tokens,
                          const kernels::cuda::SampleTopDev* top, std::vector<SampleResult>* out) {
  out->clear();
  out->resize(packed.specs.size());
  for (size_t i = 0; i < packed.specs.size(); ++i) {
    SampleResult& r = (*out)[i];
    r.token = tokens[i].token;
    r.logprob = tokens[i].logprob;
    if (r.token < 0) continue;
    const kernels::cuda::SampleSpecDev& d = packed.specs[i];
    r.top_logprobs.reserve(d.num_top_logprobs);
    for (int32_t j = 0; j < d.num_top_logprobs; ++j) {
      r.top_logprobs.emplace_back(top[d.top_offset + j].token, top[d.top_offset + j].logprob);
    }
  }
}

class DeviceSampler {
 public:
  // Pinned memory for `count` token masks of SampleMaskWords(vocab) words each, in the next
  // Enqueue's upload: a spec whose `allowed` views one of these slots is uploaded from there,
  // without a copy (the engine loop's fill threads write a late step's masks straight in). Valid
  // until that Enqueue, which takes it; DropStaging forgets it unused.
  absl::Status MaskStaging(int32_t count, int64_t words, std::span<uint64_t>* out) {
    staged_ = {};
    const int64_t n = int64_t{count} * words;
    BANYAN_RETURN_IF_ERROR(host_in_.Reserve(std::max<int64_t>(n, 1) * 8, "sampling inputs (host)"));
    *out = {host_in_.as<uint64_t>(), static_cast<size_t>(n)};
    staged_ = *out;
    return absl::OkStatus();
  }
  void DropStaging() { staged_ = {}; }

  // Enqueues on `stream` the upload, the sampling of every spec over `logits` (device,
  // [rows, vocab]) and the copy of the results to pinned memory. Synchronize the stream, then
  // call Collect(). The specs' params and states are read here only.
  // `feed` and `fed_tokens` (device): the step's feed and the tokens it reads, for the pending
  // tokens of fed rows with penalties (PackSamples).
  absl::Status Enqueue(const float* logits, int32_t rows, int32_t vocab,
                       std::span<const SampleSpec> specs, cudaStream_t stream,
                       std::span<const int32_t> feed = {}, const int32_t* fed_tokens = nullptr) {
    namespace kc = kernels::cuda;
    const std::span<const uint64_t> staged = std::exchange(staged_, {});
    packed_.specs.clear();
    if (specs.empty()) return absl::OkStatus();
    if (!feed.empty() && fed_tokens == nullptr) {
      return absl::InvalidArgumentError("a fed step's sampling needs the fed tokens");
    }
    BANYAN_RETURN_IF_ERROR(PackSamples(specs, rows, vocab, &packed_, feed, staged));

    // Inputs: [token masks][specs][penalty entries], one copy (each part 8-byte aligned); the
    // staged masks are in place already.
    static_assert(sizeof(kc::SampleSpecDev) % 8 == 0 && sizeof(kc::SamplePenaltyEntry) % 8 == 0);
    const int64_t mask_bytes = packed_.MaskWords() * static_cast<int64_t>(sizeof(uint64_t));
    const int64_t spec_bytes =
        static_cast<int64_t>(packed_.specs.size() * sizeof(kc::SampleSpecDev));
    const int64_t entry_bytes =
        static_cast<int64_t>(packed_.entries.size() * sizeof(kc::SamplePenaltyEntry));
    const int64_t in_bytes = mask_bytes + spec_bytes + entry_bytes;
    const int64_t staged_bytes = packed_.staged_slots * packed_.mask_words * 8;
    BANYAN_RETURN_IF_ERROR(host_in_.Reserve(in_bytes, "sampling inputs (host)", staged_bytes));
    BANYAN_RETURN_IF_ERROR(dev_in_.Reserve(in_bytes, "sampling inputs"));
    char* const host = host_in_.as<char>();
    if (mask_bytes > 0) packed_.CopyMasks(reinterpret_cast<uint64_t*>(host));
    std::memcpy(host + mask_bytes, packed_.specs.data(), spec_bytes);
    if (entry_bytes > 0) {
      std::memcpy(host + mask_bytes + spec_bytes, packed_.entries.data(), entry_bytes);
    }
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_in_.get(), host_in_.get(), in_bytes,
                                                cudaMemcpyHostToDevice, stream));

    // Outputs: [tokens][top entries], one copy back.
    const int64_t n = static_cast<int64_t>(packed_.specs.size());
    const int64_t out_bytes = n * static_cast<int64_t>(sizeof(kc::SampleTokenDev)) +
                              packed_.num_top * static_cast<int64_t>(sizeof(kc::SampleTopDev));
    BANYAN_RETURN_IF_ERROR(dev_out_.Reserve(out_bytes, "sampling results"));
    BANYAN_RETURN_IF_ERROR(host_out_.Reserve(out_bytes, "sampling results (host)"));
    if (packed_.penalized_rows > 0) {
      BANYAN_RETURN_IF_ERROR(penalized_.Reserve(int64_t{packed_.penalized_rows} * vocab * 4,
                                                "penalised logits"));
    }

    kc::SampleParams sp;
    sp.logits = logits;
    sp.masks = dev_in_.as<const uint64_t>();
    sp.specs = reinterpret_cast<const kc::SampleSpecDev*>(dev_in_.as<char>() + mask_bytes);
    sp.penalties = reinterpret_cast<const kc::SamplePenaltyEntry*>(dev_in_.as<char>() + mask_bytes +
                                                                   spec_bytes);
    sp.penalized = penalized_.as<float>();
    sp.pending_tokens = fed_tokens;
    sp.out = dev_out_.as<kc::SampleTokenDev>();
    sp.top = reinterpret_cast<kc::SampleTopDev*>(sp.out + n);
    sp.rows = rows;
    sp.vocab = vocab;
    sp.num_specs = static_cast<int32_t>(n);
    BANYAN_RETURN_IF_ERROR(kc::SampleRows(sp, stream));
    BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_.get(), dev_out_.get(), out_bytes,
                                                cudaMemcpyDeviceToHost, stream));
    return absl::OkStatus();
  }

  // The last Enqueue's results on the device: one {token, logprob} per spec, then the top
  // entries (valid on the stream after that Enqueue's work).
  const kernels::cuda::SampleTokenDev* device_results() const {
    return dev_out_.as<kernels::cuda::SampleTokenDev>();
  }

  // The results of the last Enqueue (its stream synchronized). Token -1: no distribution.
  void Collect(std::vector<SampleResult>* out) const {
    const auto* tokens = host_out_.as<const kernels::cuda::SampleTokenDev>();
    UnpackSamples(packed_, tokens,
                  reinterpret_cast<const kernels::cuda::SampleTopDev*>(tokens + packed_.specs.size()),
                  out);
  }

 private:
  PackedSamples packed_;
  std::span<const uint64_t> staged_;  // MaskStaging's slots, at the start of host_in_
  PinnedBuffer host_in_, host_out_;
  DeviceBuffer dev_in_, dev_out_, penalized_;
};

}  // namespace banyan::engine::cuda
