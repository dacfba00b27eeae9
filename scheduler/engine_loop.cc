#include "scheduler/engine_loop.h"
#include "scheduler/engine_loop_live.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/request_check.h"
#include "scheduler/policy.h"
#include "text/sample_text.h"
#include "spdlog/spdlog.h"

namespace banyan::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

int32_t CeilDiv(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

// The tokens a running sample has in the tree: the prompt and every generated token except the
// last, which is its pending next_token (sampled; the next decode step appends it).
std::vector<int32_t> InTree(const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end() - (generated.empty() ? 0 : 1));
  return all;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

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

EngineLoop::ThreadClocks EngineLoop::ThreadClocks::Now() {
  ThreadClocks c;
  c.wall = Clock::now();
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
    c.cpu_seconds = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) == 0) c.context_switches = ru.ru_nvcsw + ru.ru_nivcsw;
  return c;
}


EngineLoop::EngineLoop(const model::ModelConfig& config, const text::Tokenizer* tokenizer,
                       std::unique_ptr<engine::Backend> backend, LoopOptions options)
    : config_(config), tokenizer_(tokenizer), backend_(std::move(backend)),
      pool_(MakePool(*backend_)), tree_(&pool_),
      runner_(backend_.get(), &tree_, options.attention), options_(options),
      chunks_total_(pool_.chunks_total()), chunk_size_(pool_.chunk_size()),
      overlap_(options.overlap < 0 ? backend_->launches_async() : options.overlap > 0),
      feed_(overlap_ && options.speculation == LoopOptions::Speculation::kOff &&
            (options.feed < 0 ? backend_->launches_async() : options.feed > 0)) {
  MetricsSnapshot& m = metrics_;
  m.time_to_first_token_seconds = Histogram(LatencyBuckets());
  m.inter_token_latency_seconds = Histogram(LatencyBuckets());
  m.e2e_request_latency_seconds = Histogram(LatencyBuckets());
  m.chunk_size = tree_.chunk_size();
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
  for (InFlight* f : {&inflight_, &ahead_}) {
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
        "structured outputs (response_format json_object/json_schema, guided_json) are not yet "
        "on the ", absl::string_view(backend_->name().data(), backend_->name().size()), " backend; use the cpu backend or leave them out"));
  }
  if (r.constraint->masker->vocab().size() > config_.vocab_size) {
    return absl::InternalError("the grammar's vocabulary is larger than the model's");
  }
  if (r.params.min_tokens > 0) {
    // min_tokens bans the end ids that a finished grammar leaves as the only way out.
    return absl::InvalidArgumentError(
        "min_tokens cannot be combined with a structured output (response_format, guided_json)");
  }
  return absl::OkStatus();
}

std::span<const uint64_t> EngineLoop::MaskFor(Live& live, size_t sample) const {
  Live::Sample& s = live.samples[sample];
  if (!s.matcher.has_value()) return {};
  live.req.constraint->masker->FillMask(*s.matcher, &s.mask);
  // Tokens past the tokenizer's vocabulary (a padded LM head) stay disallowed.
  s.mask.resize((static_cast<size_t>(config_.vocab_size) + 63) / 64, 0);
  const bool can_end = s.matcher->CanEnd();
  const bool stuck = std::all_of(s.mask.begin(), s.mask.end(), [](uint64_t w) { return w == 0; });
  if (can_end || stuck) {
    // End of sequence: allowed where the grammar may end, and the only way out of a dead end
    // (which a grammar with no token for its next byte can reach).
    for (int id : config_.StopIds()) {
      if (id >= 0 && id < config_.vocab_size) text::grammar::SetBit(&s.mask, id);
    }
  }
  return s.mask;
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
  if (SamplesRun(live->req) < live->req.n) {
    live->copies = live->req.n;
    live->req.n = 1;
  }
  live->handle = live->arrival = ++arrival_counter_;
  waiting_.push_back(std::move(live));
  added_ = true;
}

void EngineLoop::ReleaseAll(Live& live) {
  if (live.prompt_seq >= 0) {
    tree_.Release(live.prompt_seq).IgnoreError();
    live.prompt_seq = -1;
  }
  for (size_t i = 0; i < live.samples.size(); ++i) ReleaseSample(live, i);
}

void EngineLoop::ReleaseSample(Live& live, size_t i) {
  Live::Sample& s = live.samples[i];
  if (!s.cand.empty()) DropCandidates(live, i);
  if (s.seq >= 0) tree_.Release(s.seq).IgnoreError();
  s.seq = -1;
}

void EngineLoop::Finish(Live& live, absl::Status status, FinishReason reason) {
  for (size_t i = 0; i < live.samples.size(); ++i) {
    if (!live.samples[i].ended) EndSample(live, i, reason, "");
  }
  if (live.samples.empty() && reason != FinishReason::kNone) {
    // Ended before its first token: one terminal event per requested sample.
    for (int i = 0; i < live.req.n; ++i) {
      TokenEvent e;
      e.sample = i;
      e.finish = reason;
      Emit(live, std::move(e));
    }
  }
  ReleaseAll(live);
  Usage sent = live.usage;
  sent.completion_tokens *= live.copies;  // the tokens sent, over all choices
  MetricsSnapshot& m = metrics_;
  ++m.requests_finished_total;
  if (reason == FinishReason::kCancelled) ++m.requests_cancelled_total;
  if (!status.ok()) ++m.requests_failed_total;
  m.e2e_request_latency_seconds.Observe(Seconds(live.submitted, Clock::now()));
  live.state = status.ok() ? (reason == FinishReason::kCancelled ? RequestState::kCancelled
                                                                 : RequestState::kFinished)
                           : RequestState::kFailed;
  Log()->info("request {} {}: prompt {} (cached {}), completion {}{}", live.req.id,
              !status.ok() ? "failed"
              : reason == FinishReason::kNone ? "finished"
                                              : std::string(FinishReasonName(reason)),
              sent.prompt_tokens, sent.cached_prompt_tokens, sent.completion_tokens,
              status.ok() ? "" : ": " + std::string(status.message()));
  live.stream->Finish(std::move(status), sent, /*announce=*/false);
  Touch(live);
}

void EngineLoop::EndSample(Live& live, size_t i, FinishReason reason, std::string text) {
  Live::Sample& s = live.samples[i];
  s.finished = s.ended = true;
  ReleaseSample(live, i);
  TokenEvent e;
  e.sample = static_cast<int>(i);
  e.text = std::move(text);
  e.finish = reason;
  Emit(live, std::move(e));
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

absl::Status EngineLoop::PlacePrefill(Live& live, int32_t tokens,
                                     std::vector<kvcache::ChunkCopy>* copies,
                                     std::vector<engine::PrefillItem>* items,
                                     std::vector<Live*>* logit_owners) {
  const Request& r = live.req;
  if (live.resume) {
    // Re-place every running sample's tokens; recompute what the cache lost. No logits needed:
    // each sample's next token was sampled before the preemption.
    for (Live::Sample& s : live.samples) {
      if (s.finished) continue;
      std::vector<int32_t> all = InTree(r.prompt, s.generated);
      auto placed = tree_.Insert(r.cache_namespace, all, /*allow_evict=*/true);
      if (!placed.ok()) return placed.status();
      s.seq = placed->seq;
      copies->insert(copies->end(), placed->copies.begin(), placed->copies.end());
      const int32_t len = static_cast<int32_t>(all.size());
      if (placed->matched_tokens < len) {
        items->push_back(engine::PrefillItem{.seq = s.seq, .begin = placed->matched_tokens,
                                             .end = len, .cached_end = placed->matched_tokens,
                                             .want_logits = false, .samples = {}});
      }
    }
    live.resume = false;
    live.state = RequestState::kDecoding;
    return absl::OkStatus();
  }
  const int32_t len = static_cast<int32_t>(r.prompt.size());
  const int32_t begin = live.placed;
  const int32_t match_hint =
      live.prompt_seq < 0 ? tree_.Match(r.cache_namespace, r.prompt) : begin;
  const int32_t end = std::min(len, std::max(match_hint, begin) + std::max(tokens, 1));
  std::span<const int32_t> chunk(r.prompt.data() + begin, end - begin);
  absl::StatusOr<kvcache::PlaceResult> placed =
      live.prompt_seq < 0 ? tree_.Insert(r.cache_namespace, chunk, /*allow_evict=*/true)
                          : tree_.Extend(live.prompt_seq, chunk, /*allow_evict=*/true);
  if (!placed.ok()) return placed.status();
  if (live.prompt_seq < 0) live.usage.cached_prompt_tokens = placed->matched_tokens;
  live.prompt_seq = placed->seq;
  live.placed = end;
  live.state = RequestState::kPrefilling;
  copies->insert(copies->end(), placed->copies.begin(), placed->copies.end());
  const int32_t cached_end = begin + placed->matched_tokens;
  const bool last = end == len;
  if (cached_end < end || last) {
    // A fully cached prompt still recomputes its last token for the logits (KV not rewritten).
    items->push_back(engine::PrefillItem{.seq = live.prompt_seq,
                                         .begin = std::min(cached_end, end - 1), .end = end,
                                         .cached_end = cached_end, .want_logits = last, .samples = {}});
    if (last) {
      // The samples' states exist before the forward pass: the backend samples their first
      // tokens from this row.
      StartSamples(live);
      for (size_t k = 0; k < live.samples.size(); ++k) {
        items->back().samples.push_back({.params = &r.params,
                                         .state = &live.samples[k].sampling,
                                         .allowed = MaskFor(live, k)});
      }
      logit_owners->push_back(&live);
    }
  }
  metrics_.prompt_tokens_total += end - begin;
  metrics_.prefix_cache_hit_tokens_total += placed->matched_tokens;
  return absl::OkStatus();
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
                   .lookup_checked = 0, .matcher = {}, .mask = {}};
    if (tokenizer_ != nullptr) s.text.emplace(*tokenizer_, r.stop, r.prompt);
    if (r.constraint != nullptr) s.matcher.emplace(r.constraint->grammar);
    live.samples.push_back(std::move(s));
  }
}

void EngineLoop::TakeSample(Live& live, size_t i, const engine::SampleResult& res,
                            Clock::time_point at) {
  Live::Sample& s = live.samples[i];
  if (s.finished) return;
  if (res.token < 0) {
    Finish(live, absl::InternalError(engine::kNoDistributionMessage), FinishReason::kError);
    return;
  }
  s.sampling.Accept(res.token);
  // A constrained sample: an end id ends it (ignore_eos or not: the mask allowed it only where
  // the grammar may end), any other token steps the grammar (the mask allowed it, so it fits).
  bool grammar_end = false;
  if (s.matcher.has_value()) {
    const text::grammar::Vocabulary& vocab = live.req.constraint->masker->vocab();
    if (config_.IsStop(res.token)) {
      grammar_end = true;
    } else if (res.token >= vocab.size() || !s.matcher->Accept(vocab.bytes(res.token))) {
      Finish(live,
             absl::InternalError(absl::StrCat("sampled token ", res.token,
                                              " is outside the request's grammar (a mask bug)")),
             FinishReason::kError);
      return;
    }
  }
  const int count = static_cast<int>(s.generated.size()) + 1;
  engine::FinishReason fin =
      engine::CheckStopIsEos(res.token, count, live.req.params, config_.IsStop(res.token));
  if (grammar_end) fin = engine::FinishReason::kStop;
  if (fin == engine::FinishReason::kNone) {
    s.generated.push_back(res.token);
    s.next_token = res.token;
  } else {
    s.finished = true;
    ReleaseSample(live, i);
    if (i == 0 && options_.speculation == LoopOptions::Speculation::kLookup) {
      s.generated.push_back(res.token);
      RememberContinuation(live);
      s.generated.pop_back();
    }
  }
  pending_.push_back({.live = &live, .sample = i, .result = res, .stop = fin, .at = at});
}

void EngineLoop::EmitPending() {
  MetricsSnapshot& m = metrics_;
  for (PendingToken& p : pending_) {
    Live& live = *p.live;
    Live::Sample& s = live.samples[p.sample];
    if (s.ended) continue;  // cancelled or failed meanwhile: the token is dropped
    if (!live.first_token_seen) {
      live.first_token_seen = true;
      m.time_to_first_token_seconds.Observe(Seconds(live.submitted, p.at));
    } else if (s.emitted > 0) {
      m.inter_token_latency_seconds.Observe(Seconds(s.last_token, p.at));
    }
    s.last_token = p.at;
    ++s.emitted;
    m.generation_tokens_total += live.copies;
    ++live.usage.completion_tokens;
    TokenEvent e;
    e.sample = static_cast<int>(p.sample);
    e.token = p.result.token;
    e.logprob = p.result.logprob;
    e.top_logprobs = std::move(p.result.top_logprobs);
    bool stopped = false;
    if (p.stop != engine::FinishReason::kStop && s.text) {
      e.text = s.text->Push(e.token, &stopped, s.emitted >= live.req.params.min_tokens);
    }
    if (stopped || p.stop == engine::FinishReason::kStop) {
      e.finish = FinishReason::kStop;
    } else if (p.stop == engine::FinishReason::kLength) {
      e.finish = FinishReason::kLength;
      if (s.text) e.text += s.text->Finish();
    }
    if (e.finish != FinishReason::kNone) {
      // A stop string ends the sample here; a token it has in flight is dropped when it comes.
      s.finished = s.ended = true;
      ReleaseSample(live, p.sample);
    }
    Emit(live, std::move(e));
  }
  pending_.clear();
}

void EngineLoop::PublishMetrics() {
  MetricsSnapshot& m = metrics_;
  kvcache::MemoryStats kv = tree_.Stats();
  m.kv_chunks_total = kv.chunks_total;
  m.kv_chunks_free = kv.chunks_free;
  m.kv_chunks_live = kv.chunks_live;
  m.kv_chunks_cached = kv.chunks_cached;
  m.kv_chunks_saved_by_sharing = kv.chunks_saved_by_sharing;
  m.kv_chunks_live_peak = std::max(m.kv_chunks_live_peak, kv.chunks_live);
  m.kv_chunks_saved_by_sharing_peak =
      std::max(m.kv_chunks_saved_by_sharing_peak, kv.chunks_saved_by_sharing);
  m.sequences_running = kv.live_sequences;
  m.requests_running = static_cast<int32_t>(running_.size());
  m.requests_waiting = static_cast<int32_t>(waiting_.size());
  if (kv.chunks_live >= stats_.peak.chunks_live) stats_.peak = kv;
}

void EngineLoop::Touch(Live& live) {
  if (live.touched_step == step_serial_) return;
  live.touched_step = step_serial_;
  touched_.push_back(live.stream);
}

int EngineLoop::SamplesRun(const Request& r) {
  return r.params.temperature < engine::kGreedyTemperature ? 1 : r.n;
}

void EngineLoop::Emit(Live& live, TokenEvent event) {
  for (int k = 1; k < live.copies; ++k) {  // greedy n > 1: every choice
    TokenEvent copy = event;
    copy.sample = k;
    live.stream->Push(std::move(copy), /*announce=*/false);
  }
  live.stream->Push(std::move(event), /*announce=*/false);
  Touch(live);
}

void EngineLoop::AnnounceTouched() {
  if (touched_.empty()) return;
  if (announcer_) {
    announcer_(std::move(touched_));
  } else {
    for (const std::shared_ptr<RequestStream>& s : touched_) s->Announce();
  }
  touched_.clear();
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
  const bool took = added_;
  added_ = false;
  const size_t before = waiting_.size() + running_.size();
  bool moved = took;
  if (inflight_.active && feed_) {
    // Fed: step N + 1 is launched before step N's tokens are taken. Cancelled requests go first
    // (their tokens are all in the tree: the last pending ones were set when N - 1 was taken).
    CancelDue(cancel_all);
    const uint64_t collects = collects_;
    if (FedReady() && ScheduleAndLaunch(cycle, /*fed=*/true) == Launch::kLaunched) {
      // N, unless the launch took it first (a fed step that could not be): its tokens set N + 1's
      // pending ones before anything can release them.
      const bool collected = collects_ != collects || CollectInflight();
      if (!collected && ahead_.active) {
        // N failed and every request with it: N + 1 names them too. Wait for it and drop it
        // (releasing the failed requests' sequences dropped N + 1's pending tokens).
        engine::StepOutput dropped;
        runner_.Collect(&dropped).IgnoreError();
        ahead_ = InFlight{};
      }
      if (ahead_.active) {
        // N + 1's wall and device time start where N's ended: the steps' times add up.
        ahead_.t_begin = collected_clocks_.wall;
        ahead_.device_before = backend_->device_seconds();
        std::swap(inflight_, ahead_);
      }
      EmitPending();
      retired_.clear();  // N named them (and their pending events); N + 1 names none of them
      Retire();
      PublishMetrics();
      return true;
    }
  }
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

bool EngineLoop::FedReady() const {
  if (inflight_.speculated || !pending_copies_.empty() || running_.empty()) return false;
  // Penalties do not hold a row back: the backend counts a fed row's token in its penalties.
  for (const LivePtr& l : running_) {
    // A prompt: more of it to place (prefill rows only), or its first token is sampled by N and
    // its first decode rows are fed from there (n > 1: ForkAhead makes the samples first).
    // A constrained row's mask needs its token of N on the host (the CPU path computes it once
    // the token is known; the device sampler takes no masks yet).
    if (l->req.constraint != nullptr) return false;
    if (l->state == RequestState::kPrefilling) continue;
    if (l->state != RequestState::kDecoding) return false;
    for (const Live::Sample& s : l->samples) {
      if (s.finished) continue;
      // Its next token comes from a row of N. (Its slot never depends on the token: samples
      // that share a leaf, or a leaf with children, take pending forks, PrefixTree::AppendPending.)
      if (!inflight_.owner.contains(s.seq)) return false;
    }
  }
  return true;
}

absl::Status EngineLoop::MakeSamples(Live& live) {
  if (live.prompt_seq < 0) return absl::OkStatus();  // made already (ForkAhead)
  auto ids = tree_.Fork(live.prompt_seq, live.req.n);
  if (!ids.ok()) return ids.status();
  for (size_t k = 0; k < live.samples.size(); ++k) live.samples[k].seq = (*ids)[k];
  live.prompt_seq = -1;  // now owned by samples[0]
  return absl::OkStatus();
}

void EngineLoop::ForkAhead(Live& live) {
  if (live.req.n == 1 || live.prompt_seq < 0 || !FirstTokenInFlight(live)) return;
  // Fork needs no memory; a live prompt sequence cannot be refused.
  const absl::Status s = MakeSamples(live);
  BANYAN_CHECK(s.ok()) << s;
}

bool EngineLoop::FirstTokenInFlight(const Live& live) const {
  return live.state == RequestState::kPrefilling &&
         live.placed == static_cast<int32_t>(live.req.prompt.size()) &&
         std::find(inflight_.logit_owners.begin(), inflight_.logit_owners.end(), &live) !=
             inflight_.logit_owners.end();
}

void EngineLoop::FailAll(const absl::Status& status) {
  Log()->error("engine step failed: {}", std::string(status.message()));
  pending_.clear();  // every request below fails: their taken tokens are not emitted
  for (auto* list : {&waiting_, &running_}) {
    for (LivePtr& l : *list) {
      Finish(*l, status, FinishReason::kError);
      retired_.push_back(std::move(l));
    }
    list->clear();
  }
  // What the failed step (and a step launched after it) was to write is unknown: prompt tokens
  // placed for it, tokens set at a collect whose KV the next step writes. They stay in the tree
  // as cached nodes once their sequences are released, and a later prompt would match them.
  // Every request failed, so nothing is live: drop the whole cache.
  pending_copies_.clear();
  const int32_t dropped = tree_.Evict(tree_.Stats().chunks_total);
  if (kv_sink_ != nullptr && kv_log_.blocks() == 0) kv_log_.AllCleared();
  if (dropped > 0) {
    Log()->warn("[kv] dropped the prefix cache ({} chunks): the failed step's KV is unknown",
                dropped);
  }
}

void EngineLoop::Retire() {
  // Admitted requests move to running; preempted ones back to waiting; finished ones leave.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->state != RequestState::kWaiting) {
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    Live& l = **it;
    if (l.state == RequestState::kWaiting) {  // preempted
      waiting_.push_back(std::move(*it));
      it = running_.erase(it);
      continue;
    }
    const bool done =
        l.state == RequestState::kFailed || l.state == RequestState::kFinished ||
        l.state == RequestState::kCancelled ||
        (l.state == RequestState::kDecoding &&
         std::all_of(l.samples.begin(), l.samples.end(), [](auto& s) { return s.ended; }));
    if (done) {
      if (l.state == RequestState::kDecoding) Finish(l, absl::OkStatus(), FinishReason::kNone);
      retired_.push_back(std::move(*it));  // the step in flight may still name it
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

EngineLoop::Launch EngineLoop::ScheduleAndLaunch(const ThreadClocks& cycle, bool fed) {
  const Clock::time_point cycle_start = cycle.wall;
  Clock::time_point begin = cycle_start;  // where the step's wall time starts
  const Clock::time_point t_schedule = Clock::now();
  // Summarise the state for the policy.
  const int32_t c = tree_.chunk_size();
  PolicyInput in;
  kvcache::MemoryStats kv = tree_.Stats();
  in.chunks_free = kv.chunks_free;
  in.chunks_cached = kv.chunks_cached;
  in.chunk_size = c;
  in.max_sequences = options_.max_running_sequences;
  in.prefill_token_budget = options_.prefill_token_budget;
  absl::flat_hash_map<uint64_t, Live*> by_handle;
  by_handle.reserve(waiting_.size() + running_.size());
  // Tenants with a KV budget: an index each, and the sequences their running requests hold.
  std::unordered_map<std::string, int32_t> tenant_index;
  std::vector<std::vector<kvcache::SeqId>> tenant_seqs;
  auto tenant_of = [&](const Live& l) -> int32_t {
    if (l.req.tenant_kv_chunks <= 0) return -1;
    auto [it, added] = tenant_index.emplace(l.req.tenant, static_cast<int32_t>(in.tenants.size()));
    if (added) {
      in.tenants.push_back({.chunks_budget = l.req.tenant_kv_chunks});
      tenant_seqs.emplace_back();
    }
    return it->second;
  };
  for (LivePtr& l : waiting_) {
    by_handle[l->handle] = l.get();
    PolicyRequest p{.handle = l->handle, .priority = l->req.priority, .arrival = l->arrival,
                    .sequences = l->req.n, .resume = l->resume, .tenant = tenant_of(*l)};
    // Chunks needed: the uncached tokens, the cached chunks the match turns live, and room for
    // a split copy and the first appends.
    int32_t cached_chunks = 0;
    if (l->resume) {
      int32_t samples = 0, cached_total = 0;
      for (const Live::Sample& s : l->samples) {
        if (s.finished) continue;
        std::vector<int32_t> all = InTree(l->req.prompt, s.generated);
        p.remaining_prefill += static_cast<int32_t>(all.size()) -
                               tree_.Match(l->req.cache_namespace, all, &cached_chunks);
        cached_total += cached_chunks;
        ++samples;
      }
      p.chunks_needed = ResumeChunks(p.remaining_prefill, cached_total, samples, c);
    } else {
      const int32_t len = static_cast<int32_t>(l->req.prompt.size());
      p.remaining_prefill =
          len - tree_.Match(l->req.cache_namespace, l->req.prompt, &cached_chunks);
      p.chunks_needed = AdmissionChunks(p.remaining_prefill, cached_chunks, l->req.n, c);
    }
    in.waiting.push_back(p);
  }
  std::vector<kvcache::SeqId> seqs;  // one request's sequences (reused: no allocation per row)
  for (LivePtr& l : running_) {
    if (l->state == RequestState::kDecoding &&
        std::all_of(l->samples.begin(), l->samples.end(), [](auto& s) { return s.finished; })) {
      continue;  // its last events go out in this Step; it holds no KV
    }
    by_handle[l->handle] = l.get();
    PolicyRequest p{.handle = l->handle, .priority = l->req.priority, .arrival = l->arrival,
                    .sequences = l->req.n, .tenant = tenant_of(*l)};
    seqs.clear();
    if (l->state == RequestState::kDecoding) {
      p.decoding = true;
      for (const Live::Sample& s : l->samples) {
        if (s.finished) continue;
        seqs.push_back(s.seq);
        p.chunks_needed += tree_.AppendChunksNeeded(s.seq, s.next_token);
      }
    } else if (fed && FirstTokenInFlight(*l)) {
      // Decodes from its prompt's sequence (its one sample's, once N is collected); n > 1
      // samples each take a pending fork of a chunk.
      p.decoding = true;
      seqs.push_back(l->prompt_seq);
      p.chunks_needed +=
          l->req.n > 1 ? l->req.n
                       : tree_.AppendChunksNeeded(l->prompt_seq, kvcache::PrefixTree::kPendingToken);
    } else {
      seqs.push_back(l->prompt_seq);
      p.remaining_prefill = static_cast<int32_t>(l->req.prompt.size()) - l->placed;
    }
    p.chunks_private = tree_.ChunksOnlyUsedBy(seqs);
    if (p.tenant >= 0) {
      tenant_seqs[p.tenant].insert(tenant_seqs[p.tenant].end(), seqs.begin(), seqs.end());
    }
    in.running.push_back(p);
  }
  // Tenants own disjoint namespaces, so the chunks only their sequences use are theirs.
  for (size_t t = 0; t < in.tenants.size(); ++t) {
    if (!tenant_seqs[t].empty()) in.tenants[t].chunks_used = tree_.ChunksOnlyUsedBy(tenant_seqs[t]);
  }
  IterationPlan plan = Schedule(in);
  if (fed && (plan.empty() || !plan.preempt.empty())) {
    return Launch::kNotFed;  // this step must see step N's tokens first
  }
  if (plan.empty()) return Launch::kNothing;  // nothing can move until a request finishes or arrives
  const Clock::time_point t_place = Clock::now();

  for (uint64_t h : plan.preempt) Preempt(*by_handle[h]);
  std::vector<kvcache::ChunkCopy> copies = std::move(pending_copies_);  // from truncations
  pending_copies_.clear();
  std::vector<engine::PrefillItem> prefill;
  std::vector<Live*> logit_owners;
  for (auto& [h, tokens] : plan.prefill) {
    Live& l = *by_handle[h];
    const size_t items_before = prefill.size(), owners_before = logit_owners.size();
    if (absl::Status s = PlacePrefill(l, tokens, &copies, &prefill, &logit_owners); !s.ok()) {
      // The policy budgets memory; failing here means the estimate was short: retry later.
      // Pending copies stay valid: copies run before any KV write of the step.
      prefill.resize(items_before);
      logit_owners.resize(owners_before);
      const bool alone = std::none_of(running_.begin(), running_.end(), [&](const LivePtr& r) {
        return r.get() != &l && r->state != RequestState::kWaiting;
      });
      if (alone) {
        // Nothing else holds memory: waiting cannot help. Fail instead of retrying forever.
        Finish(l, absl::ResourceExhaustedError(absl::StrCat(
                      "the KV cache cannot hold this request: ", s.message())),
               FinishReason::kError);
        continue;
      }
      Log()->warn("[kv] request {}: prefill deferred: {}", l.req.id, std::string(s.message()));
      Preempt(l);
    }
  }
  absl::flat_hash_map<kvcache::SeqId, std::pair<Live*, size_t>> owner;
  owner.reserve(running_.size());
  std::vector<engine::DecodeItem> decode;
  if (fed) {
    // Each sample's next token is pending: it is what step N samples for it, spec `feed` of N
    // (N's specs: its decode rows in row order, then each prompt's samples; FedReady saw no
    // candidates in N).
    for (uint64_t h : plan.decode) ForkAhead(*by_handle[h]);
    absl::flat_hash_map<kvcache::SeqId, int32_t> spec_of;
    const std::vector<kvcache::SeqId>& rows = inflight_.out.decode_rows;
    spec_of.reserve(rows.size() + inflight_.logit_owners.size());
    for (size_t r = 0; r < rows.size(); ++r) spec_of.emplace(rows[r], static_cast<int32_t>(r));
    int32_t spec = static_cast<int32_t>(rows.size());
    for (const Live* l : inflight_.logit_owners) {
      if (l->prompt_seq >= 0) {
        spec_of.emplace(l->prompt_seq, spec);  // n = 1, or not decoding in this step
      } else {
        for (size_t k = 0; k < l->samples.size(); ++k) {
          spec_of.emplace(l->samples[k].seq, spec + static_cast<int32_t>(k));
        }
      }
      spec += static_cast<int32_t>(l->samples.size());
    }
    std::vector<kvcache::SeqId> seqs;
    for (uint64_t h : plan.decode) {
      Live& l = *by_handle[h];
      for (size_t i = 0; i < l.samples.size(); ++i) {
        const Live::Sample& smp = l.samples[i];
        if (smp.finished) continue;
        // N's token is its last (max_tokens): as in the unfed loop, the step after has no row
        // for it, and so the same rows. (An EOS or a stop string cannot be known ahead: such a
        // sample has one more row, whose token is dropped.)
        if (static_cast<int64_t>(smp.generated.size()) + 1 >= l.req.params.max_tokens) continue;
        // A prompt whose first token N samples decodes on its prompt's sequence: the one
        // sample's once N is collected (Fork of one keeps the id), or its samples' (n > 1).
        const kvcache::SeqId seq = l.prompt_seq >= 0 ? l.prompt_seq : smp.seq;
        seqs.push_back(seq);
        owner[seq] = {&l, i};
      }
    }
    // A leaf that prefill placed above made a parent, one that samples share, or one with a
    // cached continuation below takes its pending token in a fork of its own. On a memory
    // shortfall this step takes N's tokens first and appends them (the prefill placed stays).
    if (seqs.empty() && plan.prefill.empty()) return Launch::kNotFed;  // nothing to launch
    // (No decode row: a step of prompts alone, launched ahead all the same.)
    if (seqs.empty() || tree_.AppendPending(seqs, /*allow_evict=*/true).ok()) {
      ahead_.patches.clear();
      for (kvcache::SeqId seq : seqs) {
        const int32_t feed = spec_of.at(seq);
        decode.push_back(engine::DecodeItem{.seq = seq, .write_kv = true, .sample = {},
                                            .length = 0, .feed = feed});
        ahead_.patches.emplace_back(seq, feed);
      }
    } else if (plan.prefill.empty()) {
      return Launch::kNotFed;  // nothing changed yet: the caller takes N's tokens and schedules
    } else {
      fed = false;
      owner.clear();
      ++stats_.fed_fallbacks;
      if (!CollectInflight()) return Launch::kLaunched;  // failed: FailAll ran
      begin = collected_clocks_.wall;  // the device waits from here
    }
  }
  // Decode appends (of tokens in hand): one batch so agreeing samples keep sharing their node.
  std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
  const std::span<const uint64_t> unfed =
      fed ? std::span<const uint64_t>() : std::span<const uint64_t>(plan.decode);
  for (uint64_t h : unfed) {
    Live& l = *by_handle[h];
    for (size_t i = 0; i < l.samples.size(); ++i) {
      if (l.samples[i].finished) continue;
      appends.emplace_back(l.samples[i].seq, l.samples[i].next_token);
      owner[l.samples[i].seq] = {&l, i};
    }
  }
  while (!appends.empty()) {
    auto placed = tree_.AppendBatch(appends, /*allow_evict=*/true);
    if (placed.ok()) {
      for (const kvcache::PlaceResult& p : *placed) {
        copies.insert(copies.end(), p.copies.begin(), p.copies.end());
        decode.push_back(engine::DecodeItem{.seq = p.seq, .write_kv = !p.new_slots.empty(), .sample = {}});
      }
      break;
    }
    // The policy's estimate fell short (e.g. this iteration's admissions used the cache):
    // preempt the least important decoding request and retry without it.
    std::vector<PolicyRequest> candidates;
    for (uint64_t h : plan.decode) {
      const Live* l = by_handle[h];
      if (l->state != RequestState::kDecoding) continue;
      candidates.push_back({.handle = h, .priority = l->req.priority, .arrival = l->arrival});
    }
    const uint64_t victim_handle = ChooseAppendVictim(candidates);
    Live* victim = victim_handle == 0 ? nullptr : by_handle[victim_handle];
    if (victim == nullptr) break;
    Log()->warn("[kv] decode appends failed ({}); preempting {}",
                std::string(placed.status().message()), victim->req.id);
    Preempt(*victim);
    std::erase_if(appends, [&](const auto& a) { return owner.at(a.first).first == victim; });
  }
  // Speculation: candidates after each decode row's token, verified by this step; they take
  // what the prefill left of the step's token budget.
  InFlight& f = fed ? ahead_ : inflight_;
  f.fed = fed;
  f.row_states.clear();
  f.item_node.clear();
  f.speculation_class = -1;
  f.speculated = false;
  if (options_.speculation != LoopOptions::Speculation::kOff && !decode.empty() &&
      static_cast<int>(decode.size()) <= options_.speculation_max_rows) {
    f.speculation_class = SpeculationGovernor::ClassOf(static_cast<int64_t>(decode.size()));
  }
  if (f.speculation_class >= 0 &&
      (!options_.speculation_adaptive || speculation_governor_.Speculate(f.speculation_class))) {
    int prefill_tokens = 0;
    for (const engine::PrefillItem& p : prefill) prefill_tokens += p.end - p.begin;
    PlaceCandidates(&owner, options_.prefill_token_budget - prefill_tokens, &decode, &f.item_node,
                    &copies);
    const int64_t candidates =
        std::count_if(f.item_node.begin(), f.item_node.end(), [](int32_t n) { return n > 0; });
    f.speculated = candidates > 0;
    stats_.max_step_candidates = std::max(stats_.max_step_candidates, candidates);
  }
  // Every decode row samples with its own request's parameters and state (candidate rows have
  // theirs already).
  for (engine::DecodeItem& d : decode) {
    if (d.sample.state != nullptr) continue;
    auto [l, k] = owner.at(d.seq);
    // A fed row samples as the state will be once step N's token is taken.
    BANYAN_CHECK(d.feed < 0 || l->req.constraint == nullptr) << "a constrained row was fed";
    d.sample = {.params = &l->req.params, .state = &l->samples[k].sampling,
                .step_ahead = d.feed >= 0 ? 1 : 0, .allowed = MaskFor(*l, k)};
  }
  f.owner = std::move(owner);
  f.logit_owners = std::move(logit_owners);
  f.decode_rows = static_cast<int64_t>(decode.size());
  f.prefill_tokens = 0;
  for (const engine::PrefillItem& p : prefill) f.prefill_tokens += p.end - p.begin;
  // A fed step that took N's tokens after all (hybrid) counts from N's tokens, as a step that
  // waited for them does; its host work before that counts as placing.
  const bool hybrid = begin != cycle_start;
  const ThreadClocks& from = hybrid ? collected_clocks_ : cycle;
  f.t_begin = begin;
  const Clock::time_point t_launch = Clock::now();
  f.take_seconds = hybrid ? 0 : Seconds(cycle_start, t_schedule);
  f.schedule_seconds = hybrid ? 0 : Seconds(t_schedule, t_place);
  f.place_seconds = Seconds(hybrid ? begin : t_place, t_launch);
  f.device_before = backend_->device_seconds();
  if (absl::Status run = runner_.Launch(copies, decode, prefill, &f.out); !run.ok()) {
    FailAll(run);
    return Launch::kLaunched;
  }
  f.active = true;
  const ThreadClocks launched = ThreadClocks::Now();
  if (fed) {
    // The device did not wait for this host work: it ran beside step N.
    ++stats_.fed_steps;
    stats_.fed_launch_seconds += Seconds(cycle_start, launched.wall);
    f.take_seconds = f.schedule_seconds = f.place_seconds = 0;
    f.launch_seconds = f.launch_cpu_seconds = f.backend_launch_seconds = 0;
    f.launch_context_switches = 0;
    return Launch::kLaunched;
  }
  f.launch_seconds = Seconds(begin, launched.wall);
  f.launch_cpu_seconds = launched.cpu_seconds - from.cpu_seconds;
  f.launch_context_switches = launched.context_switches - from.context_switches;
  f.backend_launch_seconds = f.out.forward_seconds;  // Collect adds its wait later
  return Launch::kLaunched;
}

}  // namespace banyan::scheduler
