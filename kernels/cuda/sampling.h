// Token sampling on the device: one CUDA block per sample, over fp32 logits [rows, vocab].
//
// Contract: engine/sampler/sampler.h, steps 1-7, for every field of SamplingParams. Each sample
// (a SampleSpecDev) reads one logits row; several samples may read the same row (the n samples of
// one prompt). The uniform number is SampleUniform(seed, stream, step) of common/philox.h,
// drawn on the device, so it is bit-identical to the CPU's. What may differ from the CPU reference
// is only rounding: expf against the host's exp, and the summation order of the double masses. A
// token can therefore differ only where u * W (or a top-p / min-p boundary) falls within that
// rounding of a threshold.
//
// Design (no sort of the vocabulary). Each filter of step 6 is a threshold in the float order:
//  - top-k and the top logprobs: the k-th largest value t, found by a search over the 32-bit
//    order key of the floats, kPivots pivots per pass (counts of key >= pivot), so about 8 passes
//    over the row;
//  - top-p: the smallest t with mass(key > t) < top_p * mass, the same search over masses;
//  - min-p: w >= min_p, tested per element (w is monotone in z).
// Ties at a threshold are cut by token id: a pass counts the ties per warp, and the cutting pass
// ranks them with warp ballots. The final inverse CDF is two passes: per-warp masses, then the one
// warp that holds u * W scans its range. Masses are accumulated in double (as the CPU does);
// every reduction has a fixed order, so the result is deterministic.
//
// Token masks (a grammar's allowed tokens, step 3 of sampler.h): a masked sample names its mask,
// a bit per token id in SampleParams::masks; its row is materialised like a penalised one, with
// -inf for every token whose bit is clear, before its biases and penalties.
//
// Biases and penalties: the samples with a logit_bias or non-default penalties list one
// SamplePenaltyEntry per distinct biased or penalised token; their changed row is materialised in
// `penalized` (one vocab row per such sample) and the filters read it. Other samples read the logits row directly. A sample of a
// fed row (its previous token still on the device, not yet in its entries) names that token by
// its index in `pending_tokens`; it then counts as generated once more, as the host will count it
// once the token is back (engine/backend.h, SampleSpec).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace banyan::kernels::cuda {

inline constexpr int kSampleMaxTopLogprobs = 20;

// One biased or penalised token of one sample (step 3 of sampler.h).
struct SamplePenaltyEntry {
  int32_t token = 0;            // in [0, vocab)
  int32_t generated_count = 0;  // times generated; 0 for a prompt-only or bias-only token
  int32_t in_prompt = 0;        // 1 when the token occurs in the prompt (and repetition is on)
  float bias = 0.0f;            // its logit_bias, added first; -inf: banned (min_tokens)
};

// One sample, packed on the host.
struct SampleSpecDev {
  int32_t row = 0;          // logits row
  int32_t greedy = 0;       // 1: temperature < kGreedyTemperature (decided by the host)
  float temperature = 1.0f;
  int32_t top_k = 0;        // <= 0: off
  float top_p = 1.0f;       // >= 1: off
  float min_p = 0.0f;       // <= 0: off
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t num_top_logprobs = 0;  // 0..kSampleMaxTopLogprobs
  int32_t top_offset = 0;        // first entry of this sample in SampleParams::top
  int32_t penalty_begin = 0;     // entries [begin, begin + count) of SampleParams::penalties
  int32_t penalty_count = 0;     // > 0 only for a sample with a bias or non-default penalties
  int32_t penalized_row = -1;    // row of SampleParams::penalized (masked, biased, penalised
                                 // or fed with penalties), -1 for none
  uint32_t stream = 0;
  int32_t pending_index = -1;    // >= 0: SampleParams::pending_tokens[i] is generated once more
  int32_t mask_index = -1;       // >= 0: mask i of SampleParams::masks; -1: no mask
  uint64_t seed = 0;
  uint64_t step = 0;
};

// The outcome of one sample. token -1: no distribution (every logit NaN or -inf, before or after
// the penalties); logprob is then 0 and the sample's top entries are unspecified.
struct SampleTokenDev {
  int32_t token = -1;
  float logprob = 0.0f;  // raw log-probability of token (step 2); may be -inf
};

struct SampleTopDev {
  int32_t token = -1;
  float logprob = 0.0f;
};

// 64-bit words of one token mask.
inline constexpr int64_t SampleMaskWords(int64_t vocab) { return (vocab + 63) / 64; }

struct SampleParams {
  const float* logits = nullptr;                 // [rows, vocab]
  const SampleSpecDev* specs = nullptr;          // [num_specs]
  const SamplePenaltyEntry* penalties = nullptr; // [sum of penalty_count], distinct tokens per spec
  float* penalized = nullptr;                    // [specs with a penalized_row, vocab] scratch
  const int32_t* pending_tokens = nullptr;       // the fed tokens (-1 reads as 0); see above
  // [masks, SampleMaskWords(vocab)]: bit t % 64 of word t / 64 set = token t allowed.
  const uint64_t* masks = nullptr;
  SampleTokenDev* out = nullptr;                 // [num_specs]
  SampleTopDev* top = nullptr;                   // [sum of num_top_logprobs], most likely first
  int32_t rows = 0;
  int32_t vocab = 0;
  int32_t num_specs = 0;
};

// Launches the sampling of every spec on `stream`; never synchronizes. InvalidArgument for a bad
// shape (vocab <= 0, a spec's row outside [0, rows) is the caller's invariant).
absl::Status SampleRows(const SampleParams& p, cudaStream_t stream);

}  // namespace banyan::kernels::cuda
