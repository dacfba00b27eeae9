#include "server/http/generation.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/http_util.h"
#include "server/http/prompt.h"

namespace banyan::server::http {
namespace {

using Events = std::vector<std::pair<int, scheduler::TokenEvent>>;

std::string SseEvent(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

void FillUsage(const scheduler::Usage& u, AccessRecord* r) {
  r->prompt_tokens = u.prompt_tokens;
  r->cached_tokens = u.cached_prompt_tokens;
  r->completion_tokens = u.completion_tokens;
}

absl::Status NotReady() {
  return absl::UnavailableError("the server is not ready (loading or draining); retry later");
}

}  // namespace

void StreamGroup::Add(std::shared_ptr<scheduler::RequestStream> stream) {
  entries_.push_back({std::move(stream), false});
}

void StreamGroup::SetListener(const std::function<void()>& listener) {
  for (Entry& e : entries_) e.stream->SetListener(listener);
}

bool StreamGroup::Poll(Events* out) {
  std::vector<scheduler::TokenEvent> got;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.done) continue;
    // Read until nothing is left: a stream that finished after pushing its last events returns
    // those first and its end only on the next call, and will not announce anything again.
    for (;;) {
      got.clear();
      const bool more = e.stream->Read(&got, std::chrono::milliseconds(0));
      for (scheduler::TokenEvent& ev : got) {
        out->emplace_back(static_cast<int>(i) * n_ + ev.sample, std::move(ev));
      }
      if (!more) e.done = true;
      if (!more || got.empty()) break;
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
    sum.draft_tokens += u.draft_tokens;
    sum.accepted_draft_tokens += u.accepted_draft_tokens;
  }
  return sum;
}

GenerationJob::GenerationJob(int n, ResponseBuilder builder, std::shared_ptr<AccessRecord> record,
                             bool stream, bool include_usage)
    : group_(n),
      builder_(std::move(builder)),
      record_(std::move(record)),
      stream_(stream),
      include_usage_(include_usage) {}

GenerationJob::~GenerationJob() {
  group_.SetListener({});
  if (!group_.all_done()) {
    group_.CancelUnfinished();
    if (record_->note.empty()) record_->note = "not completed; cancelled";
  }
  if (complete_ && !delivered_ && record_->note.empty()) {
    record_->note = "answer not delivered";
  }
  if (group_.all_done()) {
    FillUsage(group_.usage(), record_.get());
  } else {
    // The scheduler has not reported usage yet: log what this side knows.
    record_->prompt_tokens = prompt_tokens_;
    record_->completion_tokens = tokens_seen_;
  }
  LogAccess(*record_);
}

void GenerationJob::Add(std::shared_ptr<scheduler::RequestStream> s, int64_t prompt_tokens) {
  prompt_tokens_ += prompt_tokens;
  group_.Add(std::move(s));
}

void GenerationJob::SetWaker(std::function<void()> wake) { group_.SetListener(wake); }

bool GenerationJob::PumpStream(std::string* out) {
  if (complete_) return true;
  if (!started_) {
    started_ = true;
    for (const Json& j : builder_.StartChunks()) *out += SseEvent(j);
  }
  Events events;
  const bool more = group_.Poll(&events);
  for (const auto& [choice, ev] : events) {
    tokens_seen_ += ev.token >= 0;
    Json chunk = builder_.Chunk(choice, ev);
    if (!chunk.is_null()) *out += SseEvent(chunk);
  }
  if (more) return false;
  absl::Status st = group_.status();
  if (st.ok() && !cut_.empty()) st = absl::UnavailableError(cut_);
  if (!st.ok()) {
    *out += SseEvent(ErrorJson(ErrorFromStatus(st)));
    record_->note = absl::StrCat("failed: ", st.message());
  } else if (include_usage_) {
    *out += SseEvent(builder_.UsageChunk(group_.usage()));
  }
  *out += "data: [DONE]\n\n";
  complete_ = true;
  slot_.Release();  // the work is done: a client that waits for this answer may send the next
  return true;
}

bool GenerationJob::PumpWhole(HttpResponse* res) {
  if (complete_) return true;
  Events events;
  const bool more = group_.Poll(&events);
  for (const auto& [choice, ev] : events) {
    tokens_seen_ += ev.token >= 0;
    builder_.Add(choice, ev);
  }
  if (more) return false;
  complete_ = true;
  slot_.Release();  // the work is done: a client that waits for this answer may send the next
  const scheduler::Usage usage = group_.usage();
  if (absl::Status s = group_.status(); !s.ok()) {
    SendStatus(*res, s);
    record_->note = std::string(s.message());
  } else {
    SendJson(*res, 200, builder_.Final(usage));
  }
  record_->status = res->status;
  return true;
}

void GenerationJob::ClientGone() {
  if (complete_) return;
  group_.CancelUnfinished();
  if (record_->note.empty()) record_->note = "client disconnected";
}

void GenerationJob::Cut(std::string_view why) {
  if (complete_ || !cut_.empty()) return;
  cut_ = std::string(why);
  group_.CancelUnfinished();
  record_->note = "cut: " + std::string(why);
}

namespace {

// Stage 4: each input checked against the model's limits (the context length needs the prompt's
// token count) and made a scheduler request of `tenant`'s. With several prompts, each request's
// id is `id`-i and an error names its prompt.
absl::StatusOr<std::vector<scheduler::Request>> BuildRequests(const ParsedGeneration& generation,
                                                              const Tenant& tenant,
                                                              const std::string& id,
                                                              const ServerContext& ctx) {
  const ModelLimits limits{.context_tokens = ctx.model_config->max_seq_len,
                           .vocab_size = ctx.tokenizer->vocab_size(),
                           .max_n = ctx.options.max_n};
  const size_t count = generation.inputs.size();
  std::vector<scheduler::Request> requests;
  for (size_t i = 0; i < count; ++i) {
    GenerationInput input = generation.inputs[i];
    input.tenant = tenant.name();
    absl::StatusOr<scheduler::Request> r =
        BuildRequest(std::move(input), limits, generation.default_max_tokens,
                     count == 1 ? id : absl::StrCat(id, "-", i));
    if (!r.ok()) {
      absl::Status s = r.status();
      if (count > 1) {
        s = absl::Status(s.code(), absl::StrCat("prompt ", i, ": ", s.message()));
        SetStatusParam(&s, StatusParam(r.status()));
        SetStatusCode(&s, StatusCode(r.status()));
      }
      return s;
    }
    r->tenant = tenant.name();
    r->tenant_kv_chunks = tenant.max_kv_chunks();
    requests.push_back(*std::move(r));
  }
  return requests;
}

}  // namespace

std::shared_ptr<GenerationJob> StartGeneration(ServerContext* ctx, Api api, const Tenant& tenant,
                                               const HttpRequest& req, HttpResponse* res,
                                               std::shared_ptr<AccessRecord> record) {
  record->id = MakeRequestId(api == Api::kChat ? "chatcmpl-" : "cmpl-");
  res->SetHeader("X-Request-Id", record->id);
  auto fail = [&](const absl::Status& s) -> std::shared_ptr<GenerationJob> {
    SendStatus(*res, s);
    record->status = res->status;
    record->note = std::string(s.message());
    return nullptr;
  };

  // Before parsing and tokenizing: a tenant at its limit costs nothing more.
  absl::StatusOr<TenantSlot> slot = TenantSlot::Acquire(tenant);
  if (!slot.ok()) {
    record->reject_reason = RejectReason::kTenantConcurrency;
    return fail(slot.status());
  }
  // 1. Parse: every field decoded and checked on its own (openai_request.h).
  absl::StatusOr<Json> body = ParseBody(req.body);
  if (!body.ok()) return fail(body.status());
  absl::StatusOr<ParsedRequest> parsed = ParseGenerationRequest(api, *body, req.body, *ctx);
  if (!parsed.ok()) return fail(parsed.status());
  // 2. Render: chat messages through the chat template (prompt.h).
  absl::StatusOr<std::vector<RenderedPrompt>> rendered = RenderPrompts(*parsed, *ctx);
  if (!rendered.ok()) return fail(rendered.status());
  // 3. Tokenize.
  const ParsedGeneration generation = TokenizePrompts(*std::move(parsed), *rendered, *ctx);
  if (ctx->ready != nullptr && !ctx->ready->load()) return fail(NotReady());
  // 4. Validate against the model's limits (server/common/validation.h).
  absl::StatusOr<std::vector<scheduler::Request>> requests =
      BuildRequests(generation, tenant, record->id, *ctx);
  if (!requests.ok()) return fail(requests.status());

  // 5. Submit: the job answers from the scheduler's streams.
  const int n = static_cast<int>(generation.inputs.front().n);
  record->status = 200;
  auto job = std::make_shared<GenerationJob>(
      n, ResponseBuilder(generation, record->id, UnixSeconds(), ctx->model_name, ctx->tokenizer, n),
      record, generation.stream, generation.include_usage);
  job->Hold(*std::move(slot));
  for (scheduler::Request& r : *requests) {
    const int64_t prompt_tokens = static_cast<int64_t>(r.prompt.size());
    absl::StatusOr<std::shared_ptr<scheduler::RequestStream>> stream =
        ctx->scheduler->Submit(std::move(r));
    if (!stream.ok()) {
      job->Cut("refused");
      record->deferred = true;  // the job's destructor logs it
      SendStatus(*res, stream.status());
      record->status = res->status;
      record->note = std::string(stream.status().message());
      return nullptr;
    }
    job->Add(*std::move(stream), prompt_tokens);
  }
  record->deferred = true;
  return job;
}

}  // namespace banyan::server::http
