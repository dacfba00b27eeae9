// LiveRequest: one request as the engine loop holds it (EngineLoop::Live). Internal to
// scheduler/: the loop's stages (scheduler/loop/) read and change it, on the engine thread only;
// it is not part of the loop's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <algorithm>
#include <span>

#include "engine/backend.h"
#include "engine/sampler/sampler.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/engine_loop.h"
#include "scheduler/request.h"
#include "scheduler/request_stream.h"
#include "text/sample_text.h"
#include "spdlog/spdlog.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_mask.h"

namespace banyan::scheduler {

// The engine loop's logger ("scheduler"), for its .cc files.
std::shared_ptr<spdlog::logger> Log();

// A sample's speculative candidates in flight (scheduler/loop/speculation.cc).
struct SpecCandidates {
  // Node 0 is the root (the sample's next token); then the candidates, parents before children.
  std::vector<int32_t> token;
  std::vector<int32_t> parent;
  std::vector<int32_t> depth;
  // Per node: a live sequence whose path holds it (the sample's own for a chain, a fork's for a
  // tree), and its row in the step's output (set when the step is collected).
  std::vector<kvcache::SeqId> seq;
  std::vector<int32_t> row;
  std::vector<kvcache::SeqId> forks;  // a tree's temporary sequences, one per leaf
  int32_t base = 0;                   // the sample's length with its next token
  bool empty() const { return token.size() <= 1; }
  void clear() { *this = SpecCandidates{}; }
};

// One request.
struct LiveRequest {
  struct Sample {
    kvcache::SeqId seq = -1;
    engine::SequenceSamplingState sampling;
    std::optional<text::SampleText> text;  // absent without a tokenizer
    std::vector<int32_t> generated;  // in the tree (or to be re-placed after preemption)
    int32_t next_token = -1;         // sampled, not yet in the tree
    bool finished = false;           // decodes no more (its KV is released)
    bool ended = false;              // its terminal event was pushed (implies finished)
    int32_t emitted = 0;             // token events pushed
    std::chrono::steady_clock::time_point last_token;
    // Speculation: the candidates in flight after next_token (in the tree, to verify; see
    // scheduler/loop/speculation.cc), the tree the draft heads drafted after next_token (from the
    // hidden state of the row that sampled it; empty when none), the continuation drafted from
    // (prompt lookup) with how much of it the generated tokens were checked against, and the
    // acceptance record that switches speculation off for this sample while it does not pay.
    using Candidates = SpecCandidates;
    Candidates cand;
    float accept_average = 1.0f;  // candidates accepted per verification, moving average
    // Decodes plainly (and fed, where the step can be) until it has generated this many tokens.
    size_t speculation_paused_until = 0;
    bool SpeculationPaused() const { return generated.size() < speculation_paused_until; }
    engine::DraftHeads::Tree drafted;
    std::shared_ptr<const std::vector<int32_t>> lookup;
    size_t lookup_checked = 0;
    bool lookup_tried = false;  // the continuations were searched once (at its first drafting)
    // A constrained request's (Request::constraint): where the sample stands in the grammar
    // (every generated token accepted), and the mask of its next draw (vocab bits).
    // With triggers (TokenConstraint::triggers) the matcher is there only while the grammar
    // holds; while free, trigger_tail keeps the text's last bytes (fewer than the longest
    // trigger's), where a trigger may have begun.
    std::optional<text::grammar::Matcher> matcher;
    text::grammar::TokenBits mask;
    bool mask_fresh = false;  // mask filled for the next draw already (EngineLoop::FillMasks)
    std::string trigger_tail;
  };

  uint64_t handle = 0;
  uint64_t arrival = 0;
  Request req;
  std::shared_ptr<RequestStream> stream;
  RequestState state = RequestState::kWaiting;
  bool resume = false;             // waiting after a preemption
  kvcache::SeqId prompt_seq = -1;  // while prefilling
  int32_t placed = 0;              // prompt tokens placed in the tree (prefilling)
  // The chained hashes (kvcache::BlockHash, in the request's cache namespace) of the prompt's
  // full chunk-sized blocks: block k covers tokens [0, (k + 1) * chunk size). The summary finds
  // requests that share an uncached prefix by them (step_summary.h); set once by Add.
  std::vector<uint64_t> prompt_blocks;
  std::vector<Sample> samples;     // from the step that computes the prompt's last token
  // Greedy n > 1 (EngineLoop::SamplesRun): the n samples would all be the same, so one runs
  // (req.n is 1 from Add on) and Emit sends each of its events to all n choices (`copies`).
  int32_t copies = 1;
  Usage usage;
  std::chrono::steady_clock::time_point submitted;
  bool first_token_seen = false;
  uint64_t touched_step = 0;  // the last step that pushed to its stream
};

// Whether a request is prefilling with its prompt's last token among `logit_owners` (the
// prompts whose last row a step samples): its first token comes with that step.
inline bool FirstTokenIn(const LiveRequest& live, std::span<LiveRequest* const> logit_owners) {
  return live.state == RequestState::kPrefilling &&
         live.placed == static_cast<int32_t>(live.req.prompt.size()) &&
         std::find(logit_owners.begin(), logit_owners.end(), &live) != logit_owners.end();
}

}  // namespace banyan::scheduler
