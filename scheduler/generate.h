// GenerateAll: runs a set of requests to completion on the one engine loop, on the calling
// thread. The batch entry point of `banyan generate`, the CPU benchmark and the engine tests; it
// drives exactly the loop the daemon's scheduler thread drives.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/engine_loop.h"
#include "scheduler/request.h"

namespace banyan::scheduler {

struct SampleOutput {
  // Generated tokens, without the token that finished the sample with kStop (EOS, a stop id).
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each token in `tokens`
  std::string text;             // the streamed text (empty when the loop has no tokenizer)
  FinishReason finish = FinishReason::kNone;
};

struct GenerationResult {
  std::vector<SampleOutput> samples;  // n of them
  Usage usage;                        // prompt_tokens, cached_prompt_tokens, completion_tokens
};

// Checks every request first ("request i: ..."), adds them all, and steps the loop until it is
// idle. A request that fails (a KV cache too small for it, a model without a distribution) fails
// the whole call with its status, prefixed with its index.
absl::StatusOr<std::vector<GenerationResult>> GenerateAll(EngineLoop& loop,
                                                          std::span<const Request> requests);

}  // namespace banyan::scheduler
