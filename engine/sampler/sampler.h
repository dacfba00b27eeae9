// The token sampler (CPU reference). One call turns one row of logits into one token.
//
// Contract. A sample depends only on (logits, params, state), where the state contributes its
// token counts and (seed, stream, step). It never depends on the batch, the row or call order.
// Sample() runs, in this order (every backend must follow it):
//
//  1. x = logits with NaN replaced by -inf (a NaN logit can never be sampled). If no x_i > -inf,
//     return InternalError: the model produced no distribution, and guessing a token (or EOS)
//     would hide a backend bug.
//  2. Log-probabilities are those of the *raw* model distribution, log_softmax(x), before
//     penalties, temperature and filtering (vLLM's default "raw_logprobs"; OpenAI's meaning of
//     logprobs as the model's own distribution). Tokens at -inf get -inf. If some x_i = +inf,
//     the limit is taken: those tokens share the mass, the others get -inf.
//  3. A token mask (a grammar's allowed tokens, SampleSpec::allowed) first: z_i = -inf for every
//     token whose bit is clear. Then z = ApplyPenalties(z): each logit_bias entry added (z_i = x_i + bias_i, first, as vLLM
//     does), then repetition, then frequency, then presence (vLLM's definitions); while fewer
//     than min_tokens tokens are generated, z_i = -inf for i in min_tokens_banned.
//  4. temperature < kGreedyTemperature: token = argmax z, the lowest id on ties. Done.
//  5. Weights w_i = exp((z_i - max z) / T), so the most likely token has w = 1 and nothing
//     overflows. If max z = +inf, w_i = (z_i == +inf) ? 1 : 0.
//  6. Candidates C = {i : z_i > -inf}, ranked by z descending, lower id first on ties:
//       top-k (k > 0):  C = the first k of C.
//       top-p (p < 1):  keep rank r iff (sum of w over ranks < r) < top_p * (sum of w over C);
//                       rank 0 is always kept, so this is the minimal nucleus.
//       min-p (m > 0):  keep i iff w_i >= min_p, i.e. p_i >= min_p * p_max.
//  7. Inverse CDF in ascending token id: with W = sum of w over C, the token is the smallest
//     i in C with (sum of w_j over j in C, j <= i) > u * W, where
//     u = SampleUniform(state.seed(), state.stream(), state.step()) from philox.h.
//     The CPU accumulates these sums in double.
//
// Bit-for-bit: u is exact on every backend. The weights are not (each backend has its own exp and
// summation order), so a GPU backend picks a different token only when u * W falls within that
// rounding of a CDF boundary. SampleWithUniform() exposes steps 1-7 for a given u so that backends
// can be cross-tested on the same u.
//
// Not thread-safe per scratch buffer; everything else is stateless.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/philox.h"
#include "engine/sampler/sampling_params.h"

namespace banyan::engine {

// Temperatures below this decode greedily: dividing by them overflows float and the distribution
// is a point mass anyway (vLLM uses the same epsilon).
inline constexpr float kGreedyTemperature = 1e-5f;

// A seed from the OS entropy source, for requests that did not supply one. Thread-safe.
uint64_t RandomSeed();

// The seed a sequence uses for its whole life: the request's, or RandomSeed() when it has none.
// Call once at admission; a preempted and recomputed sequence must keep it.
uint64_t AdmissionSeed(const SamplingParams& params);

// What the sampler needs to know about one sequence beyond its logits. The engine owns one per
// running sequence and calls Accept() with each token it appends. After preemption by recompute,
// rebuild it from the same seed and prompt and Accept() the generated tokens again: the step then
// matches and the continuation is the same.
class SequenceSamplingState {
 public:
  // seed: AdmissionSeed(params). prompt_tokens: only needed for repetition_penalty != 1; pass an
  // empty span otherwise. stream: the index of this sample among the request's n (see philox.h).
  SequenceSamplingState(uint64_t seed, std::span<const int32_t> prompt_tokens, uint32_t stream = 0);

  // Records a generated token and advances the step.
  void Accept(int32_t token);
  // Whether Accept counts tokens (default on). Only the penalties read the counts: a request whose
  // repetition, frequency and presence penalties are all off may turn counting off, which saves a
  // hash-map insert per token on the engine's critical path. Forks inherit the setting.
  void set_count_tokens(bool on) { count_tokens_ = on; }

  // A copy that samples as choice `stream` of the same request (for n > 1 after one prefill).
  SequenceSamplingState Fork(uint32_t stream) const;

  uint64_t seed() const { return seed_; }
  uint32_t stream() const { return stream_; }
  // Tokens generated so far; the Philox counter of the next sample.
  uint64_t step() const { return step_; }
  // Times `token` has been generated (prompt occurrences not counted).
  int32_t GeneratedCount(int32_t token) const;
  const absl::flat_hash_map<int32_t, int32_t>& generated_counts() const {
    return generated_counts_;
  }
  const absl::flat_hash_set<int32_t>& prompt_tokens() const { return prompt_tokens_; }

 private:
  uint64_t seed_;
  uint32_t stream_;
  uint64_t step_ = 0;
  bool count_tokens_ = true;
  absl::flat_hash_set<int32_t> prompt_tokens_;              // distinct prompt token ids
  absl::flat_hash_map<int32_t, int32_t> generated_counts_;  // token id -> times generated
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // raw log-probability of `token` (step 2 above); may be -inf
  // The params.logprobs most likely tokens under the raw distribution, most likely first (lower
  // id first on ties). Values may be -inf when the vocabulary has fewer finite logits.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Reusable buffers so that a decode loop does not allocate per token. Sized to the vocabulary on
// first use. One per engine thread.
struct SamplerScratch {
  std::vector<float> logits;   // [vocab] sanitised, then penalised copy of the input
  std::vector<float> weights;  // [vocab] w_i, valid for candidates only
  std::vector<int32_t> ids;    // candidate token ids
};

// z[i] for biased and penalised tokens, in place, exactly as vLLM does it:
//   i in logit_bias:           z = z + bias_i (first)
//   i in min_tokens_banned, state.step() + step_ahead < min_tokens: z = -inf
//   i in prompt or generated:  z = z > 0 ? z / repetition_penalty : z * repetition_penalty
//   i generated count c times: z = z - frequency_penalty * c;  z = z - presence_penalty
// logits: [vocab]. Token ids held by `state` must lie in [0, vocab).
// step_ahead: as SampleSpec's (engine/backend.h), the tokens the draw is ahead of `state`.
void ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                    const SequenceSamplingState& state, uint64_t step_ahead = 0);

// Samples one token. logits: [vocab], not modified. params must have passed Validate().
// scratch: optional reusable buffers (nullptr: allocate locally).
absl::StatusOr<SampleResult> Sample(std::span<const float> logits, const SamplingParams& params,
                                    const SequenceSamplingState& state,
                                    SamplerScratch* scratch = nullptr);

// Steps 1-7 with the uniform number given instead of drawn: u in [0, 1). Sample() is this with
// u = SampleUniform(state.seed(), state.stream(), state.step()).
// step_ahead: as ApplyPenalties' (min_tokens counts state.step() + step_ahead tokens).
// allowed: empty, or a bit per token id (bit i of word i / 64; at least vocab bits): the tokens
// step 3 leaves alone; every other token gets -inf before the bias and the penalties. The
// log-probabilities stay those of the raw model (step 2), as with logit_bias.
absl::StatusOr<SampleResult> SampleWithUniform(std::span<const float> logits,
                                               const SamplingParams& params,
                                               const SequenceSamplingState& state, float u,
                                               SamplerScratch* scratch = nullptr,
                                               uint64_t step_ahead = 0,
                                               std::span<const uint64_t> allowed = {});
// Step 3's mask alone: z_i = -inf where bit i of `allowed` is clear. logits: [vocab];
// allowed: at least vocab bits.
void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> allowed);

}  // namespace banyan::engine
