// End-to-end tests of the CPU engine on the bundled stories260K model: format equivalence,
// an independent naive forward pass as oracle, the known greedy story, batch invariance with
// shared prefixes, and KV memory accounting.
#include <cmath>
#include <filesystem>
#include <random>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/gguf_loader.h"
#include "engine/model/model_io.h"
#include "engine/model_bundle.h"
#include "gtest/gtest.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/generate.h"
#include "tests/testing/random.h"

namespace banyan::engine {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K";

// A model on the engine loop, with its own backend, KV pool and tree. Run() uses the batch
// settings of `banyan generate` (every request admitted at once, whole prompts prefilled).
struct Engine {
  explicit Engine(const ModelWeights* w, int chunks = 512, int chunk_size = 16,
                  AttentionMode mode = AttentionMode::kTpp)
      : loop(w->config, nullptr,
             *CpuBackend::Create(w, {.num_chunks = chunks, .chunk_size = chunk_size,
                                     .attention = mode}),
             {.max_running_sequences = 1024, .prefill_token_budget = 1 << 20, .attention = mode}),
        tree(loop.tree()), backend(&loop.backend()) {}
  absl::StatusOr<std::vector<scheduler::GenerationResult>> Run(
      std::span<const scheduler::Request> requests) {
    return scheduler::GenerateAll(loop, requests);
  }
  // Logits of the last prompt position, prefilling the whole prompt in one forward pass.
  std::vector<float> PrefillLogits(const std::vector<int32_t>& prompt) {
    auto placed = tree.Insert("", prompt);
    EXPECT_TRUE(placed.ok());
    std::vector<float> all;
    StepBatch b;
    SeqWork w;
    w.pos0 = 0;
    w.tokens = prompt;
    w.slots = tree.Slots(placed->seq, 0, static_cast<int32_t>(prompt.size()));
    w.write_kv.assign(prompt.size(), 1);
    auto plan = kvcache::BuildAttentionPlan(tree, std::vector{placed->seq}, {.share = false});
    w.span_chunk = plan.span_chunk;
    w.span_begin = plan.span_begin;
    w.span_end = plan.span_end;
    b.prefill.push_back(w);
    EXPECT_TRUE(backend->Forward(b, &all).ok());
    tree.Release(placed->seq).IgnoreError();
    return all;
  }
  scheduler::EngineLoop loop;
  kvcache::PrefixTree& tree;
  Backend* backend;
};

// Independent single-sequence LLaMA forward (llama2.c style, plain arrays, no tree, no plan).
std::vector<float> NaiveLogits(const ModelWeights& w, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = w.config;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int T = static_cast<int>(tokens.size());
  auto matvec = [](const Tensor& m, const std::vector<double>& x) {
    const int64_t rows = m.shape[0], cols = m.shape[1];
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) y[r] += m.data[r * cols + k] * x[k];
    }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const Tensor& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double inv = 1.0 / std::sqrt(ss / x.size() + c.norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g.data[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < d / 2; ++i) {
        double ang = pos * std::pow(static_cast<double>(c.rope_theta), -2.0 * i / d);
        int a = c.rope_style == RopeStyle::kInterleaved ? 2 * i : i;
        int b = c.rope_style == RopeStyle::kInterleaved ? 2 * i + 1 : i + d / 2;
        double x0 = v[h * d + a], x1 = v[h * d + b];
        v[h * d + a] = x0 * std::cos(ang) - x1 * std::sin(ang);
        v[h * d + b] = x0 * std::sin(ang) + x1 * std::cos(ang);
      }
    }
  };
  std::vector<std::vector<std::vector<double>>> K(c.n_layers), V(c.n_layers);
  std::vector<float> out;
  for (int t = 0; t < T; ++t) {
    std::vector<double> x(w.tok_embeddings.data.begin() + tokens[t] * dim,
                          w.tok_embeddings.data.begin() + (tokens[t] + 1) * dim);
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& lw = w.layers[l];
      auto xb = rms(x, lw.attn_norm);
      auto q = matvec(lw.wq, xb), k = matvec(lw.wk, xb), v = matvec(lw.wv, xb);
      rope(q, hq, t);
      rope(k, hkv, t);
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<double> att(hq * d, 0.0);
      for (int h = 0; h < hq; ++h) {
        int kh = h / (hq / hkv);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += q[h * d + i] * K[l][j][kh * d + i];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < d; ++i) att[h * d + i] += s[j] / sum * V[l][j][kh * d + i];
        }
      }
      auto o = matvec(lw.wo, att);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      auto xf = rms(x, lw.ffn_norm);
      auto g = matvec(lw.w_gate, xf), u = matvec(lw.w_up, xf);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto down = matvec(lw.w_down, g);
      for (int i = 0; i < dim; ++i) x[i] += down[i];
    }
    if (t == T - 1) {
      auto logits = matvec(w.output_matrix(), rms(x, w.final_norm));
      out.assign(logits.begin(), logits.end());
    }
  }
  return out;
}

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return 1e30;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto b = LoadModelBundle(kModelDir + "/stories260K.bin");
    ASSERT_TRUE(b.ok()) << b.status();
    bundle_ = new ModelBundle(std::move(*b));
  }
  static void TearDownTestSuite() { delete bundle_; }
  static ModelBundle* bundle_;
};
ModelBundle* EngineTest::bundle_ = nullptr;

TEST_F(EngineTest, PrefillMatchesNaiveForward) {
  BANYAN_SEEDED_RNG(rng);
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
  Engine e(&bundle_->weights);
  auto logits = e.PrefillLogits(prompt);
  auto want = NaiveLogits(bundle_->weights, prompt);
  EXPECT_LT(RelErr(logits, want), 1e-5);
}

TEST_F(EngineTest, BinGgufAndHfGiveIdenticalLogits) {
  std::vector<int32_t> prompt = bundle_->tokenizer->Encode("Once upon a time, a cat", true);
  Engine from_bin(&bundle_->weights);
  auto want = from_bin.PrefillLogits(prompt);

  auto gguf = LoadGguf(kModelDir + "/stories260K.gguf", nullptr);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  Engine from_gguf(&*gguf);
  EXPECT_EQ(from_gguf.PrefillLogits(prompt), want);

  fs::path dir = fs::temp_directory_path() /
                 ("banyan_hf_" + std::to_string(testing::FreshSeed()));
  ASSERT_TRUE(WriteHfFolder(bundle_->weights, dir.string()).ok());
  auto hf = LoadModel(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.rope_style, RopeStyle::kHalf);  // the rotate-half path is exercised
  Engine from_hf(&*hf);
  auto got = from_hf.PrefillLogits(prompt);
  // Permuted Wq/Wk rows reorder the dot products inside attention: equal up to fp32 rounding.
  EXPECT_LT(RelErr(got, want), 1e-6);
  fs::remove_all(dir);
}

TEST_F(EngineTest, GreedyStoryFromEmptyPrompt) {
  Engine e(&bundle_->weights);
  scheduler::Request r;
  r.prompt = {bundle_->tokenizer->bos_id()};
  r.params.temperature = 0;
  r.params.max_tokens = 40;
  auto out = e.Run(std::span(&r, 1));
  ASSERT_TRUE(out.ok()) << out.status();
  std::string text = bundle_->tokenizer->Decode((*out)[0].samples[0].tokens);
  EXPECT_TRUE(text.starts_with("Once upon a time, there was a little girl named Lily. She loved "
                               "to play outside in the park."))
      << text;
}

// Greedy and seeded sampling in a batch with shared prefixes equal each request run alone.
TEST_F(EngineTest, SharedPrefixBatchEqualsSoloRuns) {
  BANYAN_SEEDED_RNG(rng);
  const Tokenizer& tok = *bundle_->tokenizer;
  std::string system = "Once upon a time, there was a little dog named Max. Max liked to run in "
                       "the big green park with his friend, a small bird. The bird could sing "
                       "very well and Max loved to listen. Every morning they met by the old "
                       "tree near the pond, where the ducks swam and the flowers were red.";
  std::vector<scheduler::Request> reqs;
  const char* questions[] = {" One day", " The bird said", " Max was sad because", " Then"};
  for (const char* q : questions) {
    scheduler::Request r;
    r.prompt = tok.Encode(system + q, true);
    r.params.temperature = 0;
    r.params.max_tokens = 30;
    reqs.push_back(r);
  }
  scheduler::Request nway;  // n-way sampling of one prompt
  nway.prompt = tok.Encode(system, true);
  nway.n = 4;
  nway.params.temperature = 0.9f;
  nway.params.seed = rng();
  nway.params.has_seed = true;
  nway.params.max_tokens = 30;
  reqs.push_back(nway);

  for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
    Engine batch(&bundle_->weights, 512, 16, mode);
    auto all = batch.Run(reqs);
    ASSERT_TRUE(all.ok()) << all.status();
    for (size_t i = 0; i < reqs.size(); ++i) {
      Engine solo(&bundle_->weights, 512, 16, AttentionMode::kPaged);
      auto one = solo.Run(std::span(&reqs[i], 1));
      ASSERT_TRUE(one.ok());
      ASSERT_EQ((*all)[i].samples.size(), (*one)[0].samples.size());
      for (size_t k = 0; k < (*one)[0].samples.size(); ++k) {
        EXPECT_EQ((*all)[i].samples[k].tokens, (*one)[0].samples[k].tokens)
            << "request " << i << " sample " << k;
      }
    }
    // The n samples of the seeded request differ from each other (distinct streams).
    EXPECT_NE((*all)[4].samples[0].tokens, (*all)[4].samples[1].tokens);
    // The shared system prompt is stored once. Its full chunks would be stored 8 times without
    // sharing; each divergence point may cost up to 2 partly used chunks.
    size_t shared = tok.Encode(system, true).size() - 1;
    const int64_t full_chunks = static_cast<int64_t>(shared) / 16;
    const auto& peak = batch.loop.stats().peak;
    EXPECT_EQ(peak.live_sequences, 8);
    EXPECT_GE(full_chunks, 5);
    EXPECT_GE(peak.chunks_saved_by_sharing, 7 * full_chunks - 2 * 8)
        << "shared prompt of " << shared << " tokens";
  }
}

TEST_F(EngineTest, CachedPromptIsReusedAndGivesSameOutput) {
  Engine e(&bundle_->weights);
  scheduler::Request r;
  r.prompt = bundle_->tokenizer->Encode("The little cat sat on the mat and", true);
  r.params.temperature = 0;
  r.params.max_tokens = 20;
  auto first = e.Run(std::span(&r, 1));
  auto second = e.Run(std::span(&r, 1));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ((*first)[0].usage.cached_prompt_tokens, 0);
  EXPECT_EQ((*second)[0].usage.cached_prompt_tokens, static_cast<int32_t>(r.prompt.size()));
  EXPECT_EQ((*first)[0].samples[0].tokens, (*second)[0].samples[0].tokens);
  // Another tenant does not see the cache.
  r.cache_namespace = "tenant-b";
  auto third = e.Run(std::span(&r, 1));
  EXPECT_EQ((*third)[0].usage.cached_prompt_tokens, 0);
}

TEST_F(EngineTest, RejectsBadRequests) {
  Engine e(&bundle_->weights);
  scheduler::Request r;
  EXPECT_EQ(e.loop.Check(r).code(), absl::StatusCode::kInvalidArgument);  // empty
  r.prompt = {1, 600};
  EXPECT_NE(e.loop.Check(r).message().find("vocabulary"), std::string::npos);
  r.prompt = {1, 5};
  r.params.max_tokens = 100000;
  auto s = e.loop.Check(r);
  EXPECT_NE(s.message().find("100000"), std::string::npos) << s;
  EXPECT_NE(s.message().find("512"), std::string::npos) << s;
}

TEST_F(EngineTest, TooSmallKvPoolIsAnErrorNotACrash) {
  Engine e(&bundle_->weights, /*chunks=*/2, /*chunk_size=*/16);
  scheduler::Request r;
  r.prompt = bundle_->tokenizer->Encode("Once upon a time, there was a big red ball.", true);
  r.params.temperature = 0;
  r.params.max_tokens = 100;
  auto out = e.Run(std::span(&r, 1));
  // Refused before it runs: its worst case cannot fit in the whole cache.
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_NE(out.status().message().find("KV chunks"), std::string::npos) << out.status();
  EXPECT_EQ(e.tree.Stats().live_sequences, 0);  // nothing leaked
}

}  // namespace
}  // namespace banyan::engine
