#include "server/http/generation.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/http_util.h"
#include "server/http/openai_response.h"

namespace banyan::server::http {
namespace {

using Events = std::vector<std::pair<int, scheduler::TokenEvent>>;
using std::chrono::milliseconds;

// How long one streaming read waits before the provider returns to httplib (which checks for
// server shutdown between calls).
constexpr milliseconds kStreamPoll{250};
// With several prompts, the wait on one stream while the others are polled.
constexpr milliseconds kMultiPoll{5};

std::string SseEvent(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

void FillUsage(const scheduler::Usage& u, AccessRecord* r) {
  r->prompt_tokens = u.prompt_tokens;
  r->cached_tokens = u.cached_prompt_tokens;
  r->completion_tokens = u.completion_tokens;
}

// Everything one SSE response needs, shared by httplib's content provider and its releaser.
struct SseState {
  SseState(int n, ResponseBuilder b, std::shared_ptr<AccessRecord> r)
      : group(n), builder(std::move(b)), record(std::move(r)) {}

  // One call of httplib's content provider: write what is ready. false aborts the connection.
  bool Provide(httplib::DataSink& sink) {
    std::string out;
    if (!started) {
      started = true;
      for (const Json& j : builder.StartChunks()) out += SseEvent(j);
    }
    Events events;
    const bool more = group.Read(&events, kStreamPoll);
    for (const auto& [choice, ev] : events) {
      tokens_seen += ev.token >= 0;
      Json chunk = builder.Chunk(choice, ev);
      if (!chunk.is_null()) out += SseEvent(chunk);
    }
    if (!more) {
      absl::Status st = group.status();
      if (!st.ok()) {
        out += SseEvent(ErrorJson(ErrorFromStatus(st)));
        record->note = absl::StrCat("failed: ", st.message());
      } else if (include_usage) {
        out += SseEvent(builder.UsageChunk(group.usage()));
      }
      out += "data: [DONE]\n\n";
    }
    const auto now = std::chrono::steady_clock::now();
    if (out.empty() && now - last_write >= kKeepAliveInterval) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        record->note = "client disconnected";
        group.CancelUnfinished();
        return false;
      }
      last_write = now;
    }
    if (!more) {
      completed = true;
      sink.done();
    }
    return true;
  }

  // httplib tears the response down: cancel whatever still runs, then log the request.
  void Release() {
    if (released) return;
    released = true;
    if (!group.all_done()) {
      group.CancelUnfinished();
      if (record->note.empty()) record->note = "stream not completed; cancelled";
    }
    if (group.all_done()) {
      FillUsage(group.usage(), record.get());
    } else {
      // The scheduler has not reported usage yet: log what this side knows.
      record->prompt_tokens = prompt_tokens;
      record->completion_tokens = tokens_seen;
    }
    LogAccess(*record);
  }

  StreamGroup group;
  ResponseBuilder builder;
  std::shared_ptr<AccessRecord> record;
  bool include_usage = false;
  int64_t prompt_tokens = 0;  // over all prompts
  int64_t tokens_seen = 0;    // generated tokens read so far
  bool started = false;
  bool completed = false;
  bool released = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

absl::Status NotReady() {
  return absl::UnavailableError("the server is not ready (loading or draining); retry later");
}

}  // namespace

void StreamGroup::Add(std::shared_ptr<scheduler::RequestStream> stream) {
  entries_.push_back({std::move(stream), false});
}

bool StreamGroup::Read(Events* out, milliseconds timeout) {
  std::vector<scheduler::TokenEvent> got;
  auto drain = [&](size_t i, milliseconds t) {
    got.clear();
    if (!entries_[i].stream->Read(&got, t)) entries_[i].done = true;
    for (scheduler::TokenEvent& ev : got) {
      out->emplace_back(static_cast<int>(i) * n_ + ev.sample, std::move(ev));
    }
  };
  size_t active = 0, first_active = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].done && active++ == 0) first_active = i;
  }
  if (active == 0) return false;
  if (active == 1) {
    drain(first_active, timeout);
  } else {
    const size_t before = out->size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (!entries_[i].done) drain(i, milliseconds(0));
    }
    if (out->size() == before && !entries_[first_active].done) {
      drain(first_active, std::min(timeout, kMultiPoll));
    }
  }
  return !all_done();
}

void StreamGroup::CancelUnfinished() {
  for (Entry& e : entries_) {
    if (!e.done && !e.stream->finished()) e.stream->Cancel();
  }
}

bool StreamGroup::all_done() const {
  for (const Entry& e : entries_) {
    if (!e.done) return false;
  }
  return true;
}

absl::Status StreamGroup::status() const {
  for (const Entry& e : entries_) {
    if (e.done) {
      absl::Status s = e.stream->status();
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

scheduler::Usage StreamGroup::usage() const {
  scheduler::Usage sum;
  for (const Entry& e : entries_) {
    if (!e.stream->finished()) continue;
    scheduler::Usage u = e.stream->usage();
    sum.prompt_tokens += u.prompt_tokens;
    sum.cached_prompt_tokens += u.cached_prompt_tokens;
    sum.completion_tokens += u.completion_tokens;
  }
  return sum;
}

void HandleGeneration(ServerContext* ctx, Api api, const httplib::Request& req,
                      httplib::Response& res, std::shared_ptr<AccessRecord> record,
                      const std::atomic<bool>* stopping) {
  record->id = MakeRequestId(api == Api::kChat ? "chatcmpl-" : "cmpl-");
  res.set_header("X-Request-Id", record->id);
  auto fail = [&](const absl::Status& s) {
    SendStatus(res, s);
    record->status = res.status;
    record->note = std::string(s.message());
  };

  if (RejectOversizedBody(req, ctx->options.max_body_bytes, res)) {
    record->status = 413;
    return;
  }
  absl::StatusOr<Json> body = ParseBody(req.body);
  if (!body.ok()) return fail(body.status());
  absl::StatusOr<ParsedGeneration> parsed =
      api == Api::kChat ? ParseChatRequest(*body, *ctx) : ParseCompletionRequest(*body, *ctx);
  if (!parsed.ok()) return fail(parsed.status());
  if (ctx->ready != nullptr && !ctx->ready->load()) return fail(NotReady());

  const ModelLimits limits{.context_tokens = ctx->model_config->max_seq_len,
                           .vocab_size = ctx->tokenizer->vocab_size(),
                           .max_n = ctx->options.max_n};
  const int n = static_cast<int>(parsed->inputs.front().n);
  std::vector<scheduler::Request> requests;
  for (size_t i = 0; i < parsed->inputs.size(); ++i) {
    std::string sub_id = parsed->inputs.size() == 1 ? record->id : absl::StrCat(record->id, "-", i);
    absl::StatusOr<scheduler::Request> r =
        BuildRequest(parsed->inputs[i], limits, parsed->default_max_tokens, std::move(sub_id));
    if (!r.ok()) {
      absl::Status s = r.status();
      if (parsed->inputs.size() > 1) {
        s = absl::Status(s.code(), absl::StrCat("prompt ", i, ": ", s.message()));
        SetStatusParam(&s, StatusParam(r.status()));
        SetStatusCode(&s, StatusCode(r.status()));
      }
      return fail(s);
    }
    requests.push_back(*std::move(r));
  }

  auto state = std::make_shared<SseState>(
      n, ResponseBuilder(*parsed, record->id, UnixSeconds(), ctx->model_name, ctx->tokenizer, n),
      record);
  state->include_usage = parsed->include_usage;
  for (scheduler::Request& r : requests) {
    state->prompt_tokens += static_cast<int64_t>(r.prompt.size());
    absl::StatusOr<std::shared_ptr<scheduler::RequestStream>> stream =
        ctx->scheduler->Submit(std::move(r));
    if (!stream.ok()) {
      state->group.CancelUnfinished();
      return fail(stream.status());
    }
    state->group.Add(*std::move(stream));
  }

  if (!parsed->stream) {
    Events events;
    bool cancelled = false;
    while (state->group.Read(&events, milliseconds(250))) {
      for (const auto& [choice, ev] : events) state->builder.Add(choice, ev);
      events.clear();
      if (!cancelled && stopping != nullptr && stopping->load()) {
        // The front end is stopping: cut the request; the answer says "abort".
        state->group.CancelUnfinished();
        cancelled = true;
        record->note = "cut by shutdown";
      }
    }
    for (const auto& [choice, ev] : events) state->builder.Add(choice, ev);
    const scheduler::Usage usage = state->group.usage();
    FillUsage(usage, record.get());
    if (absl::Status s = state->group.status(); !s.ok()) return fail(s);
    SendJson(res, 200, state->builder.Final(usage));
    record->status = 200;
    return;
  }

  record->status = 200;
  record->deferred = true;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t /*offset*/, httplib::DataSink& sink) { return state->Provide(sink); },
      [state](bool /*success*/) { state->Release(); });
}

}  // namespace banyan::server::http
