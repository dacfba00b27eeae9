// The output stage of the engine loop (output.h): tokens into their samples, events out to the
// streams, samples and requests ended, the lists kept in order.
#include "scheduler/loop/output.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/engine_loop.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/step_stats.h"
#include "scheduler/loop/step_timing.h"

namespace banyan::scheduler {

using Clock = std::chrono::steady_clock;

namespace {

// A free sample of a triggered constraint: its text so far ends with s->trigger_tail, then
// `token`. When a trigger completes (the one that begins first), the grammar holds from the byte
// after it, or from its first byte where the grammar reads the trigger; if what the grammar is
// fed does not fit it, the sample stays free (what it writes is then what it would have written
// without one).
void WatchTrigger(const text::grammar::TokenConstraint& c, int32_t token,
                  LiveRequest::Sample* s) {
  const text::grammar::Vocabulary& vocab = c.masker->vocab();
  if (token < 0 || token >= vocab.size()) return;
  std::string& tail = s->trigger_tail;
  tail.append(vocab.bytes(token));
  size_t at = std::string::npos;
  size_t longest = 0;
  const std::string* hit = nullptr;
  for (const std::string& t : c.triggers) {
    longest = std::max(longest, t.size());
    const size_t found = tail.find(t);
    if (found < at) {
      at = found;
      hit = &t;
    }
  }
  if (hit == nullptr) {
    // Keep what a trigger may have begun with: fewer bytes than the longest trigger.
    if (longest > 0 && tail.size() >= longest) tail.erase(0, tail.size() - (longest - 1));
    return;
  }
  const std::string fed = tail.substr(c.grammar_reads_trigger ? at : at + hit->size());
  tail.clear();
  s->matcher.emplace(c.grammar);
  if (!fed.empty() && !s->matcher->Accept(fed)) s->matcher.reset();
}

}  // namespace

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
    } else if (!live.req.constraint->triggers.empty() && !live.req.constraint->trigger_once &&
               s.matcher->CanEnd()) {
      // A recurring trigger's grammar (a tool call, a structural tag) that may end has: free again. A grammar
      // triggered once keeps its matcher, so its end is the end of sequence (MaskFor).
      s.matcher.reset();
    }
  } else if (live.req.constraint != nullptr && !config_.IsStop(res.token)) {
    WatchTrigger(*live.req.constraint, res.token, &s);
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

void EngineLoop::Emit(Live& live, TokenEvent event) {
  for (int k = 1; k < live.copies; ++k) {  // greedy n > 1: every choice
    TokenEvent copy = event;
    copy.sample = k;
    live.stream->Push(std::move(copy), /*announce=*/false);
  }
  live.stream->Push(std::move(event), /*announce=*/false);
  Touch(live);
}

void EngineLoop::Touch(Live& live) {
  if (live.touched_step == step_serial_) return;
  live.touched_step = step_serial_;
  touched_.push_back(live.stream);
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
  // The start-up profile's synthetic requests are not the operator's (one line sums them up).
  Log()->log(profile_run_ != nullptr ? spdlog::level::debug : spdlog::level::info,
              "request {} {}: prompt {} (cached {}), completion {}{}", live.req.id,
              !status.ok() ? "failed"
              : reason == FinishReason::kNone ? "finished"
                                              : std::string(FinishReasonName(reason)),
              sent.prompt_tokens, sent.cached_prompt_tokens, sent.completion_tokens,
              status.ok() ? "" : ": " + std::string(status.message()));
  live.stream->Finish(std::move(status), sent, /*announce=*/false);
  Touch(live);
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

void EngineLoop::PublishMetrics() {
  RecordGauges(tree_.Stats(), static_cast<int32_t>(running_.size()),
               static_cast<int32_t>(waiting_.size()), &stats_, &metrics_);
}

}  // namespace banyan::scheduler
