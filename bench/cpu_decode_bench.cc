// CPU decode throughput of the engine on a real model (default: the bundled stories260K).
//
//   cpu_decode_bench [--model PATH] [--batches 1,64] [--prompt-tokens 64] [--max-tokens 256]
//
// For each batch size B it runs B sequences of generation with ignore_eos, in two workloads:
// `distinct` (B unrelated prompts, greedy) and `shared` (one prompt sampled B ways with
// temperature 1 and a seed, n = B, so the prompt's KV is shared), each in attention modes tpp
// and paged. It prints a Markdown table:
// decode tokens/s (decode steps only, prefill excluded), prefill tokens/s, peak live KV chunks.
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "scheduler/generate.h"

namespace banyan {
namespace {

struct Options {
  std::string model;
  std::vector<int> batches = {1, 64};
  int prompt_tokens = 64;
  int max_tokens = 256;
};

int Run(const Options& o) {
  auto bundle = model::LoadModelBundle(o.model);
  if (!bundle.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bundle.status().message()).c_str());
    return 1;
  }
  const auto& cfg = bundle->weights.config;
  std::printf("model %s: dim %d, layers %d, heads %d/%d, vocab %d\n\n", o.model.c_str(), cfg.dim,
              cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size);
  std::printf("| B | workload | attention | decode tok/s | prefill tok/s | peak live chunks |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::mt19937 rng(7);
  for (int B : o.batches) {
    for (bool shared : {false, true}) {
      if (B == 1 && shared) continue;
      for (engine::AttentionMode mode : {engine::AttentionMode::kTpp,
                                         engine::AttentionMode::kPaged}) {
        std::vector<scheduler::Request> reqs;
        auto make_prompt = [&]() {
          std::vector<int32_t> p = {cfg.bos_id};
          for (int i = 1; i < o.prompt_tokens; ++i) p.push_back(3 + rng() % (cfg.vocab_size - 3));
          return p;
        };
        scheduler::Request base;
        base.params.temperature = 0;
        base.params.max_tokens = o.max_tokens;
        base.params.ignore_eos = true;
        if (shared) {
          // Sampled (seeded) so that the B samples diverge after the prompt; greedy samples
          // would all be identical and share one node to the end.
          base.prompt = make_prompt();
          base.n = B;
          base.params.temperature = 1.0f;
          base.params.seed = 7;
          base.params.has_seed = true;
          reqs.push_back(base);
        } else {
          for (int b = 0; b < B; ++b) {
            base.prompt = make_prompt();
            reqs.push_back(base);
          }
        }
        const int chunk = 64;
        const int chunks = B * ((o.prompt_tokens + o.max_tokens) / chunk + 3);
        auto backend = engine::CpuBackend::Create(
            &bundle->weights, {.num_chunks = chunks, .chunk_size = chunk, .attention = mode});
        if (!backend.ok()) {
          std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
          return 1;
        }
        // The engine loop with batch settings: every request admitted and prefilled at once.
        scheduler::EngineLoop loop(cfg, nullptr, *std::move(backend),
                                   {.max_running_sequences = 1 << 16,
                                    .prefill_token_budget = 1 << 24,
                                    .attention = mode});
        auto res = scheduler::GenerateAll(loop, reqs);
        if (!res.ok()) {
          std::fprintf(stderr, "%s\n", std::string(res.status().message()).c_str());
          return 1;
        }
        const scheduler::LoopStats& st = loop.stats();
        std::printf("| %d | %s | %s | %.0f | %.0f | %d |\n", B, shared ? "shared" : "distinct",
                    mode == engine::AttentionMode::kTpp ? "tpp" : "paged",
                    st.decode_tokens / st.decode_seconds, st.prefill_tokens / st.prefill_seconds,
                    st.peak.chunks_live);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) {
  banyan::Options o;
  o.model = banyan::model::FindBundledModel(argv[0]);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") {
      o.model = v;
    } else if (k == "--batches") {
      o.batches.clear();
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) o.batches.push_back(std::stoi(item));
    } else if (k == "--prompt-tokens") {
      o.prompt_tokens = std::stoi(v);
    } else if (k == "--max-tokens") {
      o.max_tokens = std::stoi(v);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  return banyan::Run(o);
}
