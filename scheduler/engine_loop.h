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
// The stages are in scheduler/loop/, each with its own types: step_summary (1), policy.h (2),
// placement (3), speculation (candidates after placement), launch (4), collect and output (5),
// step_stats (the accounting).
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

#include <atomic>
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
#include "scheduler/loop/in_flight.h"
#include "scheduler/loop/ngram_lookup.h"
#include "scheduler/loop/output.h"
#include "scheduler/loop/step_timing.h"
#include "scheduler/mask_workers.h"
#include "scheduler/metrics.h"
#include "scheduler/policy.h"
#include "scheduler/request.h"
#include "scheduler/request_stream.h"
#include "scheduler/speculation_governor.h"

namespace banyan::engine {
class DraftHeads;
}

namespace banyan::scheduler {

// The loop's own types (scheduler/loop/), named here only by its private members.
struct LiveRequest;
struct PlacedStep;
struct DraftWant;
struct SpecCandidates;
using LivePtr = std::unique_ptr<LiveRequest>;
class ForkJoin;     // scheduler/fork_join.h
using ByHandle = absl::flat_hash_map<uint64_t, LiveRequest*>;

struct LoopOptions {
  int max_running_sequences = 256;  // decode rows per step
  int prefill_token_budget = 1024;  // prompt tokens prefilled per step (chunked prefill)
  engine::AttentionMode attention = engine::AttentionMode::kTpp;
  // The CPU a step ahead (see the top of this file): 1 on, 0 off, -1 where the backend launches
  // asynchronously (Backend::launches_async: the GPU).
  int overlap = -1;
  // Fed steps (with overlap): while step N runs, step N + 1 is scheduled,
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
    // Prompt lookup, from two sources: the continuation this loop last generated greedily for
    // the same prompt, while the sample still agrees with it (what a repeated request, or a
    // benchmark that sends its load twice, gets right); otherwise the sample's own context,
    // where its last tokens occurred before (ngram_lookup; scheduler/loop/ngram_lookup.h).
    kLookup,
  };
  Speculation speculation = Speculation::kOff;
  const engine::DraftHeads* draft_heads = nullptr;  // kHeads; must outlive the loop
  int draft_tokens = 3;       // candidates per chain (kHeads: at most the heads' count)
  NgramLookup ngram_lookup;  // kLookup: n-gram matches in the context (max_n 0: none)
  // kHeads: a candidate tree, draft_tree[d] children per node at depth d (top-b of head d; at
  // most the heads' count of levels), e.g. {4, 2, 2}. Empty: a chain of draft_tokens.
  std::vector<int> draft_tree = {};
  // Speculate only in steps with at most this many decode rows: verification multiplies a
  // step's rows by its candidates + 1, which stops paying as the step leaves the memory-bound
  // regime (docs/hydra.md has the measurements). Below it, speculation_adaptive decides.
  int speculation_max_rows = 64;
  // Whether speculation pays is measured, not assumed: for each size class of decode steps
  // (rows, by powers of two) the loop keeps the tokens per second of steps with candidates and
  // of steps without (decode-only steps measure; steps with prefill follow the class's answer),
  // and speculates where that has been faster. It tries the other way after
  // 16 steps of the class, then after twice as many each time the answer stays (at most 1,024).
  // Where speculation stops paying differs by model and device (docs/hydra.md): no fixed
  // threshold fits them all. Off: speculate in every step.
  bool speculation_adaptive = true;
  // Where draft heads run: on the backend's device (Backend::DraftTrees: the CUDA backend runs
  // them on the GPU over the step's hidden states), or on the host over hidden states copied
  // back (DraftHeads::TreeBatch; what the CPU backend does either way).
  bool draft_on_host = false;
  // A sample stops speculating for a while (16 tokens decoded plainly, fed where the step can
  // be, then it tries again) when its candidates accepted per verification fall below this
  // moving average: drafts that are hardly ever right (heads that do not fit the text, a lookup
  // gone stale) cost rows for nothing. Whether speculation pays at a given acceptance is the
  // governor's question (above); this only drops the hopeless. Where decode is memory-bound a
  // verification with one candidate costs about a plain step, so a low acceptance still pays
  // there (docs/hydra.md).
  float speculation_min_accept = 0.1f;
  // Threads that classify grammar positions for constrained samples (MaskWorkers): a sample
  // whose next mask is not cached sits out a step while one does, so the engine thread never
  // walks the vocabulary. 0: the engine thread classifies on first use and every other row
  // waits (the behaviour before; benchmarks compare the two). The tokens are the same.
  int mask_workers = 2;
  // Threads beside the engine thread that fill the masks of a fed step's constrained rows when
  // they are sampled late (scheduler/fork_join.h): each fill ORs the cached masks of the
  // sample's grammar positions over the vocabulary's 16 KB and walks its stack-dependent tokens;
  // a few hundred rows of that on one thread outlast the device's step. -1: half the cores, at
  // most 8; 0: the engine thread alone. The tokens are the same.
  int mask_fill_threads = -1;
  // A schema in steady use -- a tool's arguments that every call of an agent carries -- gets its
  // grammar positions classified ahead of need by the mask workers (MaskWorkers::Prefetch: each
  // class of positions' nearest first, behind every position a sample waits for) once this
  // many requests have carried it; 0: never. At most mask_prefetch_positions positions per
  // grammar, and never past three quarters of the masker's caches (TokenMasker: a short mask,
  // 16 KB at 128K tokens, per class; a long one, a few hundred bytes, per position).
  int mask_prefetch_after = 4;
  int mask_prefetch_positions = 65536;
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
  // Fed steps with constrained rows, whose sampling was launched after the step before was
  // collected (its tokens move the grammars), and the host time of those launches (masks
  // included; the device ran the step's layers meanwhile).
  int64_t late_sampled_steps = 0;
  double late_sampling_seconds = 0;
  double late_fill_seconds = 0;    // of it, filling the constrained rows' masks (FillMasks)
  double late_launch_seconds = 0;  // of it, completing the specs and the backend's launch
  int64_t late_masks_staged = 0;   // masks filled straight into the backend's upload
  int64_t max_step_candidates = 0;  // speculative candidate rows in the fullest step
  // KV chunks the candidates of a step took from the pool when placed (a tree's nodes packed
  // together: PrefixTree::ExtendPacked), summed over steps, and the samples that speculated.
  int64_t candidate_chunks = 0;
  int64_t speculating_samples = 0;
  // Draft heads: wall time of drafting (Backend::DraftTrees, on the collect path of each step
  // that drafts), the steps that drafted, and the calls that failed (those samples decoded
  // without candidates).
  double draft_seconds = 0;
  int64_t draft_steps = 0;
  int64_t draft_failures = 0;
  int64_t plan_builds = 0;         // full AttentionPlan rebuilds (others only advanced lengths)
  // Constrained samples: steps sat out while a worker classified their next mask; masks the
  // engine thread waited for (a step that had nothing else to run); masks whose positions the
  // engine thread classified itself (mask_workers = 0 only).
  int64_t mask_sit_outs = 0;
  int64_t mask_waits = 0;
  int64_t mask_walks_on_loop = 0;
  int64_t mask_walks_on_fill = 0;  // masks whose new positions a fill thread classified
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
  // Vocabulary walks the mask workers ran (off the engine thread), and of them those ahead of
  // need (LoopOptions::mask_prefetch_after).
  MaskWorkers::Stats mask_worker_stats() const;  // zeros before the first constrained request
  const SpeculationGovernor& speculation_governor() const { return speculation_governor_; }
  // The start-up profile of speculation (scheduler/loop/speculation_profile.cc): for size
  // classes of 1, 2, 4, ... rows up to speculation_max_rows, the median seconds of a steady
  // decode step with candidates and without, given to the governor. Call while idle, before
  // serving and before set_kv_event_sink; a no-op (empty) unless speculation is adaptive. A row
  // with a zero time was not measured (its class stays unprofiled).
  struct SpeculationProfileRow {
    int size_class = 0;
    int64_t rows = 0;
    double seconds_with = 0, seconds_without = 0;
    int64_t steps_with = 0, steps_without = 0;  // steady steps measured
  };
  std::vector<SpeculationProfileRow> ProfileSpeculation();
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
  using Live = LiveRequest;  // one request (scheduler/loop/live_request.h)
  class Hooks;               // PlacementHooks over this loop (engine_loop.cc)

  // The step (engine_loop.cc): Step → StepUnannounced → StepFed (a fed step while N runs) or
  // ScheduleAndLaunch (summary → policy → placement → speculation → launch), then output and
  // stats. Fed (`fed`): the step goes to ahead_ while inflight_ runs, its decode rows fed from
  // inflight_'s; kNotFed when this step cannot be and nothing was changed (the caller collects
  // inflight_ and schedules again). When prompts were placed before the pool turned out too
  // small for the pending tokens, it collects inflight_ itself and launches the step unfed.
  enum class Launch { kNothing, kLaunched, kNotFed };
  bool StepUnannounced(bool cancel_all);
  // The fed path: launches N + 1, then collects N; false when no fed step could be launched.
  bool StepFed(const ThreadClocks& cycle, bool cancel_all);
  Launch ScheduleAndLaunch(const ThreadClocks& cycle, bool fed);
  // Placement (scheduler/loop/placement.h): the plan's preemptions, prompts and decode rows.
  // False (with `result` set) when the step is not to be launched.
  bool Place(const IterationPlan& plan, const ByHandle& by_handle, LaunchClock* clock, bool* fed,
             PlacedStep* step, Launch* result);
  // Launch (scheduler/loop/launch.cc): binds every row's sampling and runs the placed step; the
  // step goes to `f`. False when the launch failed (FailAll ran).
  bool LaunchPlaced(PlacedStep step, const LaunchClock& clock, bool fed, InFlightStep* f);
  // Whether every decoding sample can take a fed row after inflight_ (see LoopOptions::feed), and
  // the next step is not to speculate (its candidates follow step N's tokens and drafts; a
  // speculating loop feeds the steps its governor keeps plain).
  bool FedReady() const;

  void CancelDue(bool cancel_all);
  void Preempt(Live& live);
  // Turns a prefilled prompt into n samples (their sampling states, ready before the forward
  // pass so that the backend samples the first tokens).
  void StartSamples(Live& live);
  // A structured output's checks (Check): a backend that applies masks, no min_tokens.
  absl::Status CheckConstraint(const Request& request) const;
  // The mask of a constrained sample's next draw (its grammar's tokens, end ids where it may
  // end), filled into s.mask; empty for an unconstrained sample. Engine thread: waits for the
  // workers where a position is not classified (MaskReady said so and nothing else runs).
  std::span<const uint64_t> MaskFor(Live& live, size_t sample);
  // MaskFor's work, safe on any thread for distinct samples: fills s.mask and marks it fresh
  // (MaskFor then returns it as it is), or fills `dst` (a backend's staging slot of
  // SampleMaskWords(vocab) words; s.mask untouched) when given, counting a wait for a worker or
  // a walk of its own. A position not classified yet is waited for from the workers, or with
  // `classify_here` classified on the calling thread (a fill thread: the engine thread waits for
  // the fills anyway, and the fill threads outnumber the workers).
  struct MaskCounts {
    std::atomic<int64_t> waits{0};
    std::atomic<int64_t> walks{0};
    std::atomic<int64_t> fill_walks{0};
  };
  void FillMask(Live& live, size_t sample, MaskCounts* counts, bool classify_here = false,
                std::span<uint64_t> dst = {});
  void AddMaskCounts(const MaskCounts& counts);
  // FillMask for these samples on the fill threads and the engine thread (mask_fill_): sample i
  // into slot i of `staging` (MaskWords(vocab) words each) when it is not empty, else s.mask.
  void FillMasks(std::span<const std::pair<Live*, size_t>> samples,
                 std::span<uint64_t> staging = {});
  // Whether the sample's next mask is at hand without a vocabulary walk; if not, a worker is
  // asked for it and the sample sits out this step (counted).
  bool MaskReady(Live& live, size_t sample);
  // The samples a request runs: n, or 1 for greedy requests (temperature 0: every sample would
  // draw the same tokens; their choices get copies of one).
  static int SamplesRun(const Request& r);

  // Speculation (LoopOptions::Speculation; scheduler/loop/speculation.cc). Speculate: the
  // stage, candidates for the placed step's decode rows (or none; a fed step has none, and
  // counts for the governor as a step without). DraftFor: the candidate chain of a sample about
  // to decode from prompt lookup, a repeated prompt's continuation or else n-grams of its
  // context (empty when it should not speculate).
  // PlaceCandidates: drafts and places the candidates of the step's decode rows, at most
  // `token_room` of them (decode gains the candidate rows, with their tree nodes in item_node).
  // TakeCandidates: takes a verified sample's results; returns the output row of the last token
  // taken from the tree (its hidden state drafts the next candidates).
  void Speculate(PlacedStep* step, bool fed, StepSpeculation* spec);
  std::vector<int32_t> DraftFor(Live& live, size_t sample, int budget);
  void PlaceCandidates(int token_room, PlacedStep* step, StepSpeculation* spec);
  // Places sample k's candidates `c` after decode row d (the root); leaves it plain when they
  // do not fit. Candidate rows go to `rows` / `row_nodes`.
  void PlaceSampleCandidates(engine::DecodeItem& d, Live& l, size_t k, SpecCandidates c,
                             int* token_room, PlacedStep* step, StepSpeculation* spec,
                             std::vector<engine::DecodeItem>* rows,
                             std::vector<int32_t>* row_nodes);
  int32_t TakeCandidates(Live& live, size_t sample, std::span<const engine::SampleResult> results,
                         std::chrono::steady_clock::time_point at);
  // A tree's accepted path: its KV copied from the candidate slots onto the sample's sequence,
  // the candidates' forks released. Returns how many of `path` stay accepted (0 without room).
  size_t AcceptTreePath(const SpecCandidates& c, const std::vector<int32_t>& path,
                        kvcache::SeqId seq);
  // Ends a sample's candidates without taking them (preemption, cancellation).
  void DropCandidates(Live& live, size_t sample);
  // kLookup: what a greedy request generated, by prompt (and cache namespace).
  void RememberContinuation(const Live& live);
  SpeculationGovernor speculation_governor_;  // LoopOptions::speculation_adaptive
  // While ProfileSpeculation runs: the way of every step, and where its steps' times go.
  struct ProfileRun {
    int size_class = 0;
    std::vector<double> with = {}, without = {};  // seconds of decode-only steps of size_class
  };
  std::optional<bool> speculation_forced_;
  ProfileRun* profile_run_ = nullptr;
  // Whether the governor (or the profile) lets a step of `size_class` speculate, counting the
  // step (SpeculationGovernor::Speculate); May: the same answer, without counting.
  bool GovernorSpeculates(int size_class);
  bool GovernorMaySpeculate(int size_class) const;
  // Whether sample `sample` of `live` may have candidates in the next step: with draft heads,
  // any unconstrained one; with prompt lookup, one with a continuation to look up (a prompt seen
  // before) or whose context's last tokens occurred before in it (a scan of the context). A step
  // where none may is fed like a plain one (FedReady).
  bool MayDraft(const Live& live, size_t sample) const;
  // kHeads: the trees' branching, draft_tree or a chain of draft_tokens, at most the heads'
  // count of levels (fixed at construction).
  std::vector<int32_t> draft_branching_;

  // Collect (scheduler/loop/collect.cc): waits for the step in flight and takes its tokens;
  // false when the step failed (FailAll ran).
  bool CollectInflight();
  // Launch (scheduler/loop/launch.cc): the sampling of the fed step ahead_ launched with
  // late_sampling, once inflight_'s tokens are taken; false when it failed (FailAll ran and
  // ahead_ is dropped).
  bool FinishLateSampling();
  // Its parts: a fed step's pending tokens set; the decode rows' tokens (returns how many
  // tokens were taken); the prompts' first tokens; the draft heads' next trees.
  void PatchFedStep(const engine::StepOutput& out);
  size_t TakeDecodeRows(const engine::StepOutput& out, std::chrono::steady_clock::time_point at,
                        std::vector<DraftWant>* want_draft);
  void TakePromptRows(const engine::StepOutput& out, std::chrono::steady_clock::time_point at,
                      std::vector<DraftWant>* want_draft);
  void DraftNext(std::vector<DraftWant>* want_draft);
  uint64_t collects_ = 0;  // CollectInflight calls

  // Output (scheduler/loop/output.cc). TakeSample: a sampled token reaches its sample: into
  // its sampling state and generated tokens, or ending it at EOS / max_tokens (KV released at
  // once); the event is queued for EmitPending: the queued tokens' events (text, stop strings,
  // metrics, stream pushes).
  void TakeSample(Live& live, size_t sample, const engine::SampleResult& result,
                  std::chrono::steady_clock::time_point at);
  void EmitPending();
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
  // Pushes to / finishes a request's stream, remembering it for this step's announcement.
  void Emit(Live& live, TokenEvent event);
  void Touch(Live& live);
  void AnnounceTouched();
  // Stats (scheduler/loop/step_stats.h): the gauges as of now.
  void PublishMetrics();
  void FlushKvEvents();

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
  ThreadClocks collected_clocks_;  // when the last step in flight was collected
  InFlightStep inflight_;  // the launched step, until CollectInflight
  InFlightStep ahead_;     // a fed step, launched while inflight_ runs, until inflight_ is collected
  const bool feed_;        // LoopOptions::feed resolved
  // Without overlap: when the last Step's step was collected, if the loop is to go on at once.
  std::optional<ThreadClocks> last_collect_;
  std::vector<PendingToken> pending_;
  // kLookup: the continuations drafted from, by PromptKey.
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
  // Made at the first constrained request (LoopOptions::mask_workers > 0).
  std::unique_ptr<MaskWorkers> mask_workers_;
  std::unique_ptr<ForkJoin> mask_fill_;  // with mask_workers_ (LoopOptions::mask_fill_threads)
};

}  // namespace banyan::scheduler
