// Drafting time of Hydra heads per step: on the GPU (DeviceDraftHeads, what banyand does by
// default) against the host (DraftHeads::TreeBatch, float BLAS over hidden states on the host;
// banyand --draft-on host), for S samples and a branching vector, on the bundled stories260K
// with its trained heads or the 7B shape (dim 4,096, 32K vocabulary, tied LM head) with random
// heads (4 heads, MLP of 4,096). Prints one table row per case: the nodes drafted per step,
// milliseconds per step on each side (the device's includes uploading the roots, every kernel
// and GEMM, and copying the tokens back), and how many drafted tokens the two sides agree on
// (the device's GEMM inputs are bf16).
//
//   draft_heads_bench [--shape 7b|stories] [--samples 1,8,64] [--trees 1,1,1,1/4,2,2]
//                     [--iters 20] [--host on|off]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/cuda/device_draft_heads.h"
#include "model/dtype.h"
#include "model/dummy_weights.h"
#include "model/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "engine/speculative/random_heads.h"

namespace {

using namespace banyan;  // NOLINT: a benchmark's main file
using Clock = std::chrono::steady_clock;

std::vector<int> Ints(const std::string& s, char sep) {  // --samples
  std::vector<int> v;
  for (auto p : absl::StrSplit(s, sep)) {
    int x;
    if (!absl::SimpleAtoi(p, &x)) {
      std::fprintf(stderr, "bad number list '%s'\n", s.c_str());
      std::exit(2);
    }
    v.push_back(x);
  }
  return v;
}

void* Upload(const std::vector<uint16_t>& v) {
  void* p = nullptr;
  if (cudaMalloc(&p, v.size() * 2) != cudaSuccess ||
      cudaMemcpy(p, v.data(), v.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
    std::fprintf(stderr, "device allocation failed\n");
    std::exit(1);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "7b", samples_s = "1,8,64", trees_s = "1,1,1,1/4,2,2", host_s = "on";
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--shape") shape = v;
    else if (k == "--samples") samples_s = v;
    else if (k == "--trees") trees_s = v;
    else if (k == "--host") host_s = v;
    else if (k == "--iters") iters = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  model::ModelWeights owned;
  const model::ModelWeights* base = nullptr;
  std::optional<model::ModelBundle> bundle;
  std::string heads_config;
  const char* src = std::getenv("BANYAN_SOURCE_DIR");  // where the binary runs elsewhere
  const std::string dir = std::string(src != nullptr ? src : BANYAN_SOURCE_DIR) + "/models/stories260K";
  if (shape == "stories") {
    auto b = model::LoadModelBundle(dir + "/stories260K.bin");
    if (!b.ok()) {
      std::fprintf(stderr, "%s\n", std::string(b.status().message()).c_str());
      return 1;
    }
    bundle.emplace(std::move(*b));
    base = &bundle->weights;
    heads_config = dir + "/hydra/config.json";
  } else if (shape == "7b") {
    auto cfg = model::NamedShapeConfig("llama-2-7b-shape");
    if (!cfg.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
      return 1;
    }
    model::ModelConfig& c = owned.config;
    c = *cfg;
    c.tie_embeddings = true;  // one host table for the embeddings and the LM head
    owned.source = "llama-2-7b-shape (random)";
    owned.tok_embeddings.shape = {c.vocab_size, c.dim};
    owned.tok_embeddings.data.resize(static_cast<size_t>(c.vocab_size) * c.dim);
    std::mt19937 rng(1);
    for (float& x : owned.tok_embeddings.data) x = (static_cast<float>(rng() >> 8) * 0x1p-23f - 1.0f) * 0.05f;
    base = &owned;
    const std::string tmp = (std::filesystem::temp_directory_path() / "banyan_draft_bench").string();
    auto path = engine::WriteRandomHydraHeads(owned, tmp, /*num_heads=*/4, /*mlp_hidden=*/4096, 7);
    if (!path.ok()) {
      std::fprintf(stderr, "%s\n", std::string(path.status().message()).c_str());
      return 1;
    }
    heads_config = *path;
  } else {
    std::fprintf(stderr, "--shape is 7b or stories\n");
    return 2;
  }
  auto heads = engine::DraftHeads::Load(heads_config, *base);
  if (!heads.ok()) {
    std::fprintf(stderr, "%s\n", std::string(heads.status().message()).c_str());
    return 1;
  }
  const model::ModelConfig& c = base->config;
  const int dim = c.dim, vocab = c.vocab_size;
  cudaStream_t stream;
  cublasHandle_t cublas;
  cudaStreamCreate(&stream);
  cublasCreate(&cublas);
  cublasSetStream(cublas, stream);
  engine::cuda::DeviceDraftHeads dev;
  if (auto s = dev.Upload(*heads, kernels::cuda::DType::kBf16, stream); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<uint16_t> table(base->tok_embeddings.data.size());
  for (size_t i = 0; i < table.size(); ++i) table[i] = model::FloatToBf16(base->tok_embeddings.data[i]);
  void* d_emb = Upload(table);
  void* d_lm = d_emb;
  if (const model::Tensor& lm = base->output_matrix(); &lm != &base->tok_embeddings) {
    std::vector<uint16_t> out(lm.data.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = model::FloatToBf16(lm.data[i]);
    d_lm = Upload(out);
  }

  std::printf("| shape | samples | branching | nodes per step | device ms | host ms | host / device | same tokens |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(3);
  for (int S : Ints(samples_s, ',')) {
    // Hidden states: unit-RMS random rows (what a final norm gives), rounded to bf16.
    std::vector<float> h(static_cast<size_t>(S) * dim);
    std::vector<uint16_t> hb(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      hb[i] = model::FloatToBf16((static_cast<float>(rng() >> 8) * 0x1p-23f - 1.0f) * 1.7f);
      h[i] = model::Bf16ToFloat(hb[i]);
    }
    void* d_h = Upload(hb);
    std::vector<int32_t> rows(S), roots(S);
    for (int s = 0; s < S; ++s) {
      rows[s] = s;
      roots[s] = static_cast<int32_t>(rng() % vocab);
    }
    for (const std::string& tree : std::vector<std::string>(absl::StrSplit(trees_s, '/'))) {
      // banyand's --draft-tree parser (checks the factors).
      const absl::StatusOr<std::vector<int32_t>> parsed = engine::DraftHeads::ParseBranching(tree);
      if (!parsed.ok()) {
        std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
        return 2;
      }
      const std::vector<int32_t>& branching = *parsed;
      engine::cuda::DeviceDraftHeads::Base bs{d_h, d_emb, d_lm, vocab};
      std::vector<engine::DraftHeads::Tree> dt, ht;
      double dev_ms = 0, host_ms = -1;
      for (int it = -2; it < iters; ++it) {  // two warm-up calls
        const auto t0 = Clock::now();
        if (auto s = dev.Draft(cublas, stream, bs, rows, roots, branching, &dt); !s.ok()) {
          std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
          return 1;
        }
        if (it >= 0) dev_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
      dev_ms /= iters;
      int64_t nodes = 0, same = 0;
      for (const auto& t : dt) nodes += static_cast<int64_t>(t.token.size()) - 1;
      if (host_s == "on") {
        const int host_iters = std::max(1, iters / 4);
        host_ms = 0;
        for (int it = 0; it < host_iters; ++it) {
          const auto t0 = Clock::now();
          if (!heads->TreeBatch(h, roots, branching, &ht).ok()) return 1;
          host_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        }
        host_ms /= host_iters;
        for (size_t s = 0; s < dt.size(); ++s) {
          for (size_t n = 1; n < dt[s].token.size(); ++n) same += dt[s].token[n] == ht[s].token[n];
        }
      }
      std::printf("| %s | %d | %s | %lld | %.3f | %s | %s | %s |\n", shape.c_str(), S, tree.c_str(),
                  static_cast<long long>(nodes), dev_ms,
                  host_ms < 0 ? "-" : std::to_string(host_ms).substr(0, 7).c_str(),
                  host_ms < 0 ? "-" : std::to_string(host_ms / dev_ms).substr(0, 6).c_str(),
                  host_ms < 0 ? "-"
                              : (std::to_string(same) + " / " + std::to_string(nodes)).c_str());
      std::fflush(stdout);
    }
    cudaFree(d_h);
  }
  return 0;
}
