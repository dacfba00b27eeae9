// Decode throughput of the CUDA backend (tokens/s), the issue-5/6 benchmark (PERFORMANCE.md
// section 2).
//
//   gpu_decode_bench [--model PATH] [--shape NAME] [--batches 1,32,256] [--prefix 2048[,16384]]
//                    [--steps 32] [--modes tpp,paged,none] [--kv-gib 0] [--chunk 64]
//                    [--max-paged-tokens 2500000] [--graphs on|off|both] [--stagger] [--fp8] [--kv-fp8]
//                    [--batch-invariant]
//                    [--no-limit] [--copy-tbps 4.4] [--tensor-tflops 750] [--dry-run]
//                    [--fp32-activations] [--early-launch-rows 128] [--profile-step] [--pipeline]
//
// --model also takes banyand's dummy spelling, dummy:<shape>[:vocab=N] (model/model_bundle.h),
// so the daemon and this benchmark run the same shape and vocabulary.
// Without --model/--shape it runs the bundled stories260K and the llama-2-7b and llama-3-8b
// shapes (MHA 32 heads, ffn 11008, vocab 32000; GQA 32q/8kv, ffn 14336, vocab 128256; both dim
// 4096, 32 layers, head_dim 128) with dummy weights generated on the device. Per (model, prefix, mode, batch B): one prompt of `prefix`
// random tokens is prefilled, then B sequences = that prefix + one distinct token each (the
// prefix's KV is shared in the prefix tree, only the last token is prefilled), then `steps`
// greedy decode steps with device-side argmax (only token ids come back). Decode steps only are
// timed (wall clock around each synchronous step, host planning included; two more steps before
// them are warm-up). The prefix is capped at the model's context minus the steps (a dummy
// shape's context is extended to the longest prefix instead).
// Modes: tpp (the TPP kernel: the shared prefix read once per step for all rows), paged (every
// row reads its whole context; skipped when B x prefix > --max-paged-tokens, since it costs
// about B x prefix x 0.5 MiB of KV reads per 7B step), none (attention skipped, projections
// kept: the no-attention ceiling), and tpp variants "tpp:defer", "tpp:fused", "tpp:m64",
// "tpp:m128", "tpp:nopdl", "tpp:p2min<N>" (joined by '+') that change the TPP work plan's
// options (main table only). With nothing shared (B = 1) tpp runs the paged kernel. For tpp the
// table also gives the TPP work plan's host cost per decode step: full builds (shape changes)
// and span-end updates, each with its upload.
// The KV pool is sized for the largest batch of a prefix (--kv-gib caps it when > 0).
// A summary table gives tok/s per mode and the ratios tpp/none and tpp/paged.
// --fp8: the shapes' dummy projections quantized to FP8 per channel on the device and run as W8A8
// GEMMs (CudaBackendOptions::fp8_dummy; a loaded FP8 model needs no flag); the projection-only
// GEMM step of the limit is then the FP8 one (bench/gemm_ceiling.h: the backend's FP8 path).
// --kv-fp8: an FP8 KV cache (CudaBackendOptions::kv_fp8; the limit counts its bytes).
// --batch-invariant: banyand's --deterministic on (CudaBackendOptions::batch_invariant: the
// invariant GEMM and attention kernels), to see what it costs step by step.
// --fp8-gemv-rows N: FP8 products of at most N tokens as the GEMV of kernels/cuda/fp8_gemv.h
// (CudaBackendOptions::fp8_gemv_max_rows; 0: cuBLASLt for all; default: the backend's).
// --graphs: decode steps captured in CUDA graphs and replayed (on, the backend's default), run
// eagerly (off), or both on the same backend (off first). With graphs the table gives the
// captures in the timed steps and in the whole run (warm-up included; a TPP plan rebuild or a
// new row count captures again, on the key's second step: the first runs eagerly) and the mean
// host cost of one capture, stream capture plus cudaGraphExecUpdate / plus instantiation (the
// replay that follows is in ms/step), and the timed steps that ran eagerly because their key was
// new. --pipeline launches each decode step before the previous one's tokens are back
// (CudaBackend::LaunchSample, two steps in flight): the tree gets placeholder tokens and each row's
// real token is fed on the device from the step before, so the host's work per step (tree
// appends, plan, inputs) runs while the device computes; ms/step is then the timed steps' wall
// time over their number (one drain of the pipeline before them), not a sum of synchronous steps.
// --stagger gives row i i % chunk more prompt tokens, so rows start new chunks on different
// steps (with B >= chunk, some row does at every step: the TPP plan, and with it the graph key,
// changes at every step; the realistic serving case that the default's aligned rows avoid).
//
// The physical limit (PERFORMANCE.md section 2; the formula is bench/physical_limit.h): before a
// model's runs, the projection-only GEMM step is measured for each batch size
// (bench/gemm_ceiling.h: the step's cuBLAS GEMMs alone, CUDA graph, median of 20 replays) and
// printed as its own table. Each run then gets limit ms/step = that GEMM time + the shared
// prefix's attention at --tensor-tflops (max with its KV read once at --copy-tbps) + the rows'
// private KV at --copy-tbps, private tokens being the mean over the timed steps and rows of
// (context - prefix); "of limit" = limit ms/step / achieved ms/step (the same ratio in tok/s).
// The summary table repeats them per mode, and `none` against the GEMM-only step (its target in
// PERFORMANCE.md is 0.9). --no-limit skips the GEMM measurement (it allocates the shape's weights
// a second time, ~13-15 GiB for the 7B/8B shapes, and frees them before the runs).
// --fp32-activations: the QKV and gate/up GEMMs write fp32 (CudaBackendOptions::narrow_activations
// off), as before 2026-12-02.
// --early-launch-rows N: captured steps of at most N rows launch the layer kernels early
// (CudaBackendOptions::graph_early_launch_rows; default 128, 0: none, every kernel after the one
// before it has ended, as before 2026-12-03). The step-time table gives, beside the graph's
// kernel nodes, how many of its edges launch early.
// --profile-step: the first timed step of each run between cudaProfilerStart and
// cudaProfilerStop, for a profiler started with its capture off (bench/step_profile.sh: every
// kernel of one decode step, with --graphs off).
// --dry-run needs no GPU: it prints each run's KV-pool size, whether paged is skipped, and the
// limit's attention terms for the private tokens the run will have, then exits.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/gemm_ceiling.h"
#include "bench/physical_limit.h"
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/fp8_gemv.h"
#include "model/dummy_weights.h"
#include "model/model_io.h"
#include "model/model_bundle.h"
#include "kvcache/attention_plan.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"

namespace banyan {
namespace {

using engine::AttentionMode;
using engine::CudaBackend;

struct Options {
  std::vector<std::string> models;  // paths, or "shape:<name>"
  std::vector<int> batches = {1, 32, 256};
  std::vector<int> prefixes = {2048};
  int steps = 32;
  std::vector<std::string> modes = {"tpp", "paged", "none"};
  double kv_gib = 0;  // 0: as many chunks as the runs need
  int chunk = 64;
  int64_t max_paged_tokens = 2500000;
  bool stagger = false;  // row i's prompt gets i % chunk more tokens: rows start chunks apart
  bool fp32_activations = false;  // CudaBackendOptions::narrow_activations off
  bool fp8 = false;               // --fp8: dummy projections FP8 (CudaBackendOptions::fp8_dummy)
  bool kv_fp8 = false;            // --kv-fp8: an FP8 KV cache (CudaBackendOptions::kv_fp8)
  bool batch_invariant = false;   // --batch-invariant (CudaBackendOptions::batch_invariant)
  int fp8_gemv_rows = -1;         // --fp8-gemv-rows (CudaBackendOptions::fp8_gemv_max_rows; -1: its default)
  int early_launch_rows = -1;     // CudaBackendOptions::graph_early_launch_rows (-1: default)
  std::vector<bool> graphs = {true};
  bool limit = true;  // measure the projection-only GEMM step and print the physical limit
  bench::Rates rates;
  bool dry_run = false;
  bool profile_step = false;  // the first timed step inside cudaProfilerStart/Stop
  bool pipeline = false;      // decode steps launched ahead of their tokens (LaunchSample)
};

// Mean private tokens per row (context - prefix) over RunOne's timed steps: row i holds its own
// token (+ i % chunk with --stagger) after the prefix, and at decode step s (0-based, the first
// two are warm-up) it has appended s + 1 more: s + 2 (+ extra) for s = 2 .. steps + 1.
double ExpectedPrivateTokens(int steps, int batch, int chunk, bool stagger) {
  double extra = 0;
  for (int i = 0; stagger && i < batch; ++i) extra += i % chunk;
  return (steps + 7) / 2.0 + extra / batch;
}

bench::DecodeStepShape StepShape(const model::ModelConfig& cfg, int batch, int prefix,
                                 double private_tokens, int kv_elem_bytes) {
  // kv_elem_bytes 1: an FP8 cache, with an exponent byte per K / V row (kernels/kv_fp8.h)
  bench::DecodeStepShape s;
  s.batch = batch;
  s.layers = cfg.n_layers;
  s.q_heads = cfg.n_heads;
  s.kv_heads = cfg.n_kv_heads;
  s.head_dim = cfg.head_dim();
  s.kv_elem_bytes = kv_elem_bytes;
  s.kv_row_extra_bytes = kv_elem_bytes == 1 ? 1 : 0;
  s.shared_tokens = prefix;
  s.private_tokens_per_row = private_tokens;
  return s;
}

AttentionMode ModeOf(const std::string& m) {
  if (m == "none") return AttentionMode::kNone;
  if (m == "tpp" || m.rfind("tpp:", 0) == 0) return AttentionMode::kTpp;
  return AttentionMode::kPaged;
}

// "tpp:<knob>[+<knob>...]" runs tpp with TppOptions changed: defer (deferred merge, phase 2
// beside phase 1 on a side stream), fused (never deferred), m64 / m128 (phase-1 M tile), nopdl,
// p2min<N> (private tails split into pieces of at least N tokens).
bool TppVariant(const std::string& m, kernels::cuda::tpp::TppOptions* t) {
  if (m.rfind("tpp:", 0) != 0) return true;
  for (absl::string_view k : absl::StrSplit(m.substr(4), '+')) {
    if (k == "defer") {
      t->defer_merge = 1;
    } else if (k == "fused") {
      t->defer_merge = 0;
    } else if (k == "m64") {
      t->p1_block_m = 64;
    } else if (k == "m128") {
      t->p1_block_m = 128;
    } else if (k == "nopdl") {
      t->pdl = false;
    } else if (absl::ConsumePrefix(&k, "p2min")) {  // p2min<N>: TppOptions::p2_min_split_tokens
      int n = 0;
      if (!absl::SimpleAtoi(k, &n) || n < 1) return false;
      t->p2_min_split_tokens = n;
    } else {
      return false;
    }
  }
  return true;
}

std::string SourceDir() {
  if (const char* env = std::getenv("BANYAN_SOURCE_DIR")) return env;
  return BANYAN_SOURCE_DIR;
}

// One decode-or-prefill step over the tree, as StepRunner builds it, sampled greedily on the
// device as the engine loop samples (the sampling path with temperature 0: the argmax, the
// lowest id on ties), one spec per output row in row order. (Until 2026-12-05 the benchmark ran
// a separate greedy step API, an argmax kernel inside the step's graph: step times measured
// before then include that kernel instead of the sampler's.)
class Stepper {
 public:
  Stepper(CudaBackend* b, kvcache::PrefixTree* tree, AttentionMode mode)
      : b_(b), tree_(tree), share_(mode != AttentionMode::kPaged) {
    greedy_.temperature = 0;
  }

  absl::Status Prefill(kvcache::SeqId seq, int32_t begin, int32_t end, int32_t cached_end,
                       std::span<const kvcache::ChunkCopy> copies, std::vector<int32_t>* out) {
    return PrefillMany({{seq, begin, end, cached_end}}, copies, out);
  }

  struct Pre {
    kvcache::SeqId seq;
    int32_t begin, end, cached_end;
  };
  absl::Status PrefillMany(const std::vector<Pre>& items, std::span<const kvcache::ChunkCopy> copies,
                           std::vector<int32_t>* out) {
    if (absl::Status s = b_->CopyChunks(copies); !s.ok()) return s;
    engine::StepBatch batch;
    for (const Pre& p : items) {
      const std::vector<int32_t> toks = tree_->Tokens(p.seq);
      engine::SeqWork w;
      w.pos0 = p.begin;
      w.tokens.assign(toks.begin() + p.begin, toks.begin() + p.end);
      w.slots = tree_->Slots(p.seq, p.begin, p.end);
      for (int32_t i = p.begin; i < p.end; ++i) w.write_kv.push_back(i >= p.cached_end);
      auto row = kvcache::BuildAttentionPlan(*tree_, std::span(&p.seq, 1), {.share = false});
      w.span_chunk = row.span_chunk;
      w.span_begin = row.span_begin;
      w.span_end = row.span_end;
      batch.prefill.push_back(std::move(w));
    }
    return Tokens(b_->ForwardSample(batch, Specs(batch.prefill.size()), &results_), out);
  }

  // rows: the sequences, each having just appended one token (write flags and that token per
  // sequence; the token is passed in because PrefixTree::Tokens is O(length), which at B = 1024
  // and a 16K prefix would add ~10 ms of host copying per step).
  absl::Status Decode(const std::unordered_map<kvcache::SeqId, bool>& writes,
                      const std::unordered_map<kvcache::SeqId, int32_t>& last,
                      std::span<const kvcache::ChunkCopy> copies, std::vector<kvcache::SeqId>* rows,
                      std::vector<int32_t>* out) {
    if (absl::Status s = PlaceRows(writes, copies, rows); !s.ok()) return s;
    engine::StepBatch batch;
    batch.plan = &plan_;
    for (kvcache::SeqId s : *rows) {
      const int32_t len = tree_->Length(s);
      engine::SeqWork w;
      w.pos0 = len - 1;
      w.tokens = {last.at(s)};
      w.slots = tree_->Slots(s, len - 1, len);
      w.write_kv = {static_cast<uint8_t>(writes.at(s) ? 1 : 0)};
      batch.decode.push_back(std::move(w));
    }
    return Tokens(b_->ForwardSample(batch, Specs(batch.decode.size()), &results_), out);
  }

  // Pipelined decode step: every row's token is fed on the device from the row of the same
  // sequence in the step launched before (`prev_rows`, in its row order); the tree holds
  // placeholders. If two steps are in flight, the oldest is collected first (into *collected,
  // which is cleared when nothing was collected).
  absl::Status LaunchDecode(const std::unordered_map<kvcache::SeqId, bool>& writes,
                            std::span<const kvcache::ChunkCopy> copies,
                            const std::vector<kvcache::SeqId>& prev_rows,
                            std::vector<kvcache::SeqId>* rows, std::vector<int32_t>* collected) {
    if (absl::Status s = PlaceRows(writes, copies, rows); !s.ok()) return s;
    prev_index_.clear();
    for (size_t i = 0; i < prev_rows.size(); ++i) {
      prev_index_[prev_rows[i]] = static_cast<int32_t>(i);
    }
    batch_.plan = &plan_;
    batch_.decode.resize(rows->size());
    feed_.resize(rows->size());
    for (size_t r = 0; r < rows->size(); ++r) {
      const kvcache::SeqId s = (*rows)[r];
      const int32_t len = tree_->Length(s);
      engine::SeqWork& w = batch_.decode[r];
      w.pos0 = len - 1;
      w.tokens.assign(1, tree_->LastToken(s));
      w.slots.assign(1, tree_->LastSlot(s));
      w.write_kv.assign(1, static_cast<uint8_t>(writes.at(s) ? 1 : 0));
      const auto it = prev_index_.find(s);
      if (it == prev_index_.end()) return absl::InternalError("a row missing from the step before");
      feed_[r] = it->second;
    }
    collected->clear();
    if (b_->steps_in_flight() == 2) {
      if (absl::Status s = Collect(collected); !s.ok()) return s;
    }
    return b_->LaunchSample(batch_, Specs(batch_.decode.size()), feed_);
  }

  // The tokens of the oldest step launched ahead.
  absl::Status Collect(std::vector<int32_t>* tokens) {
    return Tokens(b_->CollectSample(&results_), tokens);
  }

 private:
  // A greedy spec per output row (every row of these steps wants its logits).
  std::span<const engine::SampleSpec> Specs(size_t rows) {
    specs_.resize(rows);
    for (size_t r = 0; r < rows; ++r) {
      specs_[r] = {.row = static_cast<int32_t>(r), .params = &greedy_, .state = &state_};
    }
    return specs_;
  }
  // The sampled tokens of a step that succeeded; a row with no distribution is an error.
  absl::Status Tokens(const absl::Status& step, std::vector<int32_t>* tokens) const {
    if (!step.ok()) return step;
    tokens->clear();
    for (const engine::SampleResult& r : results_) {
      if (r.token < 0) {
        return absl::InternalError("the model produced a row of logits with no number");
      }
      tokens->push_back(r.token);
    }
    return absl::OkStatus();
  }

  // The step's chunk copies, its rows (the sequences in `writes`, in DFS order) and their
  // attention plan (advanced when the shape allows, else rebuilt).
  absl::Status PlaceRows(const std::unordered_map<kvcache::SeqId, bool>& writes,
                         std::span<const kvcache::ChunkCopy> copies,
                         std::vector<kvcache::SeqId>* rows) {
    if (absl::Status s = b_->CopyChunks(copies); !s.ok()) return s;
    rows->clear();
    for (kvcache::SeqId s : tree_->DfsOrder()) {
      if (writes.contains(s)) rows->push_back(s);
    }
    if (kvcache::PlanReusable(plan_, *tree_, *rows)) {
      kvcache::AdvanceLengths(plan_, *tree_);
    } else {
      plan_ = kvcache::BuildAttentionPlan(*tree_, *rows, {.share = share_});
    }
    return absl::OkStatus();
  }

  CudaBackend* b_;
  kvcache::PrefixTree* tree_;
  bool share_;
  kvcache::AttentionPlan plan_;
  engine::StepBatch batch_;
  std::vector<int32_t> feed_;
  std::unordered_map<kvcache::SeqId, int32_t> prev_index_;
  engine::SamplingParams greedy_;
  const engine::SequenceSamplingState state_{0, {}};
  std::vector<engine::SampleSpec> specs_;
  std::vector<engine::SampleResult> results_;
};

struct Result {
  double ms_per_step = 0;
  double tokens_per_s = 0;
  // Stream time per timed step from the step's launch to its last kernel (the backend's CUDA
  // events); ms_per_step minus this is host work the device waited for.
  double device_ms_per_step = 0;
  engine::CudaAttentionStats attention;  // over the timed steps
  engine::cuda::DecodeGraphStats run_graph;  // over all decode steps, warm-up included
  double private_tokens = 0;  // per row, mean over the timed steps: context - prefix
};

absl::StatusOr<Result> RunOne(CudaBackend* backend, const model::ModelConfig& cfg,
                              AttentionMode mode, int B, int prefix, int steps, int chunk,
                              bool stagger, bool profile_step, bool pipeline) {
  auto pool = kvcache::ChunkPool::Create(backend->num_chunks(), chunk);
  if (!pool.ok()) return pool.status();
  kvcache::PrefixTree tree(&*pool);
  Stepper stepper(backend, &tree, mode);
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(prefix);
  for (auto& t : prompt) t = 3 + static_cast<int32_t>(rng() % (cfg.vocab_size - 3));
  prompt[0] = cfg.bos_id;
  std::vector<int32_t> out;
  // Prefill the shared prefix once (in pieces of at most 2048 tokens).
  auto placed = tree.Insert("", prompt, /*allow_evict=*/true);
  if (!placed.ok()) return placed.status();
  for (int32_t b = 0; b < prefix; b += 2048) {
    const int32_t e = std::min(prefix, b + 2048);
    if (absl::Status s = stepper.Prefill(placed->seq, b, e, 0, b == 0 ? placed->copies
                                                                      : std::vector<kvcache::ChunkCopy>{},
                                         &out);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = tree.Release(placed->seq); !s.ok()) return s;
  // B sequences: the prefix plus one distinct token each, prefilled together.
  std::vector<kvcache::SeqId> seqs;
  std::vector<Stepper::Pre> pre;
  std::vector<kvcache::ChunkCopy> copies;
  for (int i = 0; i < B; ++i) {
    std::vector<int32_t> p = prompt;
    p.push_back(3 + static_cast<int32_t>((i * 7919) % (cfg.vocab_size - 3)));
    for (int k = 0; stagger && k < i % chunk; ++k) {
      p.push_back(3 + static_cast<int32_t>((i * 31 + k * 17) % (cfg.vocab_size - 3)));
    }
    auto pl = tree.Insert("", p, /*allow_evict=*/true);  // earlier batches left their leaves cached
    if (!pl.ok()) return pl.status();
    seqs.push_back(pl->seq);
    copies.insert(copies.end(), pl->copies.begin(), pl->copies.end());
    const int32_t len = static_cast<int32_t>(p.size());
    pre.push_back({pl->seq, std::min(pl->matched_tokens, len - 1), len, pl->matched_tokens});
  }
  if (absl::Status s = stepper.PrefillMany(pre, copies, &out); !s.ok()) return s;
  std::unordered_map<kvcache::SeqId, int32_t> next;
  for (int i = 0; i < B; ++i) next[seqs[i]] = out[i];
  double timed = 0;
  int timed_steps = 0;
  double private_tokens = 0;  // summed over timed steps and rows
  std::vector<kvcache::SeqId> rows;
  backend->ResetAttentionStats();
  engine::cuda::DecodeGraphStats warm;
  double device_s0 = 0;
  // --pipeline: the rows of the step launched last (the prefill's first), and the timed span.
  std::vector<kvcache::SeqId> prev_rows = seqs;
  std::vector<int32_t> collected;
  auto drain = [&]() -> absl::Status {
    while (backend->steps_in_flight() > 0) {
      if (absl::Status s = stepper.Collect(&collected); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  std::chrono::steady_clock::time_point timed_begin;
  for (int step = 0; step < steps + 2; ++step) {
    if (step == 2) {
      if (absl::Status s = drain(); !s.ok()) return s;
      warm = backend->attention_stats().graph;
      backend->ResetAttentionStats();
      device_s0 = backend->device_seconds();
      timed_begin = std::chrono::steady_clock::now();
    }
    std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
    // Pipelined, the tree gets a placeholder: the real token is fed on the device.
    for (kvcache::SeqId s : seqs) appends.emplace_back(s, pipeline ? 3 : next[s]);
    const auto t0 = std::chrono::steady_clock::now();
    auto app = tree.AppendBatch(appends, /*allow_evict=*/true);
    if (!app.ok()) return app.status();
    std::unordered_map<kvcache::SeqId, bool> writes;
    copies.clear();
    for (const auto& p : *app) {
      writes[p.seq] = !p.new_slots.empty();
      copies.insert(copies.end(), p.copies.begin(), p.copies.end());
    }
    // --profile-step: the first timed step alone inside the profiler's capture range.
    const bool profiled = profile_step && step == 2;
    if (profiled) cudaProfilerStart();
    if (pipeline) {
      if (absl::Status s = stepper.LaunchDecode(writes, copies, prev_rows, &rows, &collected);
          !s.ok()) {
        return s;
      }
      prev_rows = rows;
    } else {
      if (absl::Status s = stepper.Decode(writes, next, copies, &rows, &out); !s.ok()) return s;
      for (size_t r = 0; r < rows.size(); ++r) next[rows[r]] = out[r];
    }
    if (profiled) cudaProfilerStop();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step >= 2) {
      if (!pipeline) timed += dt;
      ++timed_steps;
      for (kvcache::SeqId s : seqs) private_tokens += tree.Length(s) - prefix;
    }
  }
  if (pipeline) {
    if (absl::Status s = drain(); !s.ok()) return s;
    timed = std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_begin).count();
  }
  for (kvcache::SeqId s : seqs) tree.Release(s).IgnoreError();
  Result r;
  r.ms_per_step = 1000.0 * timed / timed_steps;
  r.tokens_per_s = B * timed_steps / timed;
  r.device_ms_per_step = 1000.0 * (backend->device_seconds() - device_s0) / timed_steps;
  r.private_tokens = private_tokens / (double{1} * timed_steps * B);
  r.attention = backend->attention_stats();
  r.run_graph = r.attention.graph;
  r.run_graph += warm;
  return r;
}

// (B, graphs) pairs: each batch with graphs off, then on, as asked for.
std::vector<std::pair<int, bool>> BatchesTimesGraphs(const std::vector<int>& batches,
                                                     const std::vector<bool>& graphs) {
  std::vector<std::pair<int, bool>> out;
  for (int B : batches) {
    for (bool g : graphs) out.emplace_back(B, g);
  }
  return out;
}

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The projection-only GEMM step of `cfg` for each batch size, printed as a table; 0 where it
// could not be measured (the limit is then left out of that batch's rows). With `fp8`, batches
// of at most kFp8GemvMaxRows rows are measured through cuBLASLt and through the FP8 GEMV
// (kernels/cuda/fp8_gemv.h), and the faster is the limit's term.
std::map<int, double> MeasureGemmSteps(const std::string& name, const model::ModelConfig& cfg,
                                       const std::vector<int>& batches, bool fp8) {
  std::map<int, double> gemm_s;
  std::printf("\n| model | B | projection-only GEMM ms/step%s | its tok/s | its TFLOP/s |%s\n"
              "|---|---|---|---|---|%s\n",
              fp8 ? " (FP8 projections, bf16 LM head)" : "",
              fp8 ? " cuBLASLt ms | FP8 GEMV ms |" : "", fp8 ? "---|---|" : "");
  for (int B : batches) {
    if (gemm_s.contains(B)) continue;
    auto t = bench::MeasureProjectionGemmSeconds(cfg, B, /*reps=*/20, fp8);
    if (!t.ok()) {
      std::printf("| %s | %d | error: %s | | |\n", name.c_str(), B,
                  std::string(t.status().message()).c_str());
      gemm_s[B] = 0;
      continue;
    }
    std::string paths;
    double best = *t;
    if (fp8) {
      absl::StatusOr<double> gemv = absl::UnavailableError("more rows than the GEMV takes");
      if (B <= banyan::kernels::cuda::kFp8GemvMaxRows) {
        gemv = bench::MeasureProjectionGemmSeconds(
            cfg, B, /*reps=*/20, true, static_cast<int>(banyan::kernels::cuda::kFp8GemvMaxRows));
      }
      if (gemv.ok()) best = std::min(best, *gemv);
      paths = " " + Fixed(*t * 1e3, 2) + " | " + (gemv.ok() ? Fixed(*gemv * 1e3, 2) : "-") + " |";
    }
    gemm_s[B] = best;
    const double flops = bench::ProjectionGemmFlops(B, cfg.n_layers, cfg.dim, cfg.n_heads,
                                                    cfg.n_kv_heads, cfg.head_dim(),
                                                    cfg.hidden_dim, cfg.vocab_size);
    std::printf("| %s | %d | %.2f | %.0f | %.0f |%s\n", name.c_str(), B, best * 1e3, B / best,
                flops / best / 1e12, paths.c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
  return gemm_s;
}

int Main(const Options& o) {
  if (o.dry_run) {
    std::printf("dry run: no device used; the limit's attention terms at copy %.2f TB/s, tensor "
                "%.0f TFLOP/s (the GEMM-only term is measured in a real run)\n\n",
                o.rates.copy_bytes_per_s / 1e12, o.rates.tensor_flops_per_s / 1e12);
    std::printf("| model | prefix | B | mode | KV chunks | KV GiB | private tokens/row (mean) | "
                "shared attention ms | private KV ms |\n|---|---|---|---|---|---|---|---|---|\n");
  } else {
    int dev = 0;
    cudaDeviceProp prop;
    if (!CudaBackend::DeviceAvailable() || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      std::fprintf(stderr, "gpu_decode_bench: no CUDA device\n");
      return 1;
    }
    std::printf("device: %s (%d SMs); physical limit at copy %.2f TB/s, tensor %.0f TFLOP/s%s\n",
                prop.name, prop.multiProcessorCount, o.rates.copy_bytes_per_s / 1e12,
                o.rates.tensor_flops_per_s / 1e12, o.limit ? "" : " (off: --no-limit)");
  }
  // (model, prefix, B, graphs) -> mode -> tok/s
  std::map<std::tuple<std::string, int, int, std::string>, std::map<std::string, double>> table;
  // (model, prefix, B, graphs) -> the physical limit's tok/s (the same for every mode)
  std::map<std::tuple<std::string, int, int, std::string>, double> limit_tps;
  // (model, prefix, B, graphs, mode) -> step ms, device ms and the backend's host parts
  struct StepTimes {
    double step_ms = 0, device_ms = 0;
    double inputs_us = 0, attention_us = 0, launch_us = 0;  // per step
    double graph_call_us = 0;  // of launch_us: the cudaGraphLaunch call
    double patches = 0;        // attention-node updates per step
    int64_t nodes = 0;         // kernel nodes of the step's graph
    int64_t early = 0;         // of its edges, those launched early
  };
  std::map<std::tuple<std::string, int, int, std::string, std::string>, StepTimes> step_device;
  // (model, B) -> the projection-only GEMM step's tok/s
  std::map<std::pair<std::string, int>, double> gemm_tps;
  int failures = 0;
  for (const std::string& m : o.models) {
    const bool dummy = m.rfind("shape:", 0) == 0 || model::IsDummyModel(m);
    model::ModelConfig cfg;
    std::unique_ptr<model::ModelWeights> weights;
    if (dummy) {
      // "shape:<name>", or banyand's spelling "dummy:<name>[:vocab=N]..." (model_bundle.h).
      auto c = model::ShapeOrDummyConfig(model::IsDummyModel(m) ? m : m.substr(6));
      if (!c.ok()) {
        std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
        return 1;
      }
      cfg = *c;
      // Dummy shapes are throughput stand-ins: let them take the longest prefix asked for (as
      // CodeLlama-7B, the 7B shape with a 16K context, does in the Hydragen table).
      const int longest = *std::max_element(o.prefixes.begin(), o.prefixes.end()) + o.steps + 8;
      if (cfg.max_seq_len < longest) {
        std::printf("(%s: context extended from %d to %d tokens)\n", m.substr(6).c_str(),
                    cfg.max_seq_len, longest);
        cfg.max_seq_len = longest;
      }
    } else {
      auto w = model::LoadModel(m);
      if (!w.ok()) {
        std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
        return 1;
      }
      weights = std::make_unique<model::ModelWeights>(std::move(*w));
      cfg = weights->config;
    }
    const std::string name = dummy ? m.substr(6) + " (dummy)" : m.substr(m.find_last_of('/') + 1);
    std::map<int, double> gemm_s;
    if (o.limit && !o.dry_run) {
      gemm_s = MeasureGemmSteps(name, cfg, o.batches, o.fp8);
      for (const auto& [B, t] : gemm_s) {
        if (t > 0) gemm_tps[{name, B}] = B / t;
      }
    }
    if (!o.dry_run) {
      std::printf(
          "| model | prefix | B | mode | ms/step | decode tok/s | TPP plan: builds / updates | "
          "build us (upload B) | update us (upload B) | graphs | captures (timed / run) | "
          "capture ms | eager steps, new key (timed) | limit ms/step | "
          "of limit |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (int want_prefix : o.prefixes) {
      const int prefix = std::max(1, std::min(want_prefix, cfg.max_seq_len - o.steps - 8));
      for (const std::string& mode_name : o.modes) {
        const AttentionMode mode = ModeOf(mode_name);
        std::vector<int> batches;
        for (int B : o.batches) {
          if (mode == AttentionMode::kPaged && int64_t{B} * prefix > o.max_paged_tokens) {
            std::printf("| %s | %d | %d | %s | skipped (B x prefix > %lld) | | | |%s\n",
                        name.c_str(), prefix, B, mode_name.c_str(),
                        static_cast<long long>(o.max_paged_tokens),
                        o.dry_run ? "" : " | | | | | | |");
            continue;
          }
          batches.push_back(B);
        }
        if (batches.empty()) continue;
        engine::CudaBackendOptions opt;
        opt.chunk_size = o.chunk;
        opt.attention = mode;
        opt.narrow_activations = !o.fp32_activations;
        opt.fp8_dummy = o.fp8;
        if (o.fp8_gemv_rows >= 0) opt.fp8_gemv_max_rows = o.fp8_gemv_rows;
        opt.kv_fp8 = o.kv_fp8;
        opt.batch_invariant = o.batch_invariant;
        if (o.early_launch_rows >= 0) opt.graph_early_launch_rows = o.early_launch_rows;
        if (!TppVariant(mode_name, &opt.tpp)) {
          std::fprintf(stderr, "unknown tpp variant in %s\n", mode_name.c_str());
          return 2;
        }
        // Chunks the largest batch needs: the prefix once, then per row a leaf that starts in
        // (a copy of) the prefix's last chunk when the prefix ends inside one, and holds the
        // row's own token plus steps + 2 decoded tokens; plus a little slack.
        const int64_t per_chunk = CudaBackend::ChunkBytes(cfg, o.chunk, opt.dtype, o.kv_fp8);
        const int64_t max_b = *std::max_element(batches.begin(), batches.end());
        const int64_t leaf_tokens = prefix % o.chunk + o.steps + 3 + (o.stagger ? o.chunk : 0);
        const int64_t needed = (int64_t{prefix} + o.chunk - 1) / o.chunk +
                               max_b * ((leaf_tokens + o.chunk - 1) / o.chunk);
        // Slack of one chunk per row: the first append after a one-token leaf is bounded by a
        // chunk per row (PrefixTree::AppendBatch's order-proof reservation).
        int64_t chunks = needed + max_b + 8;
        if (o.kv_gib > 0) {
          chunks = std::min(chunks, static_cast<int64_t>(o.kv_gib * (1 << 30)) / per_chunk);
        }
        opt.num_chunks = static_cast<int32_t>(chunks);
        const int kv_elem_bytes =
            o.kv_fp8 ? 1 : static_cast<int>(kernels::cuda::DTypeBytes(opt.dtype));
        if (o.dry_run) {
          for (int B : batches) {
            const double priv = ExpectedPrivateTokens(o.steps, B, o.chunk, o.stagger);
            const bench::DecodeStepLimit l = bench::PhysicalDecodeStepLimit(
                0, StepShape(cfg, B, prefix, priv, kv_elem_bytes), o.rates);
            std::printf("| %s | %d | %d | %s | %lld | %.1f | %.2f | %.2f | %.2f |\n", name.c_str(),
                        prefix, B, mode_name.c_str(), static_cast<long long>(chunks),
                        static_cast<double>(chunks) * per_chunk / (1 << 30), priv,
                        l.shared_s * 1e3, l.private_s * 1e3);
          }
          continue;
        }
        auto backend = dummy ? CudaBackend::CreateDummy(cfg, 1234, opt)
                             : CudaBackend::Create(weights.get(), opt);
        if (!backend.ok()) {
          std::printf("| %s | %d | - | %s | error: %s | | | | | | | | | | |\n", name.c_str(), prefix,
                      mode_name.c_str(), std::string(backend.status().message()).c_str());
          ++failures;
          continue;
        }
        for (const auto& [B, graphs] : BatchesTimesGraphs(batches, o.graphs)) {
          (*backend)->SetCudaGraphs(graphs);
          const std::string on = graphs ? "on" : "off";
          auto r = RunOne(backend->get(), cfg, mode, B, prefix, o.steps, o.chunk, o.stagger,
                          o.profile_step, o.pipeline);
          if (!r.ok()) {
            std::printf("| %s | %d | %d | %s | error: %s | | | | | %s | | | | | |\n", name.c_str(), prefix,
                        B, mode_name.c_str(), std::string(r.status().message()).c_str(),
                        on.c_str());
            std::fflush(stdout);
            ++failures;
            continue;
          }
          const engine::CudaAttentionStats& a = r->attention;
          std::string plan = "-", build = "-", update = "-";
          if (a.tpp_steps > 0) {
            plan = std::to_string(a.tpp_plan_builds) + " / " + std::to_string(a.tpp_plan_updates);
            char buf[96];
            if (a.tpp_plan_builds > 0) {
              std::snprintf(buf, sizeof(buf), "%.1f (%lld)", a.build_host_us / a.tpp_plan_builds,
                            static_cast<long long>(a.build_upload_bytes / a.tpp_plan_builds));
              build = buf;
            }
            if (a.tpp_plan_updates > 0) {
              std::snprintf(buf, sizeof(buf), "%.2f (%lld)", a.update_host_us / a.tpp_plan_updates,
                            static_cast<long long>(a.update_upload_bytes / a.tpp_plan_updates));
              update = buf;
            }
          }
          std::string captures = "-", capture_ms = "-", unstable = "-";
          const engine::cuda::DecodeGraphStats& g = r->run_graph;
          if (g.fallbacks > 0) {
            captures = "failed: " + (*backend)->graph_error();
          } else if (g.steps > 0) {
            captures = std::to_string(a.graph.captures) + " / " + std::to_string(g.captures);
            auto ms = [](double us, int64_t n) {
              if (n == 0) return std::string("-");
              char buf[32];
              std::snprintf(buf, sizeof(buf), "%.2f", us / n / 1000);
              return std::string(buf);
            };
            capture_ms = ms(g.capture_host_us, g.captures);
            unstable = std::to_string(a.graph.unstable);
          }
          std::string limit_ms = "-", of_limit = "-";
          if (gemm_s[B] > 0) {
            const double expected = ExpectedPrivateTokens(o.steps, B, o.chunk, o.stagger);
            if (std::abs(r->private_tokens - expected) > 1e-6) {
              std::fprintf(stderr, "gpu_decode_bench: %s B=%d: %.3f private tokens per row, "
                           "expected %.3f (ExpectedPrivateTokens is out of date)\n",
                           name.c_str(), B, r->private_tokens, expected);
            }
            const bench::DecodeStepLimit l = bench::PhysicalDecodeStepLimit(
                gemm_s[B], StepShape(cfg, B, prefix, r->private_tokens, kv_elem_bytes), o.rates);
            limit_ms = Fixed(l.seconds() * 1e3, 2);
            of_limit = Fixed(l.seconds() * 1e3 / r->ms_per_step, 2);
            limit_tps[{name, prefix, B, on}] = l.tokens_per_s(B);
          }
          std::printf(
              "| %s | %d | %d | %s | %.2f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
              name.c_str(), prefix, B, mode_name.c_str(), r->ms_per_step, r->tokens_per_s,
              plan.c_str(), build.c_str(), update.c_str(), on.c_str(), captures.c_str(),
              capture_ms.c_str(), unstable.c_str(), limit_ms.c_str(), of_limit.c_str());
          std::fflush(stdout);
          table[{name, prefix, B, on}][mode_name] = r->tokens_per_s;
          const engine::CudaAttentionStats& at = r->attention;
          const double per = at.host_steps > 0 ? 1.0 / static_cast<double>(at.host_steps) : 0.0;
          step_device[{name, prefix, B, on, mode_name}] = {
              r->ms_per_step, r->device_ms_per_step, at.inputs_host_us * per,
              at.attention_host_us * per, at.launch_host_us * per,
              at.graph.launch_call_us * per, static_cast<double>(at.graph.patches) * per,
              at.graph.kernel_nodes, at.graph.early_edges};
        }
      }
    }
  }
  if (o.dry_run) return 0;
  // Where each step's time went: the device's part from the launch to the last kernel, the
  // rest host work the device waited for (the benchmark's steps are synchronous). Printed
  // before the summary, which scripts take as the last table.
  // The backend's share of the host time: its inputs, the attention work (graph steps) and the
  // launch; the rest is the benchmark's own (prefix-tree appends, the attention plan) and the
  // wait for the tokens.
  std::printf("\n| model | prefix | B | graphs | mode | step ms | device ms | host ms (step - "
              "device) | device / step | backend host us per step: inputs / attention / launch "
              "(graph call) | node updates per step | graph kernel nodes (edges launched early) "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [key, v] : step_device) {
    const auto& [model, prefix, B, on, mode] = key;
    std::printf("| %s | %d | %d | %s | %s | %.2f | %.2f | %.2f | %s | %.0f / %.0f / %.0f (%.0f) "
                "| %.2f | %lld (%lld) |\n",
                model.c_str(), prefix, B, on.c_str(), mode.c_str(), v.step_ms, v.device_ms,
                v.step_ms - v.device_ms,
                v.step_ms > 0 ? Fixed(v.device_ms / v.step_ms, 3).c_str() : "-", v.inputs_us,
                v.attention_us, v.launch_us, v.graph_call_us, v.patches,
                static_cast<long long>(v.nodes), static_cast<long long>(v.early));
  }
  std::printf("\n| model | prefix | B | graphs | tpp tok/s | paged tok/s | none tok/s | tpp/none | "
              "tpp/paged | limit tok/s | tpp/limit | paged/limit | none/limit | "
              "none/GEMM-only |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [key, key_modes] : table) {
    const auto& modes = key_modes;  // a lambda cannot capture a structured binding in clang 15
    auto get = [&](const char* mode) {
      auto it = modes.find(mode);
      return it == modes.end() ? 0.0 : it->second;
    };
    auto cell = [](double v) { return v > 0 ? std::to_string(static_cast<long long>(v + 0.5)) : std::string("-"); };
    auto ratio = [](double a, double b) {
      if (a <= 0 || b <= 0) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f", a / b);
      return std::string(buf);
    };
    const double t = get("tpp"), p = get("paged"), n = get("none");
    const auto lim = limit_tps.find(key);
    const double l = lim == limit_tps.end() ? 0.0 : lim->second;
    const auto gemm = gemm_tps.find({std::get<0>(key), std::get<2>(key)});
    const double g = gemm == gemm_tps.end() ? 0.0 : gemm->second;
    std::printf("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                std::get<0>(key).c_str(), std::get<1>(key), std::get<2>(key),
                std::get<3>(key).c_str(), cell(t).c_str(), cell(p).c_str(), cell(n).c_str(),
                ratio(t, n).c_str(), ratio(t, p).c_str(), cell(l).c_str(), ratio(t, l).c_str(),
                ratio(p, l).c_str(), ratio(n, l).c_str(), ratio(n, g).c_str());
  }
  if (failures > 0) {
    std::fprintf(stderr, "gpu_decode_bench: %d case(s) failed\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) {
  banyan::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") {
      o.models.push_back(value());
    } else if (a == "--shape") {
      o.models.push_back("shape:" + value());
    } else if (a == "--batches") {
      o.batches.clear();
      for (absl::string_view s : absl::StrSplit(value(), ',')) {
        int b = 0;
        if (!absl::SimpleAtoi(s, &b) || b < 1) {
          std::fprintf(stderr, "bad batch size\n");
          return 2;
        }
        o.batches.push_back(b);
      }
    } else if (a == "--prefix") {
      o.prefixes.clear();
      for (absl::string_view s : absl::StrSplit(value(), ',')) {
        int p = 0;
        if (!absl::SimpleAtoi(s, &p) || p < 1) {
          std::fprintf(stderr, "bad prefix length\n");
          return 2;
        }
        o.prefixes.push_back(p);
      }
    } else if (a == "--max-paged-tokens") {
      // (B x prefix above which paged is skipped)
      o.max_paged_tokens = std::atoll(value().c_str());
    } else if (a == "--steps") {
      o.steps = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--modes") {
      o.modes = absl::StrSplit(value(), ',');
    } else if (a == "--kv-gib") {
      o.kv_gib = std::atof(value().c_str());
    } else if (a == "--chunk") {
      o.chunk = std::atoi(value().c_str());
    } else if (a == "--stagger") {
      o.stagger = true;
    } else if (a == "--pipeline") {
      o.pipeline = true;
    } else if (a == "--fp32-activations") {
      o.fp32_activations = true;
    } else if (a == "--kv-fp8") {
      o.kv_fp8 = true;
    } else if (a == "--batch-invariant") {
      o.batch_invariant = true;
    } else if (a == "--fp8") {
      o.fp8 = true;
    } else if (a == "--fp8-gemv-rows") {
      if (!absl::SimpleAtoi(value(), &o.fp8_gemv_rows) || o.fp8_gemv_rows < 0 ||
          o.fp8_gemv_rows > banyan::kernels::cuda::kFp8GemvMaxRows) {
        std::fprintf(stderr, "--fp8-gemv-rows takes 0 to %d\n",
                     static_cast<int>(banyan::kernels::cuda::kFp8GemvMaxRows));
        return 2;
      }
    } else if (a == "--early-launch-rows") {
      if (!absl::SimpleAtoi(value(), &o.early_launch_rows) || o.early_launch_rows < 0) {
        std::fprintf(stderr, "--early-launch-rows takes a row count (0: none)\n");
        return 2;
      }
    } else if (a == "--no-limit") {
      o.limit = false;
    } else if (a == "--profile-step") {
      o.profile_step = true;
    } else if (a == "--dry-run") {
      o.dry_run = true;
    } else if (a == "--copy-tbps" || a == "--tensor-tflops") {
      double v = 0;
      if (!absl::SimpleAtod(value(), &v) || v <= 0) {
        std::fprintf(stderr, "%s takes a positive number\n", a.c_str());
        return 2;
      }
      (a == "--copy-tbps" ? o.rates.copy_bytes_per_s : o.rates.tensor_flops_per_s) = v * 1e12;
    } else if (a == "--graphs") {
      const std::string g = value();
      if (g == "on") {
        o.graphs = {true};
      } else if (g == "off") {
        o.graphs = {false};
      } else if (g == "both") {
        o.graphs = {false, true};
      } else {
        std::fprintf(stderr, "--graphs takes on, off or both\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gpu_decode_bench [--model PATH] [--shape NAME] [--batches 1,32,256] "
                   "[--prefix 2048[,16384]] [--steps 32] [--modes tpp,paged,none] [--kv-gib 0] "
                   "[--chunk 64] [--max-paged-tokens 2500000] [--graphs on|off|both] [--stagger] [--pipeline] [--fp8] [--fp8-gemv-rows 0] "
                   "[--no-limit] [--copy-tbps 4.4] [--tensor-tflops 750] [--dry-run] [--early-launch-rows 128]\n");
      return 2;
    }
  }
  if (o.models.empty()) {
    o.models = {banyan::SourceDir() + "/models/stories260K/stories260K.bin",
                "shape:llama-2-7b-shape", "shape:llama-3-8b-shape"};
  }
  return banyan::Main(o);
}
