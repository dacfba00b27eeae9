// Synthetic workloads with exact lengths: each prompt is a list of token ids drawn uniformly from
// [min_token, vocab) with a seeded generator, so the same flags give the same requests. Shared
// parts (system prompts, prefixes, documents) are the same ids in every prompt that shares them;
// private parts are fresh draws, so two prompts share exactly what the workload says.
//
// Defaults per workload (every explicit flag overrides):
//   generated-shared-prefix  64 groups x 16 prompts, 2048-token system prompt per group,
//                            128-token question, 256 output tokens; order shuffled
//   prefix-repetition        10 prefixes of 256 tokens, 256-token suffixes, 128 output,
//                            1000 prompts, each prefix picked at random
//   multi-tenant             8 tenants x 16 users, one system prompt per tenant of a length
//                            uniform in [min_prefix_tokens, max_prefix_tokens], 128-token
//                            question, 128 output; `user` = the tenant's name; shuffled
//   long-document            one 16384-token document, 64 questions of 32 tokens, 64 output
//   n-way                    16 prompts of 1024 tokens, each sent with n = 16, 256 output
//   no-sharing               1000 random 1024-token prompts, 128 output
//   shared-prefix            one 1024-token prefix, 64-token suffixes, 128 output, 256 prompts
// With suffix_pool K > 0, each private suffix (question, suffix) is one of K suffixes drawn once
// after the shared parts, picked uniformly, so whole prompts repeat while their ids stay drawn
// from the whole range (n-way and no-sharing have no private suffix and refuse it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/serve/options.h"

namespace banyan::bench::serve {

struct RequestSpec {
  std::vector<int32_t> prompt;  // token ids
  int output_tokens = 0;        // max_tokens
  int n = 1;                    // samples
  std::string user;             // empty: no `user` field
  // Carries --frequency-penalty, --logit-bias-tokens and --min-tokens (a --penalised-share of
  // the requests).
  bool penalised = false;
};

struct Workload {
  std::string name;
  std::vector<RequestSpec> requests;
  // The resolved parameters (defaults merged with flags), for the JSON report.
  int num_prompts = 0;
  int prefix_tokens = 0;
  int suffix_tokens = 0;
  int output_tokens = 0;
  int num_groups = 0;
  int prompts_per_group = 0;
  int n = 1;
};

// Builds the workload named by o.workload. Returns an empty string on success, else a message.
std::string BuildWorkload(const Options& o, Workload* out);

}  // namespace banyan::bench::serve
