// EngineLoop (engine_loop.h): a request's way in and out (Check, Add, cancellation, preemption)
// and the step: StepUnannounced drives ScheduleAndLaunch through the stages of scheduler/loop/.
#include "scheduler/engine_loop.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/request_check.h"
#include "scheduler/loop/launch.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/placement.h"
#include "scheduler/loop/speculation.h"
#include "scheduler/loop/step_summary.h"
#include "scheduler/fork_join.h"
#include "scheduler/mask_workers.h"
#include "scheduler/policy.h"
#include "text/sample_text.h"
#include "spdlog/spdlog.h"

namespace banyan::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

int32_t CeilDiv(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

kvcache::ChunkPool MakePool(const engine::Backend& backend) {
  auto pool = kvcache::ChunkPool::Create(backend.num_chunks(), backend.chunk_size());
  BANYAN_CHECK(pool.ok()) << "the backend's KV pool shape: " << pool.status();
  return std::move(*pool);
}

}  // namespace

std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("scheduler");
    return l ? l : spdlog::default_logger()->clone("scheduler");
  }();
  return logger;
}

// What placement asks of the loop (placement.h).
class EngineLoop::Hooks final : public PlacementHooks {
 public:
  explicit Hooks(EngineLoop& loop) : loop_(loop) {}
  void Preempt(LiveRequest& live) override { loop_.Preempt(live); }
  void Fail(LiveRequest& live, absl::Status status) override {
    loop_.Finish(live, std::move(status), FinishReason::kError);
  }
  void StartSamples(LiveRequest& live) override { loop_.StartSamples(live); }
  std::span<const uint64_t> MaskFor(LiveRequest& live, size_t sample) override {
    return loop_.MaskFor(live, sample);
  }
  bool MaskReady(LiveRequest& live, size_t sample) override {
    return loop_.MaskReady(live, sample);
  }

 private:
  EngineLoop& loop_;
};

EngineLoop::EngineLoop(const model::ModelConfig& config, const text::Tokenizer* tokenizer,
                       std::unique_ptr<engine::Backend> backend, LoopOptions options)
    : config_(config), tokenizer_(tokenizer), backend_(std::move(backend)),
      pool_(MakePool(*backend_)), tree_(&pool_),
      runner_(backend_.get(), &tree_, options.attention), options_(options),
      chunks_total_(pool_.chunks_total()), chunk_size_(pool_.chunk_size()),
      overlap_(options.overlap < 0 ? backend_->launches_async() : options.overlap > 0),
      feed_(overlap_ && (options.feed < 0 ? backend_->launches_async() : options.feed > 0)) {
  MetricsSnapshot& m = metrics_;
  m.time_to_first_token_seconds = Histogram(LatencyBuckets());
  m.inter_token_latency_seconds = Histogram(LatencyBuckets());
  m.e2e_request_latency_seconds = Histogram(LatencyBuckets());
  m.chunk_size = tree_.chunk_size();
  m.kv_fp8 = backend_->kv_fp8();
  m.batch_invariant = backend_->batch_invariant();
  PublishMetrics();
  // Draft heads that run on the backend's device are uploaded now (a drafting call for no
  // samples), not in the first step that drafts.
  if (options_.speculation == LoopOptions::Speculation::kHeads && options_.draft_heads != nullptr) {
    draft_branching_.assign(options_.draft_tree.begin(), options_.draft_tree.end());
    if (draft_branching_.empty()) draft_branching_.assign(static_cast<size_t>(options_.draft_tokens), 1);
    draft_branching_.resize(
        std::min<size_t>(draft_branching_.size(), options_.draft_heads->num_heads()));
  }
  if (!draft_branching_.empty() && !options_.draft_on_host) {
    std::vector<engine::DraftHeads::Tree> none;
    if (absl::Status s = backend_->DraftTrees(*options_.draft_heads, {}, {}, {}, &none); !s.ok()) {
      Log()->warn("draft heads: {}", std::string(s.message()));
    }
  }
}

EngineLoop::~EngineLoop() {
  // The device must be done with the KV and buffers.
  for (InFlightStep* f : {&inflight_, &ahead_}) {
    if (!f->active) continue;
    engine::StepOutput out;
    runner_.Collect(&out).IgnoreError();
  }
  ++step_serial_;
  for (auto* list : {&waiting_, &running_}) {
    for (LivePtr& l : *list) Finish(*l, absl::OkStatus(), FinishReason::kCancelled);
    list->clear();
  }
  announcer_ = nullptr;  // its thread may be gone: announce here
  AnnounceTouched();
}

absl::Status EngineLoop::Check(const Request& r) const {
  if (absl::Status s = engine::ValidateGeneration(config_, r.prompt, r.params, r.n); !s.ok()) {
    return s;
  }
  const int n = SamplesRun(r);
  if (n > options_.max_running_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("n is ", n, ", more than the ",
                                                   options_.max_running_sequences,
                                                   " sequences the server runs at once"));
  }
  if (absl::Status s = CheckConstraint(r); !s.ok()) return s;
  const int32_t c = chunk_size_;
  const int64_t worst = CeilDiv(static_cast<int64_t>(r.prompt.size()), c) +
                        int64_t{n} * (CeilDiv(r.params.max_tokens, c) + 2);
  if (worst > chunks_total_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request may need ", worst, " KV chunks, more than the whole cache (",
                     chunks_total_, " chunks of ", c, " tokens)"));
  }
  return absl::OkStatus();
}

absl::Status EngineLoop::CheckConstraint(const Request& r) const {
  if (r.constraint == nullptr) return absl::OkStatus();
  if (!backend_->supports_token_masks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "structured outputs (response_format, guided_json / _regex / _choice, "
        "structured_outputs; gRPC's json_schema, regex, choice, json_object) need token masks, "
        "which the ",
        absl::string_view(backend_->name().data(), backend_->name().size()),
        " backend does not take; use the cpu or cuda backend or leave them out"));
  }
  if (r.constraint->masker->vocab().size() > config_.vocab_size) {
    return absl::InternalError("the grammar's vocabulary is larger than the model's");
  }
  // A best-effort grammar (tool_choice auto) is dropped where it cannot apply (Add): the output
  // is then free, as it was before such grammars. Any other (a structural tag, a
  // response_format after the thinking) is what the client asked for: checked as any grammar.
  if (r.constraint->best_effort) return absl::OkStatus();
  if (r.params.min_tokens > 0) {
    // min_tokens bans the end ids that a finished grammar leaves as the only way out.
    return absl::InvalidArgumentError(
        "min_tokens cannot be combined with a structured output (response_format, guided_json)");
  }
  return absl::OkStatus();
}

bool EngineLoop::MaskReady(Live& live, size_t sample) {
  const Live::Sample& s = live.samples[sample];
  if (!s.matcher.has_value() || mask_workers_ == nullptr) return true;
  if (mask_workers_->Request(live.req.constraint->masker, *s.matcher)) return true;
  ++stats_.mask_sit_outs;
  return false;
}

std::span<const uint64_t> EngineLoop::MaskFor(Live& live, size_t sample) {
  Live::Sample& s = live.samples[sample];
  if (!s.matcher.has_value()) return {};
  if (!s.mask_fresh) {
    MaskCounts counts;
    FillMask(live, sample, &counts);
    AddMaskCounts(counts);
  }
  s.mask_fresh = false;
  return s.mask;
}

void EngineLoop::FillMasks(std::span<const std::pair<Live*, size_t>> samples,
                           std::span<uint64_t> staging) {
  MaskCounts counts;
  const bool classify_here = mask_fill_ != nullptr;
  const size_t words = text::grammar::MaskWords(config_.vocab_size);
  auto fill = [&](size_t i) {
    FillMask(*samples[i].first, samples[i].second, &counts, classify_here,
             staging.empty() ? std::span<uint64_t>{} : staging.subspan(i * words, words));
  };
  if (mask_fill_ != nullptr) {
    mask_fill_->Run(samples.size(), fill);
  } else {
    for (size_t i = 0; i < samples.size(); ++i) fill(i);
  }
  AddMaskCounts(counts);
}

void EngineLoop::AddMaskCounts(const MaskCounts& counts) {
  stats_.mask_waits += counts.waits.load();
  stats_.mask_walks_on_loop += counts.walks.load();
  stats_.mask_walks_on_fill += counts.fill_walks.load();
}

void EngineLoop::FillMask(Live& live, size_t sample, MaskCounts* counts, bool classify_here,
                          std::span<uint64_t> dst) {
  Live::Sample& s = live.samples[sample];
  if (!s.matcher.has_value()) return;
  text::grammar::TokenMasker& masker = *live.req.constraint->masker;
  if (!masker.Ready(*s.matcher)) {
    if (classify_here) {
      counts->fill_walks.fetch_add(1);  // FillMask below classifies what is missing, here
    } else if (mask_workers_ != nullptr) {
      counts->waits.fetch_add(1);
      mask_workers_->Wait(live.req.constraint->masker, *s.matcher);
    } else {
      counts->walks.fetch_add(1);  // FillMask walks (the engine thread: no fill threads then)
    }
  }
  // Tokens past the tokenizer's vocabulary (a padded LM head) stay disallowed.
  const size_t words = text::grammar::MaskWords(config_.vocab_size);
  const bool own = dst.empty();
  if (own) {
    s.mask.resize(words);
    dst = s.mask;
  }
  masker.FillMask(*s.matcher, dst.first(words));
  const bool can_end = s.matcher->CanEnd();
  const bool stuck = std::all_of(dst.begin(), dst.end(), [](uint64_t w) { return w == 0; });
  if (can_end || stuck) {
    // End of sequence: allowed where the grammar may end, and the only way out of a dead end
    // (which a grammar with no token for its next byte can reach).
    for (int id : config_.StopIds()) {
      if (id >= 0 && id < config_.vocab_size) text::grammar::SetBit(dst, id);
    }
  }
  s.mask_fresh = own;
}

int EngineLoop::SamplesRun(const Request& r) {
  return r.params.temperature < engine::kGreedyTemperature ? 1 : r.n;
}

void EngineLoop::Add(Request request, std::shared_ptr<RequestStream> stream,
                     Clock::time_point submitted) {
  auto live = std::make_unique<Live>();
  live->req = std::move(request);
  live->stream = std::move(stream);
  live->submitted = submitted;
  live->usage.prompt_tokens = static_cast<int32_t>(live->req.prompt.size());
  if (engine::SamplingParams& sp = live->req.params; sp.min_tokens > 0) {
    // What min_tokens holds back: the model's end ids (unless ignore_eos), stop_token_ids.
    std::vector<int32_t>& banned = sp.min_tokens_banned;
    banned.assign(sp.stop_token_ids.begin(), sp.stop_token_ids.end());
    if (!sp.ignore_eos) {
      for (int id : config_.StopIds()) banned.push_back(id);
    }
    std::erase_if(banned, [&](int32_t id) { return id < 0 || id >= config_.vocab_size; });
    std::sort(banned.begin(), banned.end());
    banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  }
  if (const auto& c = live->req.constraint;
      c != nullptr && c->best_effort &&
      (!backend_->supports_token_masks() || live->req.params.min_tokens > 0)) {
    live->req.constraint = nullptr;  // CheckConstraint: free output, as without the grammar
  }
  if (SamplesRun(live->req) < live->req.n) {
    live->copies = live->req.n;
    live->req.n = 1;
  }
  if (live->req.constraint != nullptr && options_.mask_workers > 0 && mask_workers_ == nullptr) {
    mask_workers_ = std::make_unique<MaskWorkers>(options_.mask_workers);
    int fill = options_.mask_fill_threads;
    if (fill < 0) fill = std::min(8, static_cast<int>(std::thread::hardware_concurrency()) / 2);
    if (fill > 0) mask_fill_ = std::make_unique<ForkJoin>(fill);
  }
  if (const auto& c = live->req.constraint; c != nullptr && mask_workers_ != nullptr &&
                                            options_.mask_prefetch_after > 0 &&
                                            c->masker->NoteUse() == options_.mask_prefetch_after) {
    mask_workers_->Prefetch(c->masker, static_cast<size_t>(options_.mask_prefetch_positions));
  }
  live->prompt_blocks = PromptBlocks(live->req.cache_namespace, live->req.prompt, chunk_size_);
  live->handle = live->arrival = ++arrival_counter_;
  waiting_.push_back(std::move(live));
  added_ = true;
}

void EngineLoop::CancelDue(bool cancel_all) {
  const auto now = Clock::now();
  for (auto* list : {&waiting_, &running_}) {
    for (LivePtr& l : *list) {
      const bool due = cancel_all || l->stream->cancel_requested() ||
                       (l->req.deadline && now >= *l->req.deadline);
      if (due) {
        Finish(*l, absl::OkStatus(), FinishReason::kCancelled);
        retired_.push_back(std::move(l));  // pending tokens may still name it
      }
    }
    std::erase(*list, nullptr);
  }
}

void EngineLoop::Preempt(Live& live) {
  // Samples keep their generated tokens and sampling state; only the KV goes (to the cache,
  // where the recompute will most likely find it).
  ReleaseAll(live);
  for (Live::Sample& s : live.samples) s.drafted = {};
  live.placed = 0;
  live.resume = !live.samples.empty();
  live.state = RequestState::kWaiting;
  ++metrics_.preemptions_total;
  Log()->info("[kv] request {} preempted (recompute later)", live.req.id);
}

void EngineLoop::StartSamples(Live& live) {
  const Request& r = live.req;
  // The prompt's distinct tokens are kept only where the repetition penalty reads them, and a
  // greedy request draws no OS entropy (its seed is never used).
  const bool greedy = r.params.temperature < engine::kGreedyTemperature;
  const uint64_t seed = greedy && !r.params.has_seed ? 0 : engine::AdmissionSeed(r.params);
  engine::SequenceSamplingState base(
      seed, r.params.repetition_penalty != 1.0f ? std::span<const int32_t>(r.prompt)
                                                : std::span<const int32_t>(),
      0);
  base.set_count_tokens(r.params.HasPenalties());
  live.samples.clear();
  for (int k = 0; k < r.n; ++k) {
    Live::Sample s{.seq = -1, .sampling = base.Fork(static_cast<uint32_t>(k)), .text = {},
                   .generated = {}, .next_token = -1, .finished = false, .ended = false,
                   .emitted = 0, .last_token = {}, .cand = {}, .drafted = {}, .lookup = {},
                   .lookup_checked = 0, .lookup_tried = false, .matcher = {}, .mask = {},
                   .trigger_tail = {}};
    if (tokenizer_ != nullptr) s.text.emplace(*tokenizer_, r.stop, r.prompt);
    if (r.constraint != nullptr && r.constraint->triggers.empty()) {
      s.matcher.emplace(r.constraint->grammar);
    }
    live.samples.push_back(std::move(s));
  }
}

bool EngineLoop::Step(bool cancel_all) {
  ++step_serial_;
  const bool moved = StepUnannounced(cancel_all);
  AnnounceTouched();
  FlushKvEvents();
  return moved;
}

void EngineLoop::set_kv_event_sink(kvcache::KvEventSink* sink) {
  kv_sink_ = sink;
  tree_.set_event_log(sink != nullptr ? &kv_log_ : nullptr);
}

void EngineLoop::FlushKvEvents() {
  if (kv_sink_ == nullptr) return;
  if (kv_log_.WantsSnapshot(kv_sink_)) {
    const std::vector<kvcache::FullBlock> snapshot = tree_.FullBlocks();
    Log()->warn("[kv] events: the publisher dropped batches; resending the cache's {} blocks",
                snapshot.size());
    kv_log_.Flush(kv_sink_, &snapshot);
    return;
  }
  kv_log_.Flush(kv_sink_, nullptr);
}

bool EngineLoop::StepUnannounced(bool cancel_all) {
  // A step's wall time runs from the previous step's tokens arriving when the loop went on
  // without waiting for work (in both modes: the device is idle from then until the launch),
  // else from this call.
  ThreadClocks cycle = last_collect_.has_value() ? *last_collect_ : ThreadClocks::Now();
  last_collect_.reset();
  bool moved = added_;
  added_ = false;
  const size_t before = waiting_.size() + running_.size();
  if (inflight_.active && feed_ && StepFed(cycle, cancel_all)) return true;
  if (inflight_.active) {
    // Step N's tokens: wait for them, then place them (the next step needs them in the tree).
    moved = true;
    CollectInflight();
    cycle = collected_clocks_;
  }
  retired_.clear();  // nothing in flight names them any more
  CancelDue(cancel_all);
  moved = moved || waiting_.size() + running_.size() != before;
  if (!waiting_.empty() || !running_.empty()) {
    if (ScheduleAndLaunch(cycle, /*fed=*/false) == Launch::kLaunched) {
      moved = true;
      // Without overlap the step's tokens are taken at once; with it, on the next Step, and the
      // work below (detokenizing, stop strings, stream pushes) runs while the device computes.
      if (inflight_.active && !overlap_) CollectInflight();
    }
  }
  EmitPending();
  Retire();
  if (moved) PublishMetrics();
  // Without overlap, the next step's wall time starts at this step's tokens, so that it holds
  // this tail of host work (the device idles through it) as the overlapped loop's steps do.
  if (!overlap_ && !inflight_.active && inflight_.collected_this_step) {
    last_collect_ = collected_clocks_;
  }
  inflight_.collected_this_step = false;
  return moved || inflight_.active;
}

bool EngineLoop::StepFed(const ThreadClocks& cycle, bool cancel_all) {
  // Fed: step N + 1 is launched before step N's tokens are taken. Cancelled requests go first
  // (their tokens are all in the tree: the last pending ones were set when N - 1 was taken).
  CancelDue(cancel_all);
  const uint64_t collects = collects_;
  if (!FedReady() || ScheduleAndLaunch(cycle, /*fed=*/true) != Launch::kLaunched) return false;
  // N, unless the launch took it first (a fed step that could not be): its tokens set N + 1's
  // pending ones before anything can release them.
  const bool collected = collects_ != collects || CollectInflight();
  if (!collected && ahead_.active) {
    // N failed and every request with it: N + 1 names them too. Wait for it and drop it
    // (releasing the failed requests' sequences dropped N + 1's pending tokens).
    if (runner_.awaits_sampling()) {
      runner_.FinishLaunch([](kvcache::SeqId, engine::SampleSpec* spec) { spec->allowed = {}; })
          .IgnoreError();
    }
    engine::StepOutput dropped;
    runner_.Collect(&dropped).IgnoreError();
    ahead_ = InFlightStep{};
  }
  // N's tokens moved the constrained rows' grammars: N + 1's masks are known now, while the
  // device runs N + 1's layers.
  if (ahead_.active && ahead_.late_sampling) FinishLateSampling();
  if (ahead_.active) {
    // N + 1's wall and device time start where N's ended: the steps' times add up.
    ahead_.times.begin = collected_clocks_.wall;
    ahead_.times.device_before = backend_->device_seconds();
    std::swap(inflight_, ahead_);
  }
  EmitPending();
  retired_.clear();  // N named them (and their pending events); N + 1 names none of them
  Retire();
  PublishMetrics();
  return true;
}

EngineLoop::Launch EngineLoop::ScheduleAndLaunch(const ThreadClocks& cycle, bool fed) {
  LaunchClock clock(cycle);
  // Summary and policy: the tree and the lists become the policy's input; it plans the step.
  const StepSummary summary =
      SummarizeStep(tree_, waiting_, running_,
                    {.max_sequences = options_.max_running_sequences,
                     .prefill_token_budget = options_.prefill_token_budget},
                    fed, inflight_.logit_owners);
  const IterationPlan plan = Schedule(summary.input);
  if (fed && (plan.empty() || !plan.preempt.empty())) {
    return Launch::kNotFed;  // this step must see step N's tokens first
  }
  if (plan.empty()) return Launch::kNothing;  // nothing can move until a request finishes or arrives
  clock.Placing();
  // Placement: preemptions, prompts, decode rows (fed, or appends of tokens in hand).
  PlacedStep step;
  Launch result = Launch::kLaunched;
  if (!Place(plan, summary.by_handle, &clock, &fed, &step, &result)) return result;
  // Speculation: candidates after the decode rows' tokens, verified by this step.
  InFlightStep& f = fed ? ahead_ : inflight_;
  Speculate(&step, fed, &f.speculation);
  // Launch: every row's sampling, then the backend.
  Hooks hooks(*this);
  BindSampling(hooks, &step);
  LaunchPlaced(std::move(step), clock, fed, &f);
  return Launch::kLaunched;
}

bool EngineLoop::Place(const IterationPlan& plan, const ByHandle& by_handle, LaunchClock* clock,
                       bool* fed, PlacedStep* step, Launch* result) {
  Hooks hooks(*this);
  for (uint64_t h : plan.preempt) Preempt(*by_handle.at(h));
  step->copies = std::move(pending_copies_);  // from truncations
  pending_copies_.clear();
  PlacePrompts(tree_, plan, by_handle, running_, hooks, step);
  metrics_.prompt_tokens_total += step->prompt_tokens;
  metrics_.prefix_cache_hit_tokens_total += step->cache_hit_tokens;
  if (*fed) {
    switch (PlaceFedRows(tree_, plan, by_handle, inflight_, step)) {
      case FedPlacement::kPlaced:
        return true;
      case FedPlacement::kNotFed:
        *result = Launch::kNotFed;
        return false;
      case FedPlacement::kShort:
        // The prompts stay placed; the step takes N's tokens first and appends them.
        *fed = false;
        ++stats_.fed_fallbacks;
        if (!CollectInflight()) {
          *result = Launch::kLaunched;  // failed: FailAll ran
          return false;
        }
        clock->Waited(collected_clocks_);  // the device waits from here
        break;
    }
  }
  PlaceDecodeAppends(tree_, plan, by_handle, hooks, step);
  return true;
}


bool EngineLoop::FedReady() const {
  if (inflight_.speculation.speculated || !pending_copies_.empty() || running_.empty()) return false;
  // One pass over the running requests gathers two answers: whether every sample can take a
  // fed row, and the class of the step to be fed.
  size_t next_rows = 0;
  for (const LivePtr& l : running_) {
    // A prompt: more of it to place (prefill rows only), or its first token is sampled by N and
    // its first decode rows are fed from there (n > 1: ForkAhead makes the samples first).
    // A constrained row is fed too: its mask needs its token of N, so the step's sampling is
    // launched once N is collected (late sampling, FinishLateSampling).
    // Penalties do not hold a row back: the backend counts a fed row's token in its penalties.
    const bool decoding = l->state == RequestState::kDecoding;
    if (!decoding && l->state != RequestState::kPrefilling) return false;
    for (size_t i = 0; i < l->samples.size(); ++i) {
      const Live::Sample& s = l->samples[i];
      if (s.finished) continue;
      if (!decoding) continue;
      // The class of the step to be fed: its rows are N's decode rows and the first decode rows
      // of the prompts N finishes (a step after a prompt-only N decodes rows that N did not).
      ++next_rows;
      // Its next token comes from a row of N. (Its slot never depends on the token: samples
      // that share a leaf, or a leaf with children, take pending forks, PrefixTree::AppendPending.)
      if (!inflight_.owner.contains(s.seq)) return false;
    }
  }
  // Fed unless a sample may draft in a step that may speculate (asked last: with n-gram lookup,
  // MayDraft scans a sample's context).
  const int spec_class = SpeculationClassFor(options_, next_rows);
  if (spec_class < 0 || !GovernorMaySpeculate(spec_class)) return true;
  for (const LivePtr& l : running_) {
    for (size_t i = 0; i < l->samples.size(); ++i) {
      if (!l->samples[i].finished && MayDraft(*l, i)) return false;
    }
  }
  return true;
}

MaskWorkers::Stats EngineLoop::mask_worker_stats() const {
  return mask_workers_ == nullptr ? MaskWorkers::Stats{} : mask_workers_->stats();
}

}  // namespace banyan::scheduler
