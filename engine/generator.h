// Generator: runs a set of generation requests to completion as one continuous batch over the
// prefix-tree KV cache. It is the batch engine behind `banyan generate`, the engine tests and the
// CPU throughput benchmark; the daemon's iteration-level scheduler drives the same steps.
//
// A step:
//  1. places new tokens in the tree (Insert for prompts, Append for decode rows), collecting the
//     split copies;
//  2. derives every new token's slot from the tree *after* all placements (a later placement can
//     split a node that holds an earlier, not yet computed token) and applies the copies before
//     the forward pass writes any KV;
//  3. runs one forward pass; decode rows use an AttentionPlan over the rows in tree DFS order,
//     rebuilt only when the tree's shape version changes;
//  4. samples each sequence from its own logits and its own (seed, step) stream, so a sequence's
//     tokens never depend on what else is in the batch.
//
// Output tokens exclude the token that finished a sequence with kStop (EOS or a stop id).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/sampling_params.h"
#include "kvcache/prefix_tree.h"

namespace banyan::engine {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when the model wants it
  SamplingParams params;
  int n = 1;                    // samples of this prompt, sharing its KV
  std::string cache_namespace;  // tenant / cache salt: prefixes are shared only within it
};

struct SampleOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each emitted token
  FinishReason finish = FinishReason::kNone;
};

struct GenerationResult {
  std::vector<SampleOutput> samples;  // n of them
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache
};

struct GeneratorOptions {
  AttentionMode attention = AttentionMode::kTpp;  // kPaged: plans built without sharing
};

struct GeneratorStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t plan_builds = 0;  // full AttentionPlan rebuilds (others only advanced lengths)
  double prefill_seconds = 0;
  double decode_seconds = 0;
  kvcache::MemoryStats peak;  // at the step with the most live chunks
};

// Checks a request against the model: non-empty prompt, ids in the vocabulary, prompt plus
// max_tokens within the context (the message gives both numbers), valid sampling parameters,
// n >= 1. The one engine-side check, shared by Generator and the daemon's Scheduler.
absl::Status ValidateGeneration(const ModelConfig& config, std::span<const int32_t> prompt,
                                const SamplingParams& params, int n);

class Generator {
 public:
  Generator(const ModelConfig& config, Backend* backend, kvcache::PrefixTree* tree,
            GeneratorOptions options = {});

  // ValidateGeneration for this model.
  absl::Status Validate(const GenerationRequest& request) const;

  // Runs every request to completion. Their sequences are released at the end (their KV stays
  // cached in the tree).
  absl::StatusOr<std::vector<GenerationResult>> Run(std::span<const GenerationRequest> requests);

  const GeneratorStats& stats() const { return stats_; }

 private:
  const ModelConfig& config_;
  Backend* backend_;
  kvcache::PrefixTree* tree_;
  GeneratorOptions options_;
  GeneratorStats stats_;
};

}  // namespace banyan::engine
