// What a front end hands the scheduler, and what comes back, token by token.
//
// Front ends (HTTP, gRPC) only translate: they build a Request from the wire format, Submit it,
// and forward the TokenEvents of its RequestStream. Detokenization and stop strings happen on the
// engine side so that both front ends behave identically.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/sampler/sampling_params.h"
#include "text/grammar/constraint_cache.h"

namespace banyan::scheduler {

enum class RequestState { kWaiting, kPrefilling, kDecoding, kFinished, kCancelled, kFailed };

// Why a sample ended.
enum class FinishReason {
  kNone,       // still running
  kStop,       // EOS, a stop token id, or a stop string
  kLength,     // max_tokens reached
  kCancelled,  // client cancel / disconnect, deadline, or shutdown cut
  kError,      // the request failed; RequestStream::status() says why
};

// "stop", "length", "cancelled", "error" ("" for kNone): OpenAI's finish_reason spelling.
std::string_view FinishReasonName(FinishReason r);

struct Request {
  std::string id;               // for logs and responses; unique per request
  std::vector<int32_t> prompt;  // token ids, BOS included when the model wants it
  engine::SamplingParams params;
  // Stop strings: generation of a sample ends when its text contains one; the text from the
  // match on is never emitted. Matched across token boundaries.
  std::vector<std::string> stop;
  int n = 1;          // samples of the prompt; they share its KV
  int priority = 0;   // larger is more important: admitted first, preempted last
  std::string cache_namespace;  // tenant / cache salt: prefixes shared only within it
  // The authenticated tenant and its KV budget in chunks (0: none): the policy admits the
  // tenant's requests only while its running ones hold fewer chunks (policy.h).
  std::string tenant;
  int64_t tenant_kv_chunks = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;  // cancelled when it passes
  // Structured output (response_format, guided_json): every sample's text is a sentence of this
  // grammar. Before each draw the sample's tokens are masked to those the grammar allows next,
  // end of sequence allowed exactly where the grammar may end (and then the only way out when
  // nothing else is); an end token ends the sample with kStop. Compiled by the front end (off
  // the engine thread) for the model's vocabulary. Null: unconstrained, at no cost.
  std::shared_ptr<const text::grammar::TokenConstraint> constraint;
};

// One step of one sample. Events of a sample arrive in order; the last has finish != kNone.
struct TokenEvent {
  int sample = 0;      // in [0, n)
  int32_t token = -1;  // generated token id; -1 when the event only ends the sample
  // Text made final by this event: UTF-8 complete, with any text that might still turn into a
  // stop string held back until it cannot.
  std::string text;
  float logprob = 0.0f;                              // of `token`
  std::vector<std::pair<int32_t, float>> top_logprobs;  // params.logprobs entries
  FinishReason finish = FinishReason::kNone;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // found in the prefix cache: no prefill, no new memory
  int32_t completion_tokens = 0;     // over all samples
  // Speculative decoding: candidate tokens verified, and of those accepted (over all samples).
  int32_t draft_tokens = 0;
  int32_t accepted_draft_tokens = 0;
};

}  // namespace banyan::scheduler
