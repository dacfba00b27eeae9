// The scheduling policy: a pure function from the scheduler's state to the next iteration's plan.
// No I/O, no clocks, no tree: the engine side summarises what the policy needs in PolicyInput,
// which makes the policy testable with tables of iterations.
//
// Rules, in order:
//  1. Memory for this iteration's decode appends (an upper bound per running request) must fit
//     in free + cached (evictable) chunks. If not, running requests are preempted by recompute,
//     lowest priority first, then latest arrival, until it fits; a preemption returns the
//     victim's private chunks to the cache.
//  2. Every running, unpreempted request that is decoding decodes one token per sequence.
//  3. Chunked prefill: running requests that are still prefilling continue (higher priority,
//     then earlier arrival, first), each taking up to the remaining prefill token budget.
//  4. Admission, only when nothing was preempted this iteration (no thrash): waiting requests by
//     priority then arrival, while the decode-row cap allows their sequences and the memory not
//     yet committed covers their whole uncached prompt plus one chunk per running sequence. The
//     first request that does not fit stops admission (no overtaking, so large requests cannot
//     starve). A request needing no prefill budget (fully cached, or resuming) is still admitted
//     when the budget is spent. With nothing running, the head request is always admitted.
//  Prefix groups (admission only): a waiting request may have a leader, an earlier request
//  (still prefilling, or waiting ahead of it) whose prompt holds part of its uncached prefix. When
//  the plan gives the leader enough tokens to place that part (leader_tokens) this iteration,
//  the follower is charged only what the leader does not compute (led_prefill tokens,
//  led_chunks chunks): placed after its leader, it matches the leader's new nodes. A burst of
//  one group's requests is then admitted together instead of each paying for its own copy of
//  the common prompt. When the leader gets fewer tokens, the follower is held this iteration
//  (the leader computes the shared part first; others behind it may still be admitted); when
//  the leader gets none, the follower is charged in full, as without a leader.
//  The last running request is never preempted (alone it fits; see Scheduler::Submit).
//  Tenant KV budgets (admission only): a waiting request whose tenant has a budget is admitted
//  only while the chunks its tenant's running requests hold plus its own chunks_needed fit the
//  budget, or when its tenant has nothing running (so that one large request still runs). A
//  request held back by its tenant's budget does not stop the admission of other tenants'
//  requests behind it (a tenant at its budget must not block the others). Decoding may take a
//  tenant past its budget by its running requests' growth; preemption ignores budgets.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace banyan::scheduler {

struct PolicyRequest {
  uint64_t handle = 0;
  int priority = 0;
  uint64_t arrival = 0;          // submission order
  int32_t sequences = 1;         // decode rows it occupies (n)
  int32_t remaining_prefill = 0; // prompt tokens not yet in the tree (waiting: uncached estimate)
  // Waiting: chunks its uncached prompt and first tokens need. Running: chunks this
  // iteration's appends may need (decoding) -- an upper bound.
  int32_t chunks_needed = 0;
  int32_t chunks_private = 0;    // running: chunks only it uses (cached again if preempted)
  bool decoding = false;         // running and past its prefill
  bool resume = false;           // waiting after a preemption: recomputes in one go
  int32_t tenant = -1;           // index into PolicyInput::tenants; -1: no budget
  // Waiting: its prefix group (see rule 4). 0: none.
  uint64_t leader = 0;
  int32_t leader_tokens = 0;     // the leader's tokens to place before the shared part is in
  int32_t led_prefill = 0;       // remaining_prefill less the shared part
  int32_t led_chunks = 0;        // chunks_needed less the shared part's chunks
};

// A tenant with a KV chunk budget.
struct PolicyTenant {
  int64_t chunks_budget = 0;  // > 0
  int64_t chunks_used = 0;    // chunks its running requests hold (shared ones once)
};

struct PolicyInput {
  std::vector<PolicyRequest> waiting;
  std::vector<PolicyRequest> running;
  int32_t chunks_free = 0;
  int32_t chunks_cached = 0;  // evictable
  int32_t chunk_size = 64;
  int32_t max_sequences = 256;
  int32_t prefill_token_budget = 1024;
  std::vector<PolicyTenant> tenants;  // indexed by PolicyRequest::tenant
};

struct IterationPlan {
  std::vector<uint64_t> preempt;  // running -> waiting, their KV released
  std::vector<uint64_t> decode;   // decode one token for every sequence
  // (handle, tokens): prefill this many prompt tokens (admitted or continuing). For resuming
  // requests the count is their whole recompute.
  std::vector<std::pair<uint64_t, int32_t>> prefill;
  std::vector<uint64_t> admit;    // the waiting requests among `prefill` (admitted now)

  bool empty() const { return decode.empty() && prefill.empty() && preempt.empty(); }
};

IterationPlan Schedule(const PolicyInput& input);

// The memory cost model, in chunks, that the loop's summary uses for PolicyRequest::chunks_needed
// of a waiting request:
//  - admitting a prompt: its uncached tokens, the cached chunks its match turns live, one chunk
//    for a split copy, and one per sample for its first appends;
//  - resuming after a preemption (all samples re-placed at once): per sample the cached chunks
//    its match turns live plus two (a split copy and its next append), and the uncached tokens.
int32_t AdmissionChunks(int32_t uncached_tokens, int32_t cached_chunks, int32_t samples,
                        int32_t chunk_size);
int32_t ResumeChunks(int32_t uncached_tokens, int32_t cached_chunks, int32_t samples,
                     int32_t chunk_size);

// The request to preempt when the decode appends the plan budgeted still do not fit (the
// estimate fell short, e.g. this iteration's admissions used the cache): among `candidates`
// (running requests that are decoding), the least important, the same order as rule 1's
// victims: lowest priority, then latest arrival. Returns its handle; 0 when there is none.
uint64_t ChooseAppendVictim(const std::vector<PolicyRequest>& candidates);

}  // namespace banyan::scheduler
