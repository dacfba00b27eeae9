// The backend interface: runs the LLaMA forward pass for one engine step over the prefix-tree
// KV cache. The CPU backend (fp32, the reference) and the CUDA backend implement it; both take
// the same StepBatch and the same AttentionPlan.
//
// One step mixes decode rows (one new token each, attention through the TPP plan) and prefill
// sequences (many new tokens each, causal attention over their cached path plus themselves).
// Within each layer every new token's K/V is written to its slot before any attention runs, so a
// sequence may attend to KV that another sequence of the same step writes (two prompts sharing a
// prefix prefilled together, or two forks appending the same token).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/sampling_params.h"
#include "engine/speculative/draft_heads.h"
#include "kvcache/attention_plan.h"

namespace banyan::engine {

// One sequence's new tokens in a step.
struct SeqWork {
  int32_t pos0 = 0;                     // position of tokens[0] in the sequence
  std::vector<int32_t> tokens;          // new tokens (exactly one for a decode row)
  std::vector<kvcache::SlotRef> slots;  // KV slot of each token
  std::vector<uint8_t> write_kv;        // 1: store the computed K/V; 0: already cached (reused)
  bool want_logits = true;              // return the logits of the last token
  // Prefill only: the sequence's whole context, positions [0, pos0 + tokens.size()), as chunk
  // spans in position order (an AttentionPlan row built without sharing).
  std::vector<int32_t> span_chunk, span_begin, span_end;
};

struct StepBatch {
  // Decode rows, in the order of plan->rows.
  std::vector<SeqWork> decode;
  const kvcache::AttentionPlan* plan = nullptr;  // required when decode is not empty
  std::vector<SeqWork> prefill;
};

enum class AttentionMode {
  kTpp,    // shared chunks read once per segment (default)
  kPaged,  // every row reads its whole context (plans built without sharing)
  kNone,   // attention skipped, projections kept: the no-attention ceiling for benchmarks
};

// One token to sample from one row of a step's logits: the row's index among the rows Forward
// would return, and the sampler's inputs (engine/sampler/sampler.h). Several samples may read the
// same row (the n samples of a prompt, each with its own state).
struct SampleSpec {
  int32_t row = 0;
  const SamplingParams* params = nullptr;
  const SequenceSamplingState* state = nullptr;
  // Steps the draw is ahead of `state`: the Philox counter is state->step() + step_ahead. A row
  // launched before the sample's previous token is back (a fed row, below) samples as the state
  // will be once that token is taken: step_ahead 1, and its penalties count the fed token as
  // generated once more (the backend reads it where the row's input is read).
  int32_t step_ahead = 0;
  // A grammar's token mask (sampler.h, step 3): empty, or a bit per token id, the allowed ones
  // set. Read during LaunchSample only. Backends that cannot apply it say so
  // (supports_token_masks), and the engine loop never gives them one.
  std::span<const uint64_t> allowed = {};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The KV pool this backend holds: its chunk count and tokens per chunk. The engine loop sizes
  // its ChunkPool and prefix tree from these, so the two always agree.
  virtual int32_t num_chunks() const = 0;
  virtual int32_t chunk_size() const = 0;
  // Whether K and V are kept in FP8 (kernels/kv_fp8.h; on the CPU: rounded as FP8 would).
  virtual bool kv_fp8() const { return false; }
  // Whether a row's results (logits, hence tokens and logprobs) are bit for bit the same in any
  // batch, tree layout and cache state as alone (banyand --deterministic on).
  virtual bool batch_invariant() const { return false; }
  // Whether the step's attention plans keep their shared segments in the paged mode too: the
  // CUDA backend's deterministic mode reads a shared prefix once for all its rows (with the
  // same sums as each row alone), so it wants the plan's sharing although it runs no TPP.
  virtual bool shared_prefix_plans() const { return false; }
  // Device time of the sampled steps so far (ForwardSample, LaunchSample), from each step's
  // launch to its sampled tokens (CUDA events); 0 where the backend does not measure it (the
  // CPU). The engine loop reports step wall time minus this as the device's idle time between
  // steps.
  virtual double device_seconds() const { return 0; }
  // Applies the KV copies that node splits request, in order.
  virtual absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> copies) = 0;
  // Runs the model. logits: [rows, vocab] for every SeqWork with want_logits, decode rows first
  // then prefill sequences, each in batch order.
  virtual absl::Status Forward(const StepBatch& batch, std::vector<float>* logits) = 0;
  // Runs the model and samples: (*out)[i] is the token drawn for specs[i] by the contract of
  // sampler.h, with its raw logprob and params->logprobs top entries. Only these cross back to
  // the host. A row with no distribution gives token -1 (the caller fails that request with
  // NoDistributionMessage()). The default runs Forward and the CPU sampler; a GPU backend
  // samples on the device.
  virtual absl::Status ForwardSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                     std::vector<SampleResult>* out);

  // ForwardSample in two halves, so that the caller can work while the device runs the step:
  // LaunchSample enqueues it and returns; CollectSample waits for the oldest step launched and
  // returns its tokens. At most kMaxStepsInFlight steps are launched and not collected; while
  // any is, nothing but LaunchSample, CollectSample and CopyChunks may run (they queue behind
  // it). The batch and the specs' parameters and states are read during LaunchSample only.
  //
  // `feed` (empty, or one entry per decode row): feed[r] >= 0 makes decode row r's input token
  // the one the step launched just before (still in flight or not) sampled for its spec
  // feed[r], read where that step left it (a token of -1, no distribution, reads as 0); the
  // row's token in `batch` is then ignored. The caller can so launch step N + 1 before step N's
  // tokens are back: the device never waits for the host between them.
  //
  // The default runs ForwardSample inside LaunchSample (fed tokens taken from the results it
  // holds) and hands the results over in CollectSample (no overlap); a GPU backend returns from
  // LaunchSample before the device is done.
  static constexpr int kMaxStepsInFlight = 2;
  absl::Status LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs) {
    return LaunchSample(batch, specs, {});
  }
  virtual absl::Status LaunchSample(const StepBatch& batch, std::span<const SampleSpec> specs,
                                    std::span<const int32_t> feed);
  virtual absl::Status CollectSample(std::vector<SampleResult>* out);
  // LaunchSample in two halves again, for a step whose samples are not all known when it is
  // launched: a fed step's constrained rows, whose token masks need the tokens of the step
  // before on the host. LaunchForward enqueues the forward pass of `batch` (fed rows as
  // LaunchSample's; `num_specs`: how many samples will follow) and returns; LaunchSampling then
  // enqueues the sampling of its `specs`, read as LaunchSample reads them except that no fed
  // token is pending any more: the caller has taken the step before's tokens into the states
  // (step_ahead 0). In between only CollectSample of the step before may run (CollectSample of
  // this step, or another launch, is refused). On the GPU the pass runs while the host works out
  // the masks; the sampler waits for them on the device, not the host for the device.
  virtual absl::Status LaunchForward(const StepBatch& batch, int32_t num_specs,
                                     std::span<const int32_t> feed);
  virtual absl::Status LaunchSampling(std::span<const SampleSpec> specs);
  // Between LaunchForward and LaunchSampling: where the caller may write `count` token masks of
  // `words` words each so that LaunchSampling takes them without a copy (a spec whose `allowed`
  // views slot i is sampled with what slot i holds then). Empty when the backend has no such
  // place (the default): the specs' own masks are read, as always.
  virtual std::span<uint64_t> MaskStaging(int32_t count, int64_t words) {
    (void)count;
    (void)words;
    return {};
  }
  // Whether LaunchSample returns before the step is computed (the caller's overlap pays).
  virtual bool launches_async() const { return false; }
  // Whether the backend samples with SampleSpec::allowed (token masks of grammars). Both
  // backends do; the engine loop refuses constrained requests on one that does not.
  virtual bool supports_token_masks() const { return true; }
  // The final-norm hidden states [rows.size() x dim] of rows of the last step (row indices as
  // in SampleSpec::row), for draft heads. Backends that cannot say so.
  virtual absl::Status HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const;
  // Candidate trees of `heads` for samples whose next tokens `roots` the last step's rows `rows`
  // produced (row indices as in SampleSpec::row): out[i] as DraftHeads::TreeBatch builds it
  // from the rows' final-norm hidden states, `branching` as there. The default runs TreeBatch
  // on the host over HiddenRows; the CUDA backend runs the heads on the device, where the
  // hidden states are, and copies back only the trees' tokens.
  virtual absl::Status DraftTrees(const DraftHeads& heads, std::span<const int32_t> rows,
                                  std::span<const int32_t> roots,
                                  std::span<const int32_t> branching,
                                  std::vector<DraftHeads::Tree>* out);

 private:
  std::deque<std::vector<SampleResult>> launched_;  // the default LaunchSample's results
  // The default LaunchForward's batch (fed tokens in place), run by its LaunchSampling.
  std::optional<StepBatch> forward_only_;
};

// What a row with token -1 from ForwardSample means.
inline constexpr char kNoDistributionMessage[] =
    "sampler: every logit is NaN or -inf (or the penalties pushed them there); the model "
    "produced no usable distribution";

}  // namespace banyan::engine
