#include "engine/step_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace banyan::engine {

StepRunner::StepRunner(Backend* backend, kvcache::PrefixTree* tree, AttentionMode mode)
    : backend_(backend),
      tree_(tree),
      plan_options_{.share = mode != AttentionMode::kPaged || backend->shared_prefix_plans()} {}

absl::Status StepRunner::Prepare(std::span<const kvcache::ChunkCopy> copies,
                                 std::span<const DecodeItem> decode,
                                 std::span<const PrefillItem> prefill, bool sample,
                                 StepBatch* batch_out, std::vector<SampleSpec>* specs_out,
                                 StepOutput* out) {
  if (absl::Status s = backend_->CopyChunks(copies); !s.ok()) return s;
  StepBatch& batch = *batch_out;
  std::vector<SampleSpec>& specs = *specs_out;
  out->decode_rows.clear();
  out->decode_items.clear();
  out->samples.clear();
  out->logits.clear();
  out->forward_seconds = 0;
  batch.prefill.clear();
  batch.plan = nullptr;
  specs.clear();
  if (decode.empty()) {
    batch.decode.clear();
  } else {
    // Rows in the tree's depth-first order; the candidate rows of one sequence adjacent, by
    // length (BuildAttentionPlan shares the context of adjacent rows).
    rank_.clear();
    rank_.reserve(decode.size());
    bool candidates = false;
    for (const DecodeItem& d : decode) {
      rank_[d.seq] = -1;  // the rank comes from the walk below
      candidates = candidates || d.length > 0;
    }
    int32_t next_rank = 0;
    for (kvcache::SeqId s : tree_->DfsOrder()) {
      auto it = rank_.find(s);
      if (it != rank_.end()) it->second = next_rank++;
    }
    if (static_cast<size_t>(next_rank) != rank_.size()) {
      return absl::InternalError("a decode sequence is not live in the prefix tree");
    }
    items_.clear();
    for (const DecodeItem& d : decode) items_.push_back(&d);
    auto length_of = [&](const DecodeItem* d) {
      return d->length > 0 ? d->length : tree_->Length(d->seq);
    };
    if (candidates) {
      std::stable_sort(items_.begin(), items_.end(), [&](const DecodeItem* a, const DecodeItem* b) {
        const int32_t ra = rank_.at(a->seq), rb = rank_.at(b->seq);
        return ra != rb ? ra < rb : length_of(a) < length_of(b);
      });
    } else {
      if (items_.size() != rank_.size()) {
        return absl::InternalError("a sequence appears twice among the decode rows");
      }
      std::sort(items_.begin(), items_.end(), [&](const DecodeItem* a, const DecodeItem* b) {
        return rank_.at(a->seq) < rank_.at(b->seq);
      });
    }
    out->decode_rows.reserve(items_.size());
    out->decode_items.reserve(items_.size());
    for (const DecodeItem* d : items_) {
      out->decode_rows.push_back(d->seq);
      out->decode_items.push_back(static_cast<int32_t>(d - decode.data()));
    }
    specs.reserve(decode.size() + prefill.size());
    if (candidates) {
      lengths_.clear();
      for (const DecodeItem* d : items_) {
        const int32_t len = length_of(d);
        if (len < 1 || len > tree_->Length(d->seq)) {
          return absl::InternalError(absl::StrCat("candidate row of length ", len, " in a ",
                                                  tree_->Length(d->seq), "-token sequence"));
        }
        lengths_.push_back(len);
      }
      plan_ = kvcache::BuildAttentionPlan(*tree_, out->decode_rows, lengths_, plan_options_);
      ++stats_.plan_builds;
    } else if (kvcache::PlanReusable(plan_, *tree_, out->decode_rows)) {
      kvcache::AdvanceLengths(plan_, *tree_);
      ++stats_.plan_reuses;
    } else {
      plan_ = kvcache::BuildAttentionPlan(*tree_, out->decode_rows, plan_options_);
      ++stats_.plan_builds;
    }
    batch.plan = &plan_;
    // Rows are written in place: resize keeps the vectors of the rows that already exist.
    batch.decode.resize(items_.size());
    for (size_t r = 0; r < items_.size(); ++r) {
      const DecodeItem& item = *items_[r];
      const kvcache::SeqId s = item.seq;
      SeqWork& w = batch.decode[r];
      if (item.length > 0) {
        w.pos0 = item.length - 1;
        w.tokens.assign(1, tree_->TokenAt(s, w.pos0));
        w.slots.assign(1, tree_->SlotAt(s, w.pos0));
      } else {
        w.pos0 = tree_->Length(s) - 1;
        // A fed row's token is read on the device; the pending one in the tree is no token id.
        w.tokens.assign(1, item.feed >= 0 ? 0 : tree_->LastToken(s));
        w.slots.assign(1, tree_->LastSlot(s));
      }
      w.write_kv.assign(1, static_cast<uint8_t>(item.write_kv ? 1 : 0));
      w.want_logits = true;
      SampleSpec spec = item.sample;
      spec.row = static_cast<int32_t>(r);
      specs.push_back(spec);
    }
  }
  int32_t logit_row = static_cast<int32_t>(batch.decode.size());
  for (const PrefillItem& p : prefill) {
    if (!tree_->IsLive(p.seq) || p.begin < 0 || p.end > tree_->Length(p.seq) || p.begin >= p.end) {
      return absl::InternalError(absl::StrCat("bad prefill range [", p.begin, ", ", p.end,
                                              ") for sequence ", p.seq));
    }
    std::vector<int32_t> tokens = tree_->Tokens(p.seq);
    SeqWork w;
    w.pos0 = p.begin;
    w.tokens.assign(tokens.begin() + p.begin, tokens.begin() + p.end);
    w.slots = tree_->Slots(p.seq, p.begin, p.end);
    w.write_kv.resize(w.tokens.size());
    for (int32_t i = p.begin; i < p.end; ++i) w.write_kv[i - p.begin] = i >= p.cached_end;
    w.want_logits = p.want_logits;
    if (p.want_logits) {
      for (SampleSpec spec : p.samples) {
        spec.row = logit_row;
        specs.push_back(spec);
      }
      ++logit_row;
    }
    kvcache::AttentionPlan row = kvcache::BuildAttentionPlan(
        *tree_, std::span<const kvcache::SeqId>(&p.seq, 1), {.share = false});
    // The row's spans cover the whole sequence; attention masks beyond each query's position.
    w.span_chunk = std::move(row.span_chunk);
    w.span_begin = std::move(row.span_begin);
    w.span_end = std::move(row.span_end);
    batch.prefill.push_back(std::move(w));
  }
  if (sample) {
    for (const SampleSpec& spec : specs) {
      if (spec.params == nullptr || spec.state == nullptr) {
        return absl::InternalError("a row to sample has no sampling parameters");
      }
    }
  }
  return absl::OkStatus();
}

namespace {
double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

absl::Status StepRunner::Run(std::span<const kvcache::ChunkCopy> copies,
                             std::span<const DecodeItem> decode,
                             std::span<const PrefillItem> prefill, StepOutput* out) {
  if (absl::Status s = Launch(copies, decode, prefill, out); !s.ok()) return s;
  return Collect(out);
}

absl::Status StepRunner::Launch(std::span<const kvcache::ChunkCopy> copies,
                                std::span<const DecodeItem> decode,
                                std::span<const PrefillItem> prefill, StepOutput* out,
                                bool late_sampling) {
  StepBatch& batch = batch_;
  std::vector<SampleSpec>& specs = specs_;
  if (late_pending_) {
    return absl::FailedPreconditionError("the step launched before awaits its sampling");
  }
  if (launched_.size() >= static_cast<size_t>(Backend::kMaxStepsInFlight)) {
    return absl::FailedPreconditionError("two steps are in flight: collect one first");
  }
  if (absl::Status s = Prepare(copies, decode, prefill, true, &batch, &specs, out); !s.ok()) {
    return s;
  }
  if (batch.decode.empty() && batch.prefill.empty()) {
    launched_.push_back(false);
    return absl::OkStatus();
  }
  // The feed in row order (rows are in DFS order, not the items').
  feed_.clear();
  for (size_t r = 0; r < items_.size() && r < batch.decode.size(); ++r) {
    if (items_[r]->feed < 0) continue;
    if (items_[r]->length > 0) return absl::InternalError("a candidate row cannot be fed");
    if (feed_.empty()) feed_.assign(batch.decode.size(), -1);
    feed_[r] = items_[r]->feed;
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = late_sampling
                       ? backend_->LaunchForward(batch, static_cast<int32_t>(specs.size()), feed_)
                       : backend_->LaunchSample(batch, specs, feed_);
  out->forward_seconds = SecondsSince(t0);
  if (!s.ok()) return s;
  launched_.push_back(true);
  if (late_sampling) {
    late_seqs_ = out->decode_rows;
    late_pending_ = true;
  }
  return s;
}

absl::Status StepRunner::FinishLaunch(
    absl::FunctionRef<void(kvcache::SeqId seq, SampleSpec* spec)> complete) {
  if (!late_pending_) return absl::FailedPreconditionError("no step awaits its sampling");
  late_pending_ = false;
  for (size_t r = 0; r < late_seqs_.size(); ++r) complete(late_seqs_[r], &specs_[r]);
  late_seqs_.clear();
  absl::Status s = backend_->LaunchSampling(specs_);
  if (!s.ok()) launched_.pop_back();  // the backend dropped the step
  return s;
}

absl::Status StepRunner::Collect(StepOutput* out) {
  if (launched_.empty()) return absl::FailedPreconditionError("no step was launched");
  const bool launched = launched_.front();
  launched_.pop_front();
  if (!launched) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = backend_->CollectSample(&out->samples);
  out->forward_seconds += SecondsSince(t0);
  return s;
}

absl::Status StepRunner::RunLogits(std::span<const kvcache::ChunkCopy> copies,
                                   std::span<const DecodeItem> decode,
                                   std::span<const PrefillItem> prefill, StepOutput* out) {
  StepBatch batch;
  std::vector<SampleSpec> specs;
  if (absl::Status s = Prepare(copies, decode, prefill, false, &batch, &specs, out); !s.ok()) {
    return s;
  }
  if (batch.decode.empty() && batch.prefill.empty()) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = backend_->Forward(batch, &out->logits);
  out->forward_seconds = SecondsSince(t0);
  return s;
}

}  // namespace banyan::engine
