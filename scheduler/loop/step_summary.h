// The summary stage of the engine loop: the prefix tree and the request lists become the pure
// policy's input (policy.h). It reads the tree and the requests and changes neither.
//
// Per waiting request: its uncached prompt (or, resuming after a preemption, the uncached part of
// every running sample's tokens) and the chunks admitting it costs (AdmissionChunks /
// ResumeChunks). Per running request: decoding or still prefilling, the chunks this step's
// appends may need, and the chunks only it holds. A decoding request whose samples all finished
// is left out (it holds no KV; its last events go out in this step). Tenants with a KV budget
// get an index each and the chunks their running requests hold.
//
// Prefix groups. A waiting request whose uncached prompt begins with blocks that an earlier
// request (one still prefilling, or one waiting ahead of it in the policy's order: priority,
// then arrival) will place gets that request as its leader (PolicyRequest::leader), with the
// leader's tokens to place first and what it costs when led. Blocks are compared by their
// chained hashes (LiveRequest::prompt_blocks), chunk-aligned and per cache namespace; of the
// earlier requests holding its longest such prefix, the first is the leader. A hash collision
// (2^-64) could only misjudge admission: placement matches tokens in the tree, never hashes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/policy.h"

namespace banyan::scheduler {

struct StepSummary {
  PolicyInput input;
  ByHandle by_handle;  // every request in `input` by its handle (PolicyRequest::handle)
};

struct SummaryLimits {
  int32_t max_sequences = 256;          // LoopOptions::max_running_sequences
  int32_t prefill_token_budget = 1024;  // LoopOptions::prefill_token_budget
};

// `in_flight_prompts`: for a fed step (launched before the step in flight is collected), that
// step's logit owners: a prompt whose first token it samples counts as decoding from its
// prompt's sequence. Empty for an unfed step.
StepSummary SummarizeStep(const kvcache::PrefixTree& tree, std::span<const LivePtr> waiting,
                          std::span<const LivePtr> running, const SummaryLimits& limits,
                          bool fed, std::span<LiveRequest* const> in_flight_prompts);

// LiveRequest::prompt_blocks: the chained hashes of the prompt's full `chunk_size` blocks.
std::vector<uint64_t> PromptBlocks(std::string_view ns, std::span<const int32_t> prompt,
                                   int32_t chunk_size);

// The tokens a running sample has in the tree: the prompt and every generated token except the
// last, which is its pending next_token (sampled; the next decode step appends it).
std::vector<int32_t> InTree(const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& generated);

}  // namespace banyan::scheduler
