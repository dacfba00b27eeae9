#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/step_runner.h"

namespace banyan::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// One live sample.
struct Live {
  kvcache::SeqId seq;
  int request;
  int sample;
  SequenceSamplingState sampling;
  int32_t next_token = -1;  // sampled, not yet in the tree
  bool finished = false;
};

}  // namespace

Generator::Generator(const ModelConfig& config, Backend* backend, kvcache::PrefixTree* tree,
                     GeneratorOptions options)
    : config_(config), backend_(backend), tree_(tree), options_(options) {}

absl::Status ValidateGeneration(const ModelConfig& config, std::span<const int32_t> prompt,
                                const SamplingParams& params, int n) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int32_t t : prompt) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", t, " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n must be >= 1, got ", n));
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", prompt.size(), " tokens) plus max_tokens (", params.max_tokens, ") is ",
        total, " tokens, more than the model's context of ", config.max_seq_len));
  }
  return Validate(params, config.vocab_size);
}

absl::Status Generator::Validate(const GenerationRequest& r) const {
  return ValidateGeneration(config_, r.prompt, r.params, r.n);
}

absl::StatusOr<std::vector<GenerationResult>> Generator::Run(
    std::span<const GenerationRequest> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = Validate(requests[i]); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("request ", i, ": ", s.message()));
    }
  }
  std::vector<GenerationResult> results(requests.size());
  std::vector<Live> live;
  auto release_all = [&]() {
    for (const Live& l : live) tree_->Release(l.seq).IgnoreError();
    live.clear();
  };
  auto note_memory = [&]() {
    kvcache::MemoryStats m = tree_->Stats();
    if (m.chunks_live >= stats_.peak.chunks_live) stats_.peak = m;
  };

  // ---- prefill: place every prompt, then one forward pass.
  StepRunner runner(backend_, tree_, options_.attention);
  StepOutput step_out;
  const auto t_prefill = Clock::now();
  std::vector<kvcache::SeqId> prompt_seqs;
  std::vector<kvcache::ChunkCopy> copies;
  std::vector<PrefillItem> prefill;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    auto placed = tree_->Insert(r.cache_namespace, r.prompt, /*allow_evict=*/true);
    if (!placed.ok()) {
      for (kvcache::SeqId s : prompt_seqs) tree_->Release(s).IgnoreError();
      return placed.status();
    }
    prompt_seqs.push_back(placed->seq);
    copies.insert(copies.end(), placed->copies.begin(), placed->copies.end());
    const int32_t len = static_cast<int32_t>(r.prompt.size());
    results[i].prompt_tokens = len;
    results[i].cached_prompt_tokens = placed->matched_tokens;
    // A fully cached prompt still needs its last token's logits: recompute it, keep its KV.
    const int32_t first = std::min(placed->matched_tokens, len - 1);
    prefill.push_back(PrefillItem{.seq = placed->seq, .begin = first, .end = len,
                                  .cached_end = placed->matched_tokens, .want_logits = true});
    stats_.prefill_tokens += len - first;
  }
  if (absl::Status s = runner.Run(copies, {}, prefill, &step_out); !s.ok()) {
    for (kvcache::SeqId s2 : prompt_seqs) tree_->Release(s2).IgnoreError();
    return s;
  }
  std::vector<float> logits = std::move(step_out.logits);
  stats_.prefill_seconds += Seconds(t_prefill);
  note_memory();

  const int vocab = config_.vocab_size;
  SamplerScratch scratch;
  // Samples `l` from `row_logits`; returns true when it finished.
  auto sample = [&](Live& l, std::span<const float> row_logits) -> absl::StatusOr<bool> {
    const GenerationRequest& r = requests[l.request];
    auto res = Sample(row_logits, r.params, l.sampling, &scratch);
    if (!res.ok()) return res.status();
    SampleOutput& out = results[l.request].samples[l.sample];
    l.sampling.Accept(res->token);
    const int generated = static_cast<int>(out.tokens.size()) + 1;
    out.finish = CheckStop(res->token, generated, r.params, config_.eos_id);
    if (out.finish != FinishReason::kStop) {
      out.tokens.push_back(res->token);
      out.logprobs.push_back(res->logprob);
    }
    l.next_token = res->token;
    return out.finish != FinishReason::kNone;
  };

  std::vector<Live> finished_now;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    results[i].samples.resize(r.n);
    auto ids = tree_->Fork(prompt_seqs[i], r.n);
    BANYAN_CHECK(ids.ok()) << ids.status();
    SequenceSamplingState base(AdmissionSeed(r.params), r.prompt, 0);
    for (int k = 0; k < r.n; ++k) {
      live.push_back(Live{(*ids)[k], static_cast<int>(i), k, base.Fork(k)});
    }
  }
  for (Live& l : live) {
    int row = l.request;  // prefill logits: one row per request
    auto done = sample(l, std::span<const float>(logits).subspan(static_cast<size_t>(row) * vocab,
                                                                 vocab));
    if (!done.ok()) {
      release_all();
      return done.status();
    }
    l.finished = *done;
  }
  auto drop_finished = [&]() {
    std::vector<Live> keep;
    for (Live& l : live) {
      if (l.finished) {
        tree_->Release(l.seq).IgnoreError();
      } else {
        keep.push_back(std::move(l));
      }
    }
    live = std::move(keep);
  };
  drop_finished();

  // ---- decode.
  while (!live.empty()) {
    const auto t_step = Clock::now();
    copies.clear();
    std::vector<DecodeItem> decode;
    std::unordered_map<kvcache::SeqId, Live*> by_seq;
    std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
    for (Live& l : live) {
      appends.emplace_back(l.seq, l.next_token);
      by_seq[l.seq] = &l;
    }
    auto placed = tree_->AppendBatch(appends, /*allow_evict=*/true);
    if (!placed.ok()) {
      release_all();
      return absl::ResourceExhaustedError(
          absl::StrCat("KV cache too small for this batch: ", placed.status().message()));
    }
    for (const kvcache::PlaceResult& p : *placed) {
      copies.insert(copies.end(), p.copies.begin(), p.copies.end());
      decode.push_back(DecodeItem{.seq = p.seq, .write_kv = !p.new_slots.empty()});
    }
    if (absl::Status s = runner.Run(copies, decode, {}, &step_out); !s.ok()) {
      release_all();
      return s;
    }
    note_memory();
    for (size_t i = 0; i < step_out.decode_rows.size(); ++i) {
      Live& l = *by_seq[step_out.decode_rows[i]];
      auto done = sample(l, std::span<const float>(step_out.logits).subspan(i * vocab, vocab));
      if (!done.ok()) {
        release_all();
        return done.status();
      }
      l.finished = *done;
    }
    drop_finished();
    ++stats_.steps;
    stats_.decode_tokens += static_cast<int64_t>(decode.size());
    stats_.decode_seconds += Seconds(t_step);
  }
  stats_.plan_builds += runner.stats().plan_builds;
  return results;
}

}  // namespace banyan::engine
