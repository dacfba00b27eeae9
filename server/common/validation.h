// Wire-independent request validation and translation, shared by the HTTP and gRPC front ends.
//
// A front end decodes its wire format into a GenerationInput (token ids, sampling fields, n,
// stop strings, tenant), then BuildRequest checks every field against the model's limits and
// produces the scheduler::Request. Every failure is an InvalidArgument status whose message a
// user can act on and which carries the name of the offending field ("param", in OpenAI's error
// JSON) and optionally a machine-readable code ("context_length_exceeded"), both as status
// payloads read back with StatusParam / StatusCode. The HTTP front end turns them into
// {"error":{"message","type","param","code"}}; the gRPC front end may put the param into the
// message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/param_status.h"
#include "engine/sampler/sampling_params.h"
#include "scheduler/request.h"
#include "text/grammar/constraint_cache.h"

namespace banyan::server {

struct ServerOptions;  // server/common/server_context.h

// Most stop strings one request may carry, and the longest of them in bytes.
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 1024;
// Largest |priority| accepted on the wire.
inline constexpr int kMaxAbsPriority = 1'000'000;
// Longest `user` and `cache_salt`, in bytes.
inline constexpr size_t kMaxTenantBytes = 256;

// --- text

// Whether `s` is well-formed UTF-8 (shortest forms, no surrogates, <= U+10FFFF). On failure
// *bad_offset (if given) is the byte offset of the first bad sequence.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);

// --- the model's limits a request is checked against

struct ModelLimits {
  int context_tokens = 0;  // prompt + generated tokens must fit (model max_seq_len)
  int vocab_size = 0;
  int max_n = 16;  // largest n
};

// A request after wire decoding, before validation. Unset optionals take the defaults below.
struct GenerationInput {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  // temperature, top_p, top_k, min_p, penalties, seed, stop_token_ids, ignore_eos, logprobs
  // as decoded; max_tokens is ignored here, see below.
  engine::SamplingParams params;
  // Unset: default_max_tokens when > 0, else everything the context has left.
  std::optional<int64_t> max_tokens;
  int64_t n = 1;
  std::vector<std::string> stop;
  // Scheduler priority: larger is admitted first and preempted last.
  int64_t priority = 0;
  // The authenticated tenant's name (Tenant::name(), server/common/auth.h): the prefix-cache
  // namespace. Front ends must set it from Authenticate, never from the request body.
  std::string tenant = "default";
  std::string user;        // OpenAI `user`: narrows the cache namespace within the tenant
  std::string cache_salt;  // vLLM `cache_salt`: narrows it further
  // The wire names of the prompt and max_tokens fields, for error messages.
  std::string prompt_field = "prompt";
  std::string max_tokens_field = "max_tokens";
  // Structured output (server/common/structured_outputs.h), compiled by the front end; null: none.
  std::shared_ptr<const text::grammar::TokenConstraint> constraint;
};

// The prefix-cache namespace: requests share cached prefixes only within one namespace. It is
// the authenticated tenant, narrowed by the request's user and cache_salt: a tenant can not
// learn (from cached_tokens or by timing) whether another tenant sent a prompt, whatever it
// writes in `user`. Each part is length-prefixed ("t<len>:<tenant>|u<len>:<user>|s<len>:
// <salt>"), so no choice of user / salt bytes spells another tenant's namespace.
std::string CacheNamespace(std::string_view tenant, std::string_view user,
                           std::string_view cache_salt);

// The prompt text's size against options.max_prompt_bytes, before it is tokenized (a long text
// costs the tokenizer seconds of CPU). InvalidArgument naming `param` otherwise.
absl::Status CheckPromptBytes(std::string_view prompt, const ServerOptions& options,
                              std::string_view param = "prompt");
// The same check for a prompt of `bytes` bytes (several texts, or a rendered conversation).
absl::Status CheckPromptSize(int64_t bytes, const ServerOptions& options,
                             std::string_view param = "prompt");

// Field checks, each naming its field. vocab_size > 0.
absl::Status ValidatePromptTokens(std::span<const int32_t> prompt, int vocab_size,
                                  std::string_view param = "prompt");
absl::Status ValidateN(int64_t n, int max_n);
absl::Status ValidateStop(std::span<const std::string> stop);
// Sampling ranges (temperature, top_p, top_k, min_p, penalties, logprobs, stop_token_ids);
// max_tokens is checked by ResolveMaxTokens.
absl::Status ValidateSampling(const engine::SamplingParams& params, int vocab_size);
// The number of tokens to generate: `requested` (>= 1) or the default; prompt + result must
// fit in the context. The message names the prompt length, the requested completion length and
// the context length; the status code payload is "context_length_exceeded".
absl::StatusOr<int> ResolveMaxTokens(std::optional<int64_t> requested, int default_max_tokens,
                                     int prompt_tokens, int context_tokens,
                                     std::string_view param = "max_tokens",
                                     std::string_view prompt_param = "prompt");

// Validates everything and builds the scheduler request. `default_max_tokens` <= 0 means "the
// rest of the context" (chat), 16 is OpenAI's completions default.
absl::StatusOr<scheduler::Request> BuildRequest(GenerationInput input, const ModelLimits& limits,
                                                int default_max_tokens, std::string id);

}  // namespace banyan::server
