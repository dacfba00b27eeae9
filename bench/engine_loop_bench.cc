// Host cost of the engine loop per step, without a model: scheduler::EngineLoop driven with a
// backend whose forward pass does nothing and returns a token per sample at once. What it
// measures is what the loop adds on top of the device's work in a synchronous step: the policy
// summary, placement in the prefix tree, the attention plan, the step's inputs, detokenization,
// stop checks and stream pushes.
//
//   engine_loop_bench [--batches 32,256,1024] [--prefix 2048] [--steps 128] [--vocab 32000]
//                     [--chunk 64] [--kv-events off|on|both]
//
// Per batch B: B requests of a shared `prefix`-token prompt plus one distinct token each, greedy,
// ignore_eos, `steps` output tokens, all submitted at once (as banyan_serve_bench sends them).
// Prints host microseconds per decode step (mean over the decode-only steps) and per row, with the
// CPU a step ahead off and on (engine_loop.h), and how much of it comes before the step's launch:
// with overlap on a GPU, only that part leaves the device idle. --kv-events on attaches a KV
// event publisher (server/common/kv_event_publisher.h, on an ipc:// socket in a temporary folder, no
// subscriber): the engine thread then also tracks the tree's blocks and queues a batch per step
// (docs/kv_events.md); "both" runs every case without and with it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "model/dummy_weights.h"
#include "model/model_bundle.h"
#include "scheduler/engine_loop.h"
#include "scheduler/generate.h"
#ifdef BANYAN_BENCH_KV_EVENTS
#include "server/common/kv_event_publisher.h"
#endif
#include "spdlog/spdlog.h"

namespace banyan {
namespace {

// Returns, for every sample, a token that depends only on the row's position in the step and the
// step count: no model, no device.
class NullBackend final : public engine::Backend {
 public:
  NullBackend(int32_t chunks, int32_t chunk_size, int32_t vocab)
      : chunks_(chunks), chunk_size_(chunk_size), vocab_(vocab) {}
  std::string_view name() const override { return "null"; }
  int32_t num_chunks() const override { return chunks_; }
  int32_t chunk_size() const override { return chunk_size_; }
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy>) override {
    return absl::OkStatus();
  }
  absl::Status Forward(const engine::StepBatch&, std::vector<float>*) override {
    return absl::UnimplementedError("the null backend only samples");
  }
  absl::Status ForwardSample(const engine::StepBatch& batch,
                             std::span<const engine::SampleSpec> specs,
                             std::vector<engine::SampleResult>* out) override {
    ++steps_;
    out->resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      (*out)[i].token = 3 + static_cast<int32_t>((i * 7919 + steps_ * 104729) % (vocab_ - 3));
      (*out)[i].logprob = -1.0f;
    }
    (void)batch;
    return absl::OkStatus();
  }

 private:
  int32_t chunks_, chunk_size_, vocab_;
  int64_t steps_ = 0;
};

int Main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // the loop's per-request lines
  // As banyand runs: without absl::Mutex's deadlock detection (server/main.cc says why).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<int> batches = {32, 256, 1024};
  int prefix = 2048, steps = 128, vocab = 32000, chunk = 64;
  std::vector<bool> kv_events = {false};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batches") {
      batches.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        int b = 0;
        if (!absl::SimpleAtoi(s, &b) || b < 1) return 2;
        batches.push_back(b);
      }
    } else if (k == "--prefix") {
      prefix = std::stoi(v);
    } else if (k == "--steps") {
      steps = std::stoi(v);
    } else if (k == "--vocab") {
      vocab = std::stoi(v);
    } else if (k == "--chunk") {
      chunk = std::stoi(v);
    } else if (k == "--kv-events") {
      if (v != "off" && v != "on" && v != "both") return 2;
      kv_events = v == "off" ? std::vector<bool>{false}
                             : v == "on" ? std::vector<bool>{true} : std::vector<bool>{false, true};
#ifndef BANYAN_BENCH_KV_EVENTS
      if (v != "off") {
        std::fprintf(stderr, "--kv-events: built without the server (BANYAN_SERVER=OFF)\n");
        return 2;
      }
#endif
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  auto tokenizer = model::SyntheticTokenizer(vocab);
  if (!tokenizer.ok()) return 1;
  model::ModelConfig cfg = *model::NamedShapeConfig("llama-2-7b-shape");
  cfg.vocab_size = vocab;
  cfg.max_seq_len = prefix + steps + 16;
  std::printf("| B | prefix | overlap | kv events | decode steps | host us per decode step | "
              "host us per row | of which before the launch (us per step) | attention plan "
              "builds |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int B : batches) for (int overlap : {0, 1}) for (bool events : kv_events) {
    const int32_t chunks = (prefix + chunk - 1) / chunk + B * ((steps + 2) / chunk + 2) + 16;
    scheduler::EngineLoop loop(
        cfg, tokenizer->get(), std::make_unique<NullBackend>(chunks, chunk, vocab),
        {.max_running_sequences = B, .prefill_token_budget = 8192,
         .attention = engine::AttentionMode::kTpp, .overlap = overlap});
#ifdef BANYAN_BENCH_KV_EVENTS
    std::unique_ptr<server::KvEventPublisher> publisher;
    std::string folder;
    if (events) {
      char dir[] = "/tmp/engine-loop-bench-XXXXXX";
      folder = mkdtemp(dir);
      server::KvEventsConfig kc;
      kc.enable_kv_cache_events = true;
      kc.publisher = "zmq";
      kc.endpoint = "ipc://" + folder + "/pub";
      auto p = server::KvEventPublisher::Create(kc, chunk);
      if (!p.ok()) {
        std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
        return 1;
      }
      publisher = std::move(*p);
      loop.set_kv_event_sink(publisher.get());
    }
#endif
    std::vector<scheduler::Request> requests(B);
    std::vector<int32_t> shared(prefix);
    for (int i = 0; i < prefix; ++i) shared[i] = 3 + (i * 31) % (vocab - 3);
    for (int b = 0; b < B; ++b) {
      requests[b].prompt = shared;
      requests[b].prompt.push_back(3 + (b * 7919) % (vocab - 3));
      requests[b].params.temperature = 0;
      requests[b].params.max_tokens = steps;
      requests[b].params.ignore_eos = true;
    }
    auto out = scheduler::GenerateAll(loop, requests);
    if (!out.ok()) {
      std::fprintf(stderr, "B=%d: %s\n", B, std::string(out.status().message()).c_str());
      return 1;
    }
    const scheduler::LoopStats& st = loop.stats();
    const double per_step = st.decode_seconds / std::max<int64_t>(st.decode_steps, 1) * 1e6;
#ifdef BANYAN_BENCH_KV_EVENTS
    if (publisher != nullptr) {
      loop.set_kv_event_sink(nullptr);
      publisher.reset();
      std::filesystem::remove_all(folder);
    }
#endif
    std::printf("| %d | %d | %s | %s | %lld | %.0f | %.2f | %.0f | %lld |\n", B, prefix,
                overlap ? "on" : "off", events ? "on" : "off",
                static_cast<long long>(st.decode_steps), per_step,
                per_step * st.decode_steps / std::max<int64_t>(st.decode_tokens, 1),
                st.decode_launch_seconds / std::max<int64_t>(st.decode_steps, 1) * 1e6,
                static_cast<long long>(st.plan_builds));
  }
  return 0;
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) { return banyan::Main(argc, argv); }
