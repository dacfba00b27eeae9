// EngineLoop: the one engine loop. The daemon's scheduler thread, the CLI, the benchmarks and the
// tests all drive it; nothing else places, forks, stops, appends or releases sequences.
//
// One Step():
//  1. summarize: the prefix tree and the queues become the pure policy's input (policy.h);
//  2. schedule: Schedule() decides preemption, decode rows, chunked prefill and admission;
//  3. place: prompts are inserted / extended, decode tokens appended (one batch, so agreeing
//     samples keep sharing their node), split copies collected;
//  4. run: one forward pass with sampling on the backend (engine::StepRunner,
//     Backend::LaunchSample / CollectSample): only token ids and the logprobs asked for come back;
//  5. retire: stop checks, stop strings, TokenEvents pushed to each request's RequestStream,
//     finished sequences released (their KV stays cached in the tree).
//
// The CPU a step ahead (LoopOptions::overlap, on where the backend launches asynchronously):
// a Step launches step N and returns while the device computes it. The next Step waits for N's
// tokens (an event on pinned memory, no device-wide sync), places them (EOS and length stops
// included: a finished sample's KV is released before the next placement), schedules, places and
// launches step N+1, and only then does the rest of N's work while the device runs N+1:
// detokenizing, stop strings, stream pushes, metrics, retiring finished requests. A sample that
// a stop string ends there has one token in flight, which is dropped when it comes. The tokens
// and text are the same with and without overlap.
//
// The loop owns the backend, the chunk pool and the prefix tree, sized together from the
// backend (Backend::num_chunks, chunk_size): they cannot disagree.
//
// Guarantees:
//  - a request's samples are independent of what else runs (per-sample seeded streams, exact
//    attention), including after preemption by recompute;
//  - a cancelled request (stream Cancel, deadline, cancel_all) has its KV released in the next
//    Step before anything else runs.
//
// Single-threaded: one thread calls everything except Check() and the const accessors of the
// configuration, which are safe from any thread. Scheduler (scheduler.h) adds the thread, the
// bounded incoming queue and the drain around it.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "model/model.h"
#include "engine/sampler/sampler.h"
#include "engine/step_runner.h"
#include "text/tokenizer/tokenizer.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/request_stream.h"
#include "scheduler/speculation_governor.h"

namespace banyan::engine {
class DraftHeads;
}

namespace banyan::scheduler {

struct LoopOptions {
  int max_running_sequences = 256;  // decode rows per step
  int prefill_token_budget = 1024;  // prompt tokens prefilled per step (chunked prefill)
  engine::AttentionMode attention = engine::AttentionMode::kTpp;
  // The CPU a step ahead (see the top of this file): 1 on, 0 off, -1 where the backend launches
  // asynchronously (Backend::launches_async: the GPU).
  int overlap = -1;
  // Fed steps (with overlap, without speculation): while step N runs, step N + 1 is scheduled,
  // placed and launched before N's tokens are back; its decode rows read their input tokens on
  // the device (Backend::LaunchSample's feed), the tree holds them as pending until N is
  // collected, and the device does not wait for the host between steps. Prompts are placed in
  // fed steps too, and a prompt's first token (sampled by N) feeds its first decode row. A step
  // waits for N when a row cannot be fed: a sample sharing its leaf (n > 1 before the samples
  // diverge, a cached continuation below it, or a prompt placed in this step that continues its
  // whole path), preemption. A fed row's penalties count its fed token on the device (SampleSpec::
  // step_ahead). 1 on, 0 off, -1 where the backend launches asynchronously. The tokens are the
  // same with and without.
  int feed = -1;
  // Speculative decoding: each decode row proposes candidate tokens after its next token, a
  // chain or (draft heads with draft_tree) a tree, that the same step verifies through the
  // prefix tree (one row per candidate, attending to the context and the candidate's ancestors;
  // TPP reads the shared context once for all). Every row samples with the state its position
  // would have; a candidate is accepted when its parent's row sampled it, and the first row
  // whose sample is no candidate gives the next token. Greedy or sampled, with penalties or
  // not, the tokens are those decoding without speculation would draw (docs/hydra.md).
  enum class Speculation {
    kOff,
    // Hydra's sequentially dependent draft heads (or Medusa's), on the host: needs a backend
    // that returns hidden states (Backend::HiddenRows).
    kHeads,
    // The continuation this loop last generated greedily for the same prompt (prompt lookup):
    // what a repeated request, or a benchmark that sends its load twice, gets right.
    kLookup,
  };
  Speculation speculation = Speculation::kOff;
  const engine::DraftHeads* draft_heads = nullptr;  // kHeads; must outlive the loop
  int draft_tokens = 3;       // candidates per chain (kHeads: at most the heads' count)
  // kHeads: a candidate tree, draft_tree[d] children per node at depth d (top-b of head d; at
  // most the heads' count of levels), e.g. {4, 2, 2}. Empty: a chain of draft_tokens.
  std::vector<int> draft_tree = {};
  // Speculate only in steps with at most this many decode rows: verification multiplies a
  // step's rows by its candidates + 1, which stops paying as the step leaves the memory-bound
  // regime (docs/hydra.md: on the 7B shape speculation gained 1.2-4.5x per request at 1-8 rows
  // and lost aggregate throughput at 64). Below it, speculation_adaptive decides.
  int speculation_max_rows = 64;
  // Whether speculation pays is measured, not assumed: for each size class of decode steps
  // (rows, by powers of two) the loop keeps the tokens per second of steps with candidates and
  // of steps without (decode-only steps measure; steps with prefill follow the class's answer),
  // and speculates where that has been faster. It tries the other way after
  // 16 steps of the class, then after twice as many each time the answer stays (at most 1,024).
  // On the H200 the bundled model gains 1.4x at one row and loses from 8 rows on, the 7B shape
  // gains up to 8 rows: no fixed threshold fits both. Off: speculate in every step.
  bool speculation_adaptive = true;
  // Where draft heads run: on the backend's device (Backend::DraftTrees: the CUDA backend runs
  // them on the GPU over the step's hidden states), or on the host over hidden states copied
  // back (DraftHeads::TreeBatch; what the CPU backend does either way).
  bool draft_on_host = false;
  // A sample stops speculating for a while (16 steps, then tries again) when its candidates
  // accepted per verification fall below this moving average: drafts that are hardly ever right
  // (heads that do not fit the text, a lookup gone stale) cost rows for nothing. Whether
  // speculation pays at a given acceptance is the governor's question (above); this only drops
  // the hopeless. 0.1: on the 7B shape a 1-candidate verification cost 1.03 plain steps at one
  // row on the H200 (docs/hydra.md), so even 0.1 accepted per step pays there.
  float speculation_min_accept = 0.1f;
};

// Host-side accounting of the loop (tools and benchmarks print it; /metrics has the rest).
struct LoopStats {
  int64_t steps = 0;
  int64_t decode_steps = 0;        // steps with decode rows and no prefill
  int64_t prefill_tokens = 0;      // prompt tokens computed (cached ones excluded)
  int64_t decode_tokens = 0;       // decode rows run
  double decode_seconds = 0;       // wall time of the decode-only steps
  double prefill_seconds = 0;      // wall time of the steps with prefill
  double host_seconds = 0;         // of all steps: the time outside the backend's forward pass
  double decode_device_seconds = 0;  // device busy time in the decode-only steps (GPU only)
  // Of the decode-only steps' wall time, the host work before the launch returned: from the
  // previous step's tokens (or the Step call) to the step in flight. With overlap, the device
  // waits for this part only; the rest of the loop's host work runs beside the device.
  double decode_launch_seconds = 0;
  double decode_backend_launch_seconds = 0;  // of which inside the backend's LaunchSample
  // The same host work split by phase: taking the previous step's tokens, summarising and
  // scheduling, placing (appends, copies, rows); with the engine thread's CPU time over the
  // whole of it and its context switches (a wall time well above the CPU time means the thread
  // waited: for a lock, or for a core).
  double decode_take_seconds = 0;
  double decode_schedule_seconds = 0;
  double decode_place_seconds = 0;
  double decode_launch_cpu_seconds = 0;
  int64_t decode_launch_context_switches = 0;
  int64_t fed_steps = 0;           // steps launched before the step before was collected
  double fed_launch_seconds = 0;   // their host work up to the launch (beside the device's work)
  // Steps that placed prompts as fed steps and then found no room in the pool for the pending
  // tokens: they took the step before's tokens first (their prompts stayed placed).
  int64_t fed_fallbacks = 0;
  int64_t max_step_candidates = 0;  // speculative candidate rows in the fullest step
  // Draft heads: wall time of drafting (Backend::DraftTrees, on the collect path of each step
  // that drafts), the steps that drafted, and the calls that failed (those samples decoded
  // without candidates).
  double draft_seconds = 0;
  int64_t draft_steps = 0;
  int64_t draft_failures = 0;
  int64_t plan_builds = 0;         // full AttentionPlan rebuilds (others only advanced lengths)
  kvcache::MemoryStats peak;       // at the step with the most live chunks
};

class EngineLoop {
 public:
  // `tokenizer` may be null: events then carry token ids and no text (stop strings need it).
  // `config`, `tokenizer` must outlive the loop.
  EngineLoop(const model::ModelConfig& config, const text::Tokenizer* tokenizer,
             std::unique_ptr<engine::Backend> backend, LoopOptions options);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // The engine-side checks of a request (any thread): ValidateGeneration, n within the running
  // sequences, and its worst-case KV within the whole cache. InvalidArgument names the problem.
  absl::Status Check(const Request& request) const;

  // Queues a checked request; its events go to `stream`. `submitted`: for latency metrics.
  void Add(Request request, std::shared_ptr<RequestStream> stream,
           std::chrono::steady_clock::time_point submitted);

  // One iteration (see the top of this file). cancel_all: cancel every request first.
  // Returns false when there was nothing to do (no request, or none could move).
  // Events are pushed to the streams without waking their readers; at the end of the step the
  // streams that got any are announced once each (RequestStream::Announce), by `announcer` when
  // one is set (it may hand them to another thread), else here.
  bool Step(bool cancel_all = false);
  using Announcer = std::function<void(std::vector<std::shared_ptr<RequestStream>>)>;
  void set_announcer(Announcer announcer) { announcer_ = std::move(announcer); }

  // No request waiting or running, and no step in flight.
  bool idle() const { return waiting_.empty() && running_.empty() && !inflight_.active; }
  // Whether steps overlap the host's work (LoopOptions::overlap resolved).
  bool overlap() const { return overlap_; }
  int32_t waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t running() const { return static_cast<int32_t>(running_.size()); }

  // Counters as of the last Step (requests_rejected_total is the front end's).
  const MetricsSnapshot& metrics() const { return metrics_; }
  const LoopStats& stats() const { return stats_; }
  const SpeculationGovernor& speculation_governor() const { return speculation_governor_; }
  const LoopOptions& options() const { return options_; }
  const model::ModelConfig& config() const { return config_; }
  engine::Backend& backend() { return *backend_; }
  kvcache::PrefixTree& tree() { return tree_; }
  const kvcache::PrefixTree& tree() const { return tree_; }
  int32_t kv_chunks_total() const { return chunks_total_; }

  // KV events (kvcache/kv_events.h): the tree's block reports are collected during a step and
  // handed to `sink` at its end (the step boundary, Step's last act), on this thread; `sink`
  // must not block. Set before the first Add; null (the default) costs nothing. The sink must
  // outlive the loop or be unset first.
  void set_kv_event_sink(kvcache::KvEventSink* sink);

 private:
  struct Live;  // one request
  using LivePtr = std::unique_ptr<Live>;

  void CancelDue(bool cancel_all);
  void Preempt(Live& live);
  // Places up to `tokens` prompt tokens (or the whole recompute of a resumed request).
  absl::Status PlacePrefill(Live& live, int32_t tokens, std::vector<kvcache::ChunkCopy>* copies,
                            std::vector<engine::PrefillItem>* items,
                            std::vector<Live*>* logit_owners);
  // Turns a prefilled prompt into n samples (forks its sequence); their sampling states are
  // ready before the forward pass so that the backend samples the first tokens.
  void StartSamples(Live& live);
  // A structured output's checks (Check): a backend that applies masks, no min_tokens.
  absl::Status CheckConstraint(const Request& request) const;
  // The mask of a constrained sample's next draw (its grammar's tokens, end ids where it may
  // end), filled into s.mask; empty for an unconstrained sample. Engine thread.
  std::span<const uint64_t> MaskFor(Live& live, size_t sample) const;
  // The samples a request runs: n, or 1 for greedy requests (temperature 0: every sample would
  // draw the same tokens; their choices get copies of one).
  static int SamplesRun(const Request& r);
  // A sampled token reaches its sample: into its sampling state and generated tokens, or ending
  // it at EOS / max_tokens (KV released at once). The event is queued for EmitPending.
  void TakeSample(Live& live, size_t sample, const engine::SampleResult& result,
                  std::chrono::steady_clock::time_point at);
  // The queued tokens' events: text, stop strings, metrics, stream pushes.
  void EmitPending();
  // Speculation (LoopOptions::Speculation; engine_loop_speculation.cc). DraftFor: the candidate
  // chain of a sample about to decode from prompt lookup (empty when it should not speculate).
  // PlaceCandidates: drafts and places the candidates of a step's decode rows, at most
  // `token_room` of them (decode gains the candidate rows, with their tree nodes in item_node).
  // TakeCandidates: takes a verified sample's results; returns the output row of the last token
  // taken from the tree (its hidden state drafts the next candidates).
  std::vector<int32_t> DraftFor(Live& live, size_t sample, int budget);
  void PlaceCandidates(absl::flat_hash_map<kvcache::SeqId, std::pair<Live*, size_t>>* owner,
                       int token_room, std::vector<engine::DecodeItem>* decode,
                       std::vector<int32_t>* item_node, std::vector<kvcache::ChunkCopy>* copies);
  int32_t TakeCandidates(Live& live, size_t sample, std::span<const engine::SampleResult> results,
                         std::chrono::steady_clock::time_point at);
  SpeculationGovernor speculation_governor_;  // LoopOptions::speculation_adaptive
  // kHeads: the trees' branching, draft_tree or a chain of draft_tokens, at most the heads'
  // count of levels (fixed at construction).
  std::vector<int32_t> draft_branching_;
  // Ends a sample's candidates without taking them (preemption, cancellation).
  void DropCandidates(Live& live, size_t sample);
  // kLookup: what a greedy request generated, by prompt (and cache namespace).
  void RememberContinuation(const Live& live);
  // The engine thread's clocks where a step's host work begins (wall, CPU time, context switches).
  struct ThreadClocks {
    std::chrono::steady_clock::time_point wall;
    double cpu_seconds = 0;
    int64_t context_switches = 0;
    static ThreadClocks Now();
  };
  // Schedules, places and launches a step. kNothing: nothing could move. Fed (`fed`): the step
  // goes to ahead_ while inflight_ runs, its decode rows fed from inflight_'s; kNotFed when this
  // step cannot be and nothing was changed (the caller collects inflight_ and schedules again).
  // When prompts were placed before the pool turned out too small for the pending tokens, it
  // collects inflight_ itself and launches the step as an unfed one.
  enum class Launch { kNothing, kLaunched, kNotFed };
  Launch ScheduleAndLaunch(const ThreadClocks& cycle, bool fed);
  // Whether every decoding sample can take a fed row after inflight_ (see LoopOptions::feed).
  bool FedReady() const;
  // A request whose last prompt chunk is in inflight_: its first token comes with it.
  bool FirstTokenInFlight(const Live& live) const;
  // A prompt's samples from its sequence (Fork; samples[0] keeps its id), once: when its first
  // token is collected, or earlier by ForkAhead.
  absl::Status MakeSamples(Live& live);
  // Such a request with n > 1, about to decode in a fed step: makes its samples now, so that
  // each takes its own row.
  void ForkAhead(Live& live);
  // Waits for the step in flight and takes its tokens; false when the step failed (FailAll ran).
  bool CollectInflight();
  uint64_t collects_ = 0;  // CollectInflight calls
  // Moves admitted, preempted and finished requests between the lists.
  void Retire();
  // Fails every request (a step could not run).
  void FailAll(const absl::Status& status);
  // Ends a sample (its KV is released) / the whole request.
  void EndSample(Live& live, size_t sample, FinishReason reason, std::string text);
  void Finish(Live& live, absl::Status status, FinishReason reason);
  void ReleaseAll(Live& live);
  // A sample's KV goes (its candidates too): it finished or its request is preempted.
  void ReleaseSample(Live& live, size_t sample);
  void PublishMetrics();
  void FlushKvEvents();
  bool StepUnannounced(bool cancel_all);
  // Pushes to / finishes a request's stream, remembering it for this step's announcement.
  void Emit(Live& live, TokenEvent event);
  void Touch(Live& live);
  void AnnounceTouched();

  const model::ModelConfig& config_;
  const text::Tokenizer* tokenizer_;
  std::unique_ptr<engine::Backend> backend_;
  kvcache::ChunkPool pool_;
  kvcache::PrefixTree tree_;
  engine::StepRunner runner_;
  LoopOptions options_;
  const int32_t chunks_total_;
  const int32_t chunk_size_;

  std::vector<LivePtr> waiting_;
  std::vector<LivePtr> running_;
  // Requests that left since the last collect: the step in flight and the pending tokens may
  // still name them.
  std::vector<LivePtr> retired_;
  const bool overlap_;
  // The launched step, until CollectInflight.
  struct InFlight {
    bool active = false;
    engine::StepOutput out;
    absl::flat_hash_map<kvcache::SeqId, std::pair<Live*, size_t>> owner;  // decode row -> sample
    // Per decode item: its node among the sample's candidates (0 the root), -1 without.
    std::vector<int32_t> item_node;
    // The sampling states of candidate rows (the sample's state advanced along the path).
    std::deque<engine::SequenceSamplingState> row_states;
    int speculation_class = -1;  // the step's size class when speculation could run, else -1
    bool speculated = false;     // the step had candidates
    std::vector<Live*> logit_owners;  // prompts whose last token's row is sampled, in order
    int64_t decode_rows = 0;
    int64_t prefill_tokens = 0;
    std::chrono::steady_clock::time_point t_begin;    // its host work began
    std::chrono::steady_clock::time_point collected;  // its tokens arrived
    bool collected_this_step = false;   // by the current Step (without overlap)
    double launch_seconds = 0;          // t_begin to the launch returning
    double backend_launch_seconds = 0;  // of which in the backend's LaunchSample
    double take_seconds = 0, schedule_seconds = 0, place_seconds = 0;  // see LoopStats
    double launch_cpu_seconds = 0;
    int64_t launch_context_switches = 0;
    double device_before = 0;
    // A fed step: its rows' pending tokens, (sequence, spec of the step before that samples it),
    // set in the tree when the step before is collected.
    bool fed = false;
    std::vector<std::pair<kvcache::SeqId, int32_t>> patches;
  };
  ThreadClocks collected_clocks_;  // when the last step in flight was collected
  InFlight inflight_;
  InFlight ahead_;   // a fed step, launched while inflight_ runs, until inflight_ is collected
  const bool feed_;  // LoopOptions::feed resolved
  // Without overlap: when the last Step's step was collected, if the loop is to go on at once.
  std::optional<ThreadClocks> last_collect_;
  struct PendingToken {
    Live* live;
    size_t sample;
    engine::SampleResult result;
    engine::FinishReason stop;  // EOS / max_tokens, from TakeSample
    std::chrono::steady_clock::time_point at;
  };
  std::vector<PendingToken> pending_;
  // Speculation state between steps: the rows whose hidden states the heads need (by sample),
  // and the continuations kLookup drafts from.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const std::vector<int32_t>>> continuations_;
  std::vector<uint64_t> continuation_order_;  // oldest first, for the bound
  std::vector<kvcache::ChunkCopy> pending_copies_;  // from truncations, for the next step
  uint64_t arrival_counter_ = 0;
  bool added_ = false;  // Add() since the last Step
  uint64_t step_serial_ = 0;  // Steps begun, for Touch
  std::vector<std::shared_ptr<RequestStream>> touched_;  // streams with events this step
  Announcer announcer_;
  kvcache::KvEventSink* kv_sink_ = nullptr;
  kvcache::KvEventLog kv_log_;  // attached to tree_ while kv_sink_ is set
  MetricsSnapshot metrics_;
  LoopStats stats_;
};

}  // namespace banyan::scheduler
