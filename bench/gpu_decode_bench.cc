// Decode throughput of the CUDA backend (tokens/s), the issue-5 benchmark.
//
//   gpu_decode_bench [--model PATH] [--shape NAME] [--batches 1,32,256] [--prefix 2048]
//                    [--steps 32] [--modes paged,none] [--kv-gib 24] [--chunk 64]
//
// Without --model/--shape it runs the bundled stories260K and the llama-2-7b shape with dummy
// weights generated on the device. Per (model, mode, batch B): one prompt of `prefix` random
// tokens is prefilled, then B sequences = that prefix + one distinct token each (the prefix's
// KV is shared in the prefix tree, only the last token is prefilled), then `steps` greedy decode
// steps with device-side argmax (only token ids come back). Decode steps only are timed (wall
// clock around each synchronous step, the first two steps are warm-up). The prefix is capped
// at the model's context minus the steps. Modes: paged (every row reads its whole context), none
// (attention skipped, projections kept: the no-attention ceiling); tpp runs the paged kernel
// over the TPP plan until the TPP kernel is wired in.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model/dummy_weights.h"
#include "engine/model/model_io.h"
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
  int prefix = 2048;
  int steps = 32;
  std::vector<std::string> modes = {"paged", "none"};
  double kv_gib = 24;
  int chunk = 64;
};

AttentionMode ModeOf(const std::string& m) {
  if (m == "none") return AttentionMode::kNone;
  if (m == "tpp") return AttentionMode::kTpp;
  return AttentionMode::kPaged;
}

std::string SourceDir() {
  if (const char* env = std::getenv("BANYAN_SOURCE_DIR")) return env;
  return BANYAN_SOURCE_DIR;
}

// One decode-or-prefill step over the tree, as StepRunner builds it, with device greedy.
class Stepper {
 public:
  Stepper(CudaBackend* b, kvcache::PrefixTree* tree, AttentionMode mode)
      : b_(b), tree_(tree), share_(mode != AttentionMode::kPaged) {}

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
    return b_->ForwardGreedy(batch, out);
  }

  // rows: the sequences, each having just appended one token (write flags per sequence).
  absl::Status Decode(const std::unordered_map<kvcache::SeqId, bool>& writes,
                      std::span<const kvcache::ChunkCopy> copies, std::vector<kvcache::SeqId>* rows,
                      std::vector<int32_t>* out) {
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
    engine::StepBatch batch;
    batch.plan = &plan_;
    for (kvcache::SeqId s : *rows) {
      const int32_t len = tree_->Length(s);
      engine::SeqWork w;
      w.pos0 = len - 1;
      w.tokens = {tree_->Tokens(s).back()};
      w.slots = tree_->Slots(s, len - 1, len);
      w.write_kv = {static_cast<uint8_t>(writes.at(s) ? 1 : 0)};
      batch.decode.push_back(std::move(w));
    }
    return b_->ForwardGreedy(batch, out);
  }

 private:
  CudaBackend* b_;
  kvcache::PrefixTree* tree_;
  bool share_;
  kvcache::AttentionPlan plan_;
};

struct Result {
  double ms_per_step = 0;
  double tokens_per_s = 0;
};

absl::StatusOr<Result> RunOne(CudaBackend* backend, const engine::ModelConfig& cfg,
                              AttentionMode mode, int B, int prefix, int steps, int chunk) {
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
  auto placed = tree.Insert("", prompt);
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
    auto pl = tree.Insert("", p);
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
  std::vector<kvcache::SeqId> rows;
  for (int step = 0; step < steps + 2; ++step) {
    std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
    for (kvcache::SeqId s : seqs) appends.emplace_back(s, next[s]);
    const auto t0 = std::chrono::steady_clock::now();
    auto app = tree.AppendBatch(appends);
    if (!app.ok()) return app.status();
    std::unordered_map<kvcache::SeqId, bool> writes;
    copies.clear();
    for (const auto& p : *app) {
      writes[p.seq] = !p.new_slots.empty();
      copies.insert(copies.end(), p.copies.begin(), p.copies.end());
    }
    if (absl::Status s = stepper.Decode(writes, copies, &rows, &out); !s.ok()) return s;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t r = 0; r < rows.size(); ++r) next[rows[r]] = out[r];
    if (step >= 2) {
      timed += dt;
      ++timed_steps;
    }
  }
  for (kvcache::SeqId s : seqs) tree.Release(s).IgnoreError();
  Result r;
  r.ms_per_step = 1000.0 * timed / timed_steps;
  r.tokens_per_s = B * timed_steps / timed;
  return r;
}

int Main(const Options& o) {
  int dev = 0;
  cudaDeviceProp prop;
  if (!CudaBackend::DeviceAvailable() || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "gpu_decode_bench: no CUDA device\n");
    return 1;
  }
  std::printf("device: %s (%d SMs)\n\n", prop.name, prop.multiProcessorCount);
  std::printf("| model | prefix | B | mode | ms/step | decode tok/s |\n|---|---|---|---|---|---|\n");
  for (const std::string& m : o.models) {
    const bool dummy = m.rfind("shape:", 0) == 0;
    engine::ModelConfig cfg;
    std::unique_ptr<engine::ModelWeights> weights;
    if (dummy) {
      auto c = engine::NamedShapeConfig(m.substr(6));
      if (!c.ok()) {
        std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
        return 1;
      }
      cfg = *c;
    } else {
      auto w = engine::LoadModel(m);
      if (!w.ok()) {
        std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
        return 1;
      }
      weights = std::make_unique<engine::ModelWeights>(std::move(*w));
      cfg = weights->config;
    }
    const int prefix = std::max(1, std::min(o.prefix, cfg.max_seq_len - o.steps - 8));
    const std::string name = dummy ? m.substr(6) + " (dummy)" : m.substr(m.find_last_of('/') + 1);
    for (const std::string& mode_name : o.modes) {
      engine::CudaBackendOptions opt;
      opt.chunk_size = o.chunk;
      opt.attention = ModeOf(mode_name);
      const int64_t per_chunk = CudaBackend::ChunkBytes(cfg, o.chunk, opt.dtype);
      const int64_t budget = static_cast<int64_t>(o.kv_gib * (1 << 30));
      // Small models: no more chunks than the runs can use.
      const int64_t needed = (int64_t{prefix} / o.chunk + 2) +
                             int64_t{*std::max_element(o.batches.begin(), o.batches.end())} *
                                 ((o.steps + 4) / o.chunk + 3);
      opt.num_chunks = static_cast<int32_t>(std::min(budget / per_chunk, needed * 2));
      auto backend = dummy ? CudaBackend::CreateDummy(cfg, 1234, opt)
                           : CudaBackend::Create(weights.get(), opt);
      if (!backend.ok()) {
        std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
        return 1;
      }
      for (int B : o.batches) {
        auto r = RunOne(backend->get(), cfg, opt.attention, B, prefix, o.steps, o.chunk);
        if (!r.ok()) {
          std::fprintf(stderr, "%s B=%d %s: %s\n", name.c_str(), B, mode_name.c_str(),
                       std::string(r.status().message()).c_str());
          return 1;
        }
        std::printf("| %s | %d | %d | %s | %.2f | %.0f |\n", name.c_str(), prefix, B,
                    mode_name.c_str(), r->ms_per_step, r->tokens_per_s);
        std::fflush(stdout);
      }
    }
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
      o.prefix = std::atoi(value().c_str());
    } else if (a == "--steps") {
      o.steps = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--modes") {
      o.modes = absl::StrSplit(value(), ',');
    } else if (a == "--kv-gib") {
      o.kv_gib = std::atof(value().c_str());
    } else if (a == "--chunk") {
      o.chunk = std::atoi(value().c_str());
    } else {
      std::fprintf(stderr,
                   "usage: gpu_decode_bench [--model PATH] [--shape NAME] [--batches 1,32,256] "
                   "[--prefix 2048] [--steps 32] [--modes paged,none] [--kv-gib 24] [--chunk 64]\n");
      return 2;
    }
  }
  if (o.models.empty()) {
    o.models = {banyan::SourceDir() + "/models/stories260K/stories260K.bin",
                "shape:llama-2-7b-shape"};
  }
  return banyan::Main(o);
}
