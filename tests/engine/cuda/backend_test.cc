// CudaBackend end to end: logits against CpuBackend (bundled stories260K and dummy models with
// head_dim 64 and 128, GQA 1 and 4) for a prefill of shared-prefix prompts followed by decode
// steps over the shared-prefix batch, in the tpp and paged modes (tpp with head_dim 64/128 runs
// the TPP kernel of kernels/cuda/tpp: the tests check that it ran, over plans with segments,
// and that its work plan was both rebuilt and only advanced); a larger hierarchical batch
// (global prefix, group prefixes, private tails) through the TPP kernel; greedy tpp outputs
// equal paged outputs; device dummy weights equal host dummy weights; greedy outputs of a
// shared-prefix batch equal each sequence run alone; a clear out-of-memory message; and the
// Hugging Face transformers oracle when $BANYAN_HF_ORACLE_DIR points at the folder
// tools/gpu/hf_oracle.py wrote.
//
// bf16 tolerance. The CPU reference runs on the same weights rounded to bf16, so what differs is
// the GPU's rounding of activations to bf16 where they feed a GEMM or the KV cache (relative
// 2^-9 per element) and the GEMMs' summation order. Over 2-5 layers this stays near 1e-2 of the
// logits' norm; the bound is 4e-2 (fp16: 1e-2). Errors are printed for the record.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "model/model_bundle.h"
#include "model/dummy_weights.h"
#include "model/model_io.h"
#include "model/weights_layout.h"
#include "engine/step_runner.h"
#include "scheduler/generate.h"
#include "gtest/gtest.h"
#include "model/quantized.h"
#include "tests/model/fp8_test_util.h"
#include "tests/model/test_util.h"
#include "kernels/cuda/fp8_quant.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/engine/cuda/greedy_steps.h"
#include "tests/testing/bundled_model.h"
#include "tests/engine/cuda/small_model.h"
#include "tests/testing/random.h"

namespace banyan::engine {
namespace {

using kernels::cuda::DType;
using ::banyan::testing::RelErr;

double Tol(DType dt) { return dt == DType::kBf16 ? 4e-2 : 1e-2; }

// A copy of `w` with every matrix rounded to the dtype (norms stay fp32, as on the GPU).
model::ModelWeights Rounded(const model::ModelWeights& w, DType dt) {
  model::ModelWeights r = w;
  for (const model::TensorSlot& slot : model::ListTensorSlots(r.config)) {
    model::Tensor& t = model::SlotTensor(r, slot);
    if (t.shape.size() == 1) continue;
    for (float& x : t.data) x = ::banyan::testing::RoundTo(dt, x);
  }
  return r;
}

model::ModelConfig SmallConfig(int head_dim, int heads, int kv_heads) {
  model::ModelConfig c = testing::SmallModelConfig(head_dim, heads, kv_heads);
  c.rope_style = model::RopeStyle::kHalf;
  return c;
}

// The engine loop with batch settings: every request admitted and prefilled at once.
scheduler::LoopOptions BatchLoopOptions(AttentionMode mode) {
  return {.max_running_sequences = 1 << 16, .prefill_token_budget = 1 << 24, .attention = mode};
}

// A backend with its own pool, tree and step runner.
struct Side {
  Side(std::unique_ptr<Backend> b, int chunks, int chunk_size, AttentionMode mode)
      : pool(*kvcache::ChunkPool::Create(chunks, chunk_size)), tree(&pool), backend(std::move(b)),
        runner(backend.get(), &tree, mode) {}
  kvcache::ChunkPool pool;
  kvcache::PrefixTree tree;
  std::unique_ptr<Backend> backend;
  StepRunner runner;
};

constexpr int kChunks = 512;
constexpr int kChunkSize = 16;

std::unique_ptr<Side> MakeCpu(const model::ModelWeights* w, AttentionMode mode, int chunks = kChunks,
                              int32_t fp8_activation_group = 0, bool kv_fp8 = false) {
  auto b = CpuBackend::Create(w, {.num_chunks = chunks,
                                  .chunk_size = kChunkSize,
                                  .attention = mode,
                                  .fp8_activation_group = fp8_activation_group,
                                  .kv_fp8 = kv_fp8});
  EXPECT_TRUE(b.ok()) << b.status();
  return std::make_unique<Side>(std::move(*b), chunks, kChunkSize, mode);
}

std::unique_ptr<Side> MakeCuda(const model::ModelWeights* w, AttentionMode mode, DType dt,
                               int chunks = kChunks, bool kv_fp8 = false) {
  CudaBackendOptions o;
  o.num_chunks = chunks;
  o.chunk_size = kChunkSize;
  o.attention = mode;
  o.dtype = dt;
  o.kv_fp8 = kv_fp8;
  auto b = CudaBackend::Create(w, o);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return nullptr;
  return std::make_unique<Side>(std::move(*b), chunks, kChunkSize, mode);
}

CudaBackend& CudaOf(Side& side) { return *static_cast<CudaBackend*>(side.backend.get()); }

std::vector<int32_t> RandomTokens(int n, int vocab, std::mt19937_64& rng) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = 1 + static_cast<int32_t>(rng() % (vocab - 1));
  return t;
}

// Four prompts sharing a 70-token prefix with random tails, and a prompt that is a piece of it.
std::vector<std::vector<int32_t>> SharedPrefixPrompts(int vocab, std::mt19937_64& rng) {
  const std::vector<int32_t> prefix = RandomTokens(70, vocab, rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> tail = RandomTokens(5 + static_cast<int>(rng() % 26), vocab, rng);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  prompts.push_back(std::vector<int32_t>(prefix.begin(), prefix.begin() + 33));  // a prefix only
  return prompts;
}

// Hierarchical sharing: a global prefix of `global` tokens, `groups` group prefixes of
// `group_len` tokens, and `rows` prompts spread over the groups with private tails of
// `tail_base + kChunkSize * k` tokens (k random in [0, 3]). With global, group_len and tail_base
// fixed mod the chunk size, every row fills its last chunk in the same decode step, so the other
// steps only advance lengths (the TPP work plan is reused).
std::vector<std::vector<int32_t>> HierarchicalPrompts(int vocab, std::mt19937_64& rng, int rows,
                                                      int global, int groups, int group_len,
                                                      int tail_base) {
  const std::vector<int32_t> g = RandomTokens(global, vocab, rng);
  std::vector<std::vector<int32_t>> group_prefix;
  for (int i = 0; i < groups; ++i) group_prefix.push_back(RandomTokens(group_len, vocab, rng));
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> p = g;
    const auto& gp = group_prefix[r % groups];
    p.insert(p.end(), gp.begin(), gp.end());
    const std::vector<int32_t> tail =
        RandomTokens(tail_base + kChunkSize * static_cast<int>(rng() % 4), vocab, rng);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  return prompts;
}

// Prefills `prompts` on both sides in one step, then decodes `steps` steps feeding both the CPU's
// greedy tokens; returns the largest relative error over all steps. In tpp mode with a head_dim
// the TPP kernel supports, checks that exactly the decode steps whose plan has shared segments
// ran it (all of them when `shared`, none otherwise: those run the paged kernel).
double CompareSteps(Side& cpu, Side& gpu, int vocab, const std::vector<std::vector<int32_t>>& prompts,
                    int steps, const std::string& label, bool shared = true) {
  double worst = 0;
  CudaBackend& cuda = CudaOf(gpu);
  cuda.ResetAttentionStats();
  int32_t max_segments = 0, steps_with_segments = 0;
  std::vector<kvcache::SeqId> seqs[2];
  Side* sides[2] = {&cpu, &gpu};
  std::vector<float> logits[2];
  for (int s = 0; s < 2; ++s) {
    std::vector<kvcache::ChunkCopy> copies;
    std::vector<PrefillItem> items;
    for (const auto& p : prompts) {
      auto placed = sides[s]->tree.Insert("", p);
      EXPECT_TRUE(placed.ok());
      if (!placed.ok()) return 1e9;
      seqs[s].push_back(placed->seq);
      copies.insert(copies.end(), placed->copies.begin(), placed->copies.end());
      const int32_t len = static_cast<int32_t>(p.size());
      items.push_back({placed->seq, std::min(placed->matched_tokens, len - 1), len,
                       placed->matched_tokens, true, {}});
    }
    StepOutput out;
    const absl::Status st = sides[s]->runner.RunLogits(copies, {}, items, &out);
    EXPECT_TRUE(st.ok()) << st;
    logits[s] = out.logits;
  }
  worst = std::max(worst, RelErr(logits[1], logits[0]));
  std::printf("[ %s ] prefill: rel err %.3g\n", label.c_str(), RelErr(logits[1], logits[0]));
  // Greedy tokens from the CPU logits drive both sides.
  auto argmax = [&](const std::vector<float>& l, size_t row) {
    const float* r = l.data() + row * vocab;
    return static_cast<int32_t>(std::max_element(r, r + vocab) - r);
  };
  std::vector<int32_t> next(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) next[i] = argmax(logits[0], i);
  for (int step = 0; step < steps; ++step) {
    std::vector<kvcache::SeqId> order[2];
    for (int s = 0; s < 2; ++s) {
      std::vector<std::pair<kvcache::SeqId, int32_t>> appends;
      for (size_t i = 0; i < seqs[s].size(); ++i) appends.emplace_back(seqs[s][i], next[i]);
      auto placed = sides[s]->tree.AppendBatch(appends);
      EXPECT_TRUE(placed.ok());
      if (!placed.ok()) return 1e9;
      std::vector<kvcache::ChunkCopy> copies;
      std::vector<DecodeItem> decode;
      for (const auto& p : *placed) {
        copies.insert(copies.end(), p.copies.begin(), p.copies.end());
        decode.push_back({p.seq, !p.new_slots.empty(), {}});
      }
      StepOutput out;
      const absl::Status st = sides[s]->runner.RunLogits(copies, decode, {}, &out);
      EXPECT_TRUE(st.ok()) << st;
      logits[s] = out.logits;
      order[s] = out.decode_rows;
    }
    // The plan the step ran (same tree, same rows).
    const int32_t segments = kvcache::BuildAttentionPlan(gpu.tree, order[1]).num_segments();
    max_segments = std::max(max_segments, segments);
    if (segments > 0) ++steps_with_segments;
    EXPECT_EQ(order[0].size(), order[1].size());
    const double err = RelErr(logits[1], logits[0]);
    worst = std::max(worst, err);
    if (step == 0 || step == steps - 1) {
      std::printf("[ %s ] decode step %d: rel err %.3g\n", label.c_str(), step, err);
    }
    // Rows come back in DFS order: map them to the sequences.
    for (size_t r = 0; r < order[0].size(); ++r) {
      const auto it = std::find(seqs[0].begin(), seqs[0].end(), order[0][r]);
      next[it - seqs[0].begin()] = argmax(logits[0], r);
    }
  }
  const CudaAttentionStats& st = cuda.attention_stats();
  EXPECT_EQ(st.decode_steps, steps) << label;
  EXPECT_EQ(steps_with_segments, shared ? steps : 0) << label;
  if (cuda.uses_tpp_kernel()) {
    // Every decode step ran the TPP kernels; kPaged plans have no segments (their paged call).
    const bool sharing = cuda.attention_mode() == AttentionMode::kTpp;
    EXPECT_EQ(st.tpp_steps, sharing ? steps_with_segments : 0) << label;
    EXPECT_EQ(st.tpp_plan_builds + st.tpp_plan_updates, steps) << label;
    std::printf("[ %s ] TPP kernel: %lld plan builds, %lld span-end updates, up to %d segments\n",
                label.c_str(), static_cast<long long>(st.tpp_plan_builds),
                static_cast<long long>(st.tpp_plan_updates), max_segments);
  } else {
    EXPECT_EQ(st.tpp_steps, 0) << label;
  }
  return worst;
}

class CudaBackendTest : public ::testing::Test {
 protected:
};

TEST_F(CudaBackendTest, StoriesLogitsMatchCpu) {
  BANYAN_SEEDED_RNG(rng);
  auto w = model::LoadModel(::banyan::testing::BundledModelPath());
  ASSERT_TRUE(w.ok()) << w.status();
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    const model::ModelWeights rounded = Rounded(*w, dt);
    for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
      auto cpu = MakeCpu(&rounded, mode);
      auto gpu = MakeCuda(&*w, mode, dt);
      ASSERT_NE(gpu, nullptr);
      const std::string label = std::string("stories260K ") + kernels::cuda::DTypeName(dt) +
                                (mode == AttentionMode::kTpp ? " tpp" : " paged");
      // head_dim 8: TPP's generic phase 2 (segments read per row, merged with the tails)
      EXPECT_TRUE(CudaOf(*gpu).uses_tpp_kernel());
      EXPECT_LT(CompareSteps(*cpu, *gpu, w->config.vocab_size,
                             SharedPrefixPrompts(w->config.vocab_size, rng), 12, label),
                Tol(dt))
          << label;
    }
  }
}

TEST_F(CudaBackendTest, DummyModelsLogitsMatchCpu) {
  BANYAN_SEEDED_RNG(rng);
  struct Shape {
    int head_dim, heads, kv_heads;
    model::RopeStyle rope;
  };
  for (const Shape& s : {Shape{64, 4, 4, model::RopeStyle::kHalf}, Shape{64, 8, 2, model::RopeStyle::kInterleaved},
                         Shape{128, 4, 4, model::RopeStyle::kInterleaved}, Shape{128, 4, 1, model::RopeStyle::kHalf},
                         Shape{96, 4, 2, model::RopeStyle::kHalf}}) {  // 96: the generic phase 2
    model::ModelConfig cfg = SmallConfig(s.head_dim, s.heads, s.kv_heads);
    cfg.rope_style = s.rope;
    const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
    for (DType dt : {DType::kBf16, DType::kFp16}) {
      const model::ModelWeights rounded = Rounded(w, dt);
      for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
        auto cpu = MakeCpu(&rounded, mode);
        auto gpu = MakeCuda(&w, mode, dt);
        ASSERT_NE(gpu, nullptr);
        const std::string label =
            absl::StrCat("d", s.head_dim, " gqa", s.heads / s.kv_heads, " ",
                         kernels::cuda::DTypeName(dt), mode == AttentionMode::kTpp ? " tpp" : " paged");
        EXPECT_TRUE(CudaOf(*gpu).uses_tpp_kernel()) << label;  // kPaged: TPP's paged call
        EXPECT_LT(CompareSteps(*cpu, *gpu, cfg.vocab_size, SharedPrefixPrompts(cfg.vocab_size, rng),
                               6, label),
                  Tol(dt))
            << label;
      }
    }
  }
}

TEST_F(CudaBackendTest, NoAttentionModeMatchesCpu) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(64, 4, 2);
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  const model::ModelWeights rounded = Rounded(w, DType::kBf16);
  auto cpu = MakeCpu(&rounded, AttentionMode::kNone);
  auto gpu = MakeCuda(&w, AttentionMode::kNone, DType::kBf16);
  ASSERT_NE(gpu, nullptr);
  EXPECT_LT(CompareSteps(*cpu, *gpu, cfg.vocab_size, SharedPrefixPrompts(cfg.vocab_size, rng), 3,
                         "none"),
            Tol(DType::kBf16));
}

// The TPP kernel in the backend over a larger hierarchical batch: 72 rows (several phase-1 M
// tiles: 72 or 288 queries per kv head), a 160-token global prefix, 6 group prefixes of 32 tokens,
// private tails; 14 decode steps, of which one fills every row's last chunk (the work plan is
// rebuilt there and at the first step, and only advanced at the others).
TEST_F(CudaBackendTest, TppHierarchicalBatchMatchesCpu) {
  BANYAN_SEEDED_RNG(rng);
  struct Shape {
    int head_dim, heads, kv_heads;
  };
  constexpr int kBigPool = 2048;
  for (const Shape& s : {Shape{64, 4, 4}, Shape{128, 8, 2}, Shape{128, 4, 1}}) {
    const model::ModelConfig cfg = SmallConfig(s.head_dim, s.heads, s.kv_heads);
    const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
    for (DType dt : {DType::kBf16, DType::kFp16}) {
      const model::ModelWeights rounded = Rounded(w, dt);
      auto cpu = MakeCpu(&rounded, AttentionMode::kTpp, kBigPool);
      auto gpu = MakeCuda(&w, AttentionMode::kTpp, dt, kBigPool);
      ASSERT_NE(gpu, nullptr);
      ASSERT_TRUE(CudaOf(*gpu).uses_tpp_kernel());
      const std::string label =
          absl::StrCat("hierarchical d", s.head_dim, " heads ", s.heads, "/", s.kv_heads, " ",
                       kernels::cuda::DTypeName(dt));
      const auto prompts = HierarchicalPrompts(cfg.vocab_size, rng, 72, 160, 6, 32, 5);
      EXPECT_LT(CompareSteps(*cpu, *gpu, cfg.vocab_size, prompts, 14, label), Tol(dt)) << label;
      const CudaAttentionStats& st = CudaOf(*gpu).attention_stats();
      EXPECT_GE(st.tpp_plan_builds, 1) << label;
      EXPECT_GE(st.tpp_plan_updates, 1) << label << ": the work plan was never reused";
      EXPECT_GE(st.last_segments, 7) << label;  // the global prefix and the 6 group prefixes
    }
  }
}

// tpp mode over a batch that shares nothing: the plans have no segments, so the paged kernel
// runs (the TPP kernel is never launched), and the logits match the CPU.
TEST_F(CudaBackendTest, TppWithoutSharingRunsPagedKernel) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(128, 4, 1);
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  const model::ModelWeights rounded = Rounded(w, DType::kBf16);
  auto cpu = MakeCpu(&rounded, AttentionMode::kTpp);
  auto gpu = MakeCuda(&w, AttentionMode::kTpp, DType::kBf16);
  ASSERT_NE(gpu, nullptr);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = RandomTokens(20 + 9 * i, cfg.vocab_size, rng);
    p[0] = 1 + i;  // distinct first tokens: no shared node
    prompts.push_back(p);
  }
  EXPECT_LT(CompareSteps(*cpu, *gpu, cfg.vocab_size, prompts, 4, "no sharing tpp", false),
            Tol(DType::kBf16));
  EXPECT_EQ(CudaOf(*gpu).attention_stats().tpp_steps, 0);
}

// Greedy decoding of a shared-prefix batch gives the same tokens with `tpp` (the TPP kernel) as
// with `paged` (the paged kernel, plans without segments), for dummy models with head_dim 64 and
// 128 in bf16. The two kernels sum in different orders (phase 1 rounds P to bf16 before P V, as
// FlashAttention does), so logits differ by about 1e-3 of their norm; as in the batch-vs-solo
// test below, a divergence is accepted only at a near-tie: at the first differing token, the
// paged run's logits of the two candidates are within kNearTieLogits (logits are O(1) here).
TEST_F(CudaBackendTest, TppGreedyEqualsPaged) {
  constexpr float kNearTieLogits = 0.05f;
  BANYAN_SEEDED_RNG(rng);
  struct Shape {
    int head_dim, heads, kv_heads;
  };
  int equal = 0, near_ties = 0;
  for (const Shape& s : {Shape{64, 4, 4}, Shape{128, 4, 1}}) {
    const model::ModelConfig cfg = SmallConfig(s.head_dim, s.heads, s.kv_heads);
    const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
    std::vector<scheduler::Request> reqs;
    for (const auto& p : HierarchicalPrompts(cfg.vocab_size, rng, 24, 100, 3, 20, 3)) {
      scheduler::Request r;
      r.prompt = p;
      r.params.temperature = 0;
      r.params.max_tokens = 32;
      r.params.ignore_eos = true;
      reqs.push_back(r);
    }
    auto run = [&](AttentionMode mode, int64_t* tpp_steps) {
      CudaBackendOptions o;
      o.num_chunks = 1024;
      o.chunk_size = kChunkSize;
      o.attention = mode;
      auto b = CudaBackend::Create(&w, o);
      EXPECT_TRUE(b.ok()) << b.status();
      CudaBackend* cuda = b->get();
      scheduler::EngineLoop loop(w.config, nullptr, *std::move(b), BatchLoopOptions(mode));
      auto out = scheduler::GenerateAll(loop, reqs);
      EXPECT_TRUE(out.ok()) << out.status();
      *tpp_steps = cuda->attention_stats().tpp_steps;
      return out.ok() ? *out : std::vector<scheduler::GenerationResult>{};
    };
    int64_t tpp_steps = 0, paged_tpp_steps = 0;
    const auto tpp = run(AttentionMode::kTpp, &tpp_steps);
    const auto paged = run(AttentionMode::kPaged, &paged_tpp_steps);
    EXPECT_GT(tpp_steps, 0);
    EXPECT_EQ(paged_tpp_steps, 0);
    ASSERT_EQ(tpp.size(), reqs.size());
    ASSERT_EQ(paged.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::vector<int32_t>& a = tpp[i].samples[0].tokens;
      const std::vector<int32_t>& b = paged[i].samples[0].tokens;
      ASSERT_EQ(a.size(), b.size());
      const size_t j = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
      if (j == a.size()) {
        ++equal;
        continue;
      }
      // The paged logits after the common context.
      std::vector<int32_t> context = reqs[i].prompt;
      context.insert(context.end(), b.begin(), b.begin() + j);
      auto side = MakeCuda(&w, AttentionMode::kPaged, DType::kBf16);
      ASSERT_NE(side, nullptr);
      auto placed = side->tree.Insert("", context);
      ASSERT_TRUE(placed.ok());
      const int32_t n = static_cast<int32_t>(context.size());
      StepOutput out;
      ASSERT_TRUE(side->runner.RunLogits(placed->copies, {}, std::vector<PrefillItem>{{placed->seq, 0, n, 0, true, {}}}, &out).ok());
      const float gap = std::fabs(out.logits[a[j]] - out.logits[b[j]]);
      std::printf("d%d request %zu: tpp and paged diverge at token %zu: %d vs %d, logit gap %.4f\n",
                  s.head_dim, i, j, a[j], b[j], gap);
      EXPECT_LT(gap, kNearTieLogits) << "request " << i << ": tpp and paged diverge at token " << j
                                     << " without a near-tie";
      ++near_ties;
    }
  }
  std::printf("[ tpp vs paged ] %d of %d greedy sequences equal, %d near-tie divergences\n", equal,
              equal + near_ties, near_ties);
}

// The last-row logits of one random 40-token prompt prefilled on each backend are equal.
void ExpectSamePrefillLogits(std::unique_ptr<CudaBackend> x, std::unique_ptr<CudaBackend> y,
                             int vocab, std::mt19937_64& rng) {
  Side a(std::move(x), kChunks, kChunkSize, AttentionMode::kTpp);
  Side b(std::move(y), kChunks, kChunkSize, AttentionMode::kTpp);
  std::vector<int32_t> prompt(40);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  std::vector<float> logits[2];
  Side* sides[2] = {&a, &b};
  for (int s = 0; s < 2; ++s) {
    auto placed = sides[s]->tree.Insert("", prompt);
    ASSERT_TRUE(placed.ok());
    StepOutput out;
    ASSERT_TRUE(sides[s]->runner.RunLogits({}, {}, std::vector<PrefillItem>{{placed->seq, 0, 40, 0, true, {}}}, &out).ok());
    logits[s] = out.logits;
  }
  EXPECT_EQ(logits[0], logits[1]);
}

TEST_F(CudaBackendTest, DeviceDummyWeightsEqualHostDummyWeights) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(128, 4, 1);
  const uint64_t seed = rng();
  const model::ModelWeights w = model::MakeDummyWeights(cfg, seed);
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  auto from_host = CudaBackend::Create(&w, o);
  auto on_device = CudaBackend::CreateDummy(cfg, seed, o);
  ASSERT_TRUE(from_host.ok() && on_device.ok());
  // Same rounded weights, same kernels: bit for bit.
  ExpectSamePrefillLogits(std::move(*from_host), std::move(*on_device), cfg.vocab_size, rng);
}

// FP8 projections as W8A8 GEMMs against the CPU backend on the same FP8 weights (dequantized)
// with every projection's input rounded to FP8 as the GPU rounds it
// (CpuBackendOptions::fp8_activation_group: per token, or per 128 for block scales). The two
// roundings are shared only where both sides' inputs are equal: a bf16-sized difference moves
// about 4 % of a row's elements across an E4M3 boundary (one step, about 9 %), and after the
// first projections the inputs differ by more, so the roundings become independent. Each costs
// these small random models' logits about 0.07 (Fp8ForwardTest.ActivationRoundingMoves...), two
// independent ones about 0.1: the H100 gave 0.102-0.109 per channel and 0.077-0.085 with blocks
// (2026-12-05), the same against unrounded inputs. kFp8Tol is that model's bound, not a tight
// check: the layouts and scales are checked tightly by gpu_fp8_test (5e-3 against float64).
constexpr double kFp8Tol = 0.15;
constexpr int32_t kPerToken = 1 << 30;  // fp8_activation_group: one scale per token

TEST_F(CudaBackendTest, Fp8PerChannelProjectionsMatchCpu) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(128, 4, 2);
  const uint64_t seed = rng();
  model::ModelWeights w = model::MakeDummyWeights(cfg, seed);
  ASSERT_TRUE(model::QuantizeWeightsFp8(&w).ok());
  for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
    auto cpu = MakeCpu(&w, mode, kChunks, kPerToken);
    auto gpu = MakeCuda(&w, mode, DType::kBf16);
    ASSERT_NE(gpu, nullptr);
    ASSERT_FALSE(CudaOf(*gpu).fp8_projections().empty()) << CudaOf(*gpu).fp8_fallback();
    const std::string label = std::string("fp8 per-channel") + (mode == AttentionMode::kTpp ? " tpp" : " paged");
    const double err = CompareSteps(*cpu, *gpu, cfg.vocab_size,
                                    SharedPrefixPrompts(cfg.vocab_size, rng), 6, label);
    std::printf("[ %s ] worst logits rel err %.4f (tolerance %.2f)\n", label.c_str(), err, kFp8Tol);
    EXPECT_LT(err, kFp8Tol) << label;
  }
  // Dummy weights quantized on the device equal the host's --quantization fp8, bit for bit.
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  auto from_host = CudaBackend::Create(&w, o);
  o.fp8_dummy = true;
  auto on_device = CudaBackend::CreateDummy(cfg, seed, o);
  ASSERT_TRUE(from_host.ok() && on_device.ok());
  EXPECT_EQ((*from_host)->weight_bytes(), (*on_device)->weight_bytes());
  ExpectSamePrefillLogits(std::move(*from_host), std::move(*on_device), cfg.vocab_size, rng);
}

// --gpu-memory-utilization: the pool gets fraction x total less what was in use before, the
// weights and the workspace reserve: never more, and less by at most a chunk and the backend's
// own handles and buffers made before its memory plan (about 100 MB on an H200: cuBLAS, the FP8
// GEMM's workspace), which count as in use. A fraction that leaves nothing is refused, saying so.
TEST_F(CudaBackendTest, MemoryFractionSizesThePoolFromWhatRemains) {
  const model::ModelConfig cfg = SmallConfig(128, 4, 2);
  CudaBackendOptions o;
  o.chunk_size = kChunkSize;
  o.memory_fraction = 0.5;
  o.workspace_reserve_bytes = int64_t{256} << 20;
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  auto b = CudaBackend::CreateDummy(cfg, 7, o);
  ASSERT_TRUE(b.ok()) << b.status();
  const auto total = static_cast<int64_t>(total_b), in_use = total - static_cast<int64_t>(free_b);
  const int64_t want = total / 2 - in_use - (*b)->weight_bytes() - o.workspace_reserve_bytes;
  const int64_t chunk = CudaBackend::ChunkBytes(cfg, kChunkSize, DType::kBf16, false);
  if (want < chunk) GTEST_FAIL() << "this GPU has less than half its memory free: " << in_use;
  EXPECT_LE((*b)->kv_bytes(), want);
  EXPECT_GT((*b)->kv_bytes(), want - chunk - (int64_t{512} << 20));
  EXPECT_EQ((*b)->kv_bytes(), int64_t{(*b)->num_chunks()} * chunk);
  b->reset();
  o.memory_fraction = 1e-6;  // below what is in use already
  auto none = CudaBackend::CreateDummy(cfg, 7, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("not enough GPU memory"), std::string::npos)
      << none.status();
}

TEST_F(CudaBackendTest, Fp8BlockScaledCheckpointMatchesCpu) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(128, 4, 2);  // fused parts of 512, 256, 1536 rows
  model::testing::Fp8Checkpoint ck =
      model::testing::MakeFp8Checkpoint(cfg, model::testing::Fp8Layout::kFineGrained, false, rng);
  model::testing::TempDir dir;
  model::testing::WriteCheckpoint(dir.path(), ck.config, ck.entries);
  auto w = model::LoadModel(dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  auto cpu = MakeCpu(&*w, AttentionMode::kTpp, kChunks, kernels::cuda::kFp8Group);
  auto gpu = MakeCuda(&*w, AttentionMode::kTpp, DType::kBf16);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(CudaOf(*gpu).fp8_projections().find("128x128"), std::string::npos)
      << CudaOf(*gpu).fp8_projections() << CudaOf(*gpu).fp8_fallback();
  const double err = CompareSteps(*cpu, *gpu, cfg.vocab_size,
                                  SharedPrefixPrompts(cfg.vocab_size, rng), 6, "fp8 blocks");
  std::printf("[ fp8 blocks ] worst logits rel err %.4f (tolerance %.2f)\n", err, kFp8Tol);
  EXPECT_LT(err, kFp8Tol);
}

// The FP8 KV cache (CudaBackendOptions::kv_fp8) against the CPU backend rounding its KV rows
// the same way (CpuBackendOptions::kv_fp8), over every attention kernel family (head dims 64
// and 128 on the compiled ones, 96 on the generic phase 2; MHA and GQA; tpp and paged). The two
// sides quantize K / V values that already differ by bf16 roundings (the GPU's K and V are
// rounded to bf16 before they are quantized), and a value that crosses an E4M3 rounding boundary
// moves by a code step (1/16 to 1/8 of itself): about 6 % of the elements, worth about 60 % of
// FP8's own error, which on these models moves prefill logits by 0.05-0.065 against exact KV
// (engine_cpu_test's Fp8ForwardTest.KvCacheCostOnSmallRandomModels). kFp8KvTol allows for
// both; a wrong index or scale gives O(1). Then the cost of the FP8 cache itself: the same GPU run against the CPU keeping K / V in
// fp32 (printed, bounded by kFp8KvVsExactTol).
constexpr double kFp8KvTol = 0.1;
constexpr double kFp8KvVsExactTol = 0.15;

TEST_F(CudaBackendTest, Fp8KvCacheMatchesCpu) {
  BANYAN_SEEDED_RNG(rng);
  struct Shape {
    int head_dim, heads, kv_heads;
    model::RopeStyle rope;
  };
  for (const Shape& s : {Shape{64, 4, 4, model::RopeStyle::kHalf},
                         Shape{128, 8, 2, model::RopeStyle::kInterleaved},
                         Shape{96, 4, 2, model::RopeStyle::kHalf}}) {
    model::ModelConfig cfg = SmallConfig(s.head_dim, s.heads, s.kv_heads);
    cfg.rope_style = s.rope;
    const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
    const model::ModelWeights rounded = Rounded(w, DType::kBf16);
    for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
      const std::string label = absl::StrCat("kv fp8 d", s.head_dim, " gqa", s.heads / s.kv_heads,
                                             mode == AttentionMode::kTpp ? " tpp" : " paged");
      const auto prompts = SharedPrefixPrompts(cfg.vocab_size, rng);
      auto cpu8 = MakeCpu(&rounded, mode, kChunks, 0, /*kv_fp8=*/true);
      auto gpu8 = MakeCuda(&w, mode, DType::kBf16, kChunks, /*kv_fp8=*/true);
      ASSERT_NE(gpu8, nullptr);
      const double err = CompareSteps(*cpu8, *gpu8, cfg.vocab_size, prompts, 6, label);
      std::printf("[ %s ] against the CPU's FP8 rounding: worst logits rel err %.4f (bound %.2f)\n",
                  label.c_str(), err, kFp8KvTol);
      EXPECT_LT(err, kFp8KvTol) << label;
      auto cpu = MakeCpu(&rounded, mode);
      auto gpu8b = MakeCuda(&w, mode, DType::kBf16, kChunks, /*kv_fp8=*/true);
      ASSERT_NE(gpu8b, nullptr);
      const double cost = CompareSteps(*cpu, *gpu8b, cfg.vocab_size, prompts, 6, label + " vs fp32 KV");
      std::printf("[ %s ] against fp32 KV: worst logits rel err %.4f (bound %.2f)\n", label.c_str(),
                  cost, kFp8KvVsExactTol);
      EXPECT_LT(cost, kFp8KvVsExactTol) << label;
    }
  }
  // Twice the tokens in the same bytes, near enough: (head_dim + 1) bytes per value row.
  const model::ModelConfig cfg = SmallConfig(128, 8, 2);
  EXPECT_EQ(CudaBackend::ChunkBytes(cfg, 64, DType::kBf16, true) * 2 * 128,
            CudaBackend::ChunkBytes(cfg, 64, DType::kBf16) * 129);
}

// `requests` through the engine loop on a CUDA backend of 1,024 chunks (all admitted at once).
std::vector<scheduler::GenerationResult> GenerateOnCuda(const model::ModelWeights& w,
                                                        std::span<const scheduler::Request> requests,
                                                        AttentionMode mode, bool kv_fp8 = false) {
  CudaBackendOptions o;
  o.num_chunks = 1024;
  o.chunk_size = kChunkSize;
  o.attention = mode;
  o.kv_fp8 = kv_fp8;
  auto b = CudaBackend::Create(&w, o);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  scheduler::EngineLoop loop(w.config, nullptr, *std::move(b), BatchLoopOptions(mode));
  auto out = scheduler::GenerateAll(loop, requests);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<scheduler::GenerationResult>{};
}

// The FP8 KV cache's effect on what users see, on the bundled model: 16 story prompts decoded
// greedily for 48 tokens with a bf16 cache and with an FP8 one (tpp, one batch each). Reported:
// sequences identical, and the mean length of the common start. Asserted: the FP8 run completes
// every request and the common start averages at least 5 tokens (a broken cache diverges at
// once). The tiny model meets near-ties often: on the CPU (fp32, the same prompts through
// `banyan generate --kv-cache-dtype fp8`) 3 of 16 outputs stayed identical over 48 tokens and
// 4 of 16 changed at their first token.
TEST_F(CudaBackendTest, Fp8KvCacheGreedyAgreementOnStories) {
  auto bundle = model::LoadModelBundle(::banyan::testing::BundledModelPath());
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const model::ModelWeights& w = bundle->weights;
  const text::Tokenizer& tok = *bundle->tokenizer;
  std::vector<scheduler::Request> reqs;
  for (const char* q : {"Once upon a time", "One day, a little girl", "The cat and the dog",
                        "Tom had a big red ball", "In the park there was", "Lily wanted to",
                        "The sun was hot and", "A small bird sat on", "Mom said to Ben",
                        "There was a tree that", "The boy found a box", "Sara and her friend",
                        "It was a rainy day", "The old man had a", "Max ran to the", "Once there"}) {
    scheduler::Request r;
    r.prompt = tok.Encode(q, true);
    r.params.temperature = 0;
    r.params.max_tokens = 48;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  const auto bf16 = GenerateOnCuda(w, reqs, AttentionMode::kTpp);
  const auto fp8 = GenerateOnCuda(w, reqs, AttentionMode::kTpp, /*kv_fp8=*/true);
  ASSERT_EQ(bf16.size(), reqs.size());
  ASSERT_EQ(fp8.size(), reqs.size());
  int identical = 0, first_agree = 0;
  double common = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t>& a = bf16[i].samples[0].tokens;
    const std::vector<int32_t>& b = fp8[i].samples[0].tokens;
    ASSERT_EQ(b.size(), 48u) << "request " << i;
    const size_t j = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
    identical += j == a.size();
    first_agree += j > 0;
    common += static_cast<double>(j);
  }
  std::printf("[ kv fp8 vs bf16, stories260K greedy ] %d of %zu sequences identical over 48 "
              "tokens; common start %.1f tokens on average; first token equal in %d\n",
              identical, reqs.size(), common / reqs.size(), first_agree);
  EXPECT_GE(common / reqs.size(), 5.0);
}

// Greedy decoding of a shared-prefix batch equals each request run alone, on the GPU.
//
// GPU caveat (measured on the H200): cuBLAS picks its GEMM kernel by the number of rows, so a
// row's fp32 sums, and then its bf16-rounded activations and KV, can differ by an ulp between a
// batch and a solo run. Greedy tokens then differ only where the top two logits are closer than
// that noise. The test requires exact equality, except that a divergence must be such a near-tie:
// at the first differing token the solo run's logits of the two candidates are within
// kNearTieLogits (the bf16 batch-vs-solo logit noise is about 1e-2; a real bug gives O(1)).
TEST_F(CudaBackendTest, SharedPrefixBatchEqualsSoloRuns) {
  constexpr float kNearTieLogits = 0.05f;
  auto bundle = model::LoadModelBundle(::banyan::testing::BundledModelPath());
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const model::ModelWeights& w = bundle->weights;
  const text::Tokenizer& tok = *bundle->tokenizer;
  const std::string system =
      "Once upon a time, there was a little dog named Max. Max liked to run in the big green park "
      "with his friend, a small bird. The bird could sing very well and Max loved to listen. Every "
      "morning they met by the old tree near the pond, where the ducks swam and the flowers were "
      "red.";
  std::vector<scheduler::Request> reqs;
  for (const char* q : {" One day", " The bird said", " Max was sad because", " Then", "",
                        " Lily came to the park and"}) {
    scheduler::Request r;
    r.prompt = tok.Encode(system + q, true);
    r.params.temperature = 0;
    r.params.max_tokens = 40;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  auto run = [&](std::span<const scheduler::Request> rs, AttentionMode mode) {
    return GenerateOnCuda(w, rs, mode);
  };
  // Logits after `context`, from a solo prefill.
  auto solo_logits = [&](const std::vector<int32_t>& context) {
    auto side = MakeCuda(&w, AttentionMode::kPaged, DType::kBf16);
    auto placed = side->tree.Insert("", context);
    EXPECT_TRUE(placed.ok());
    const int32_t n = static_cast<int32_t>(context.size());
    StepOutput out;
    EXPECT_TRUE(side->runner.RunLogits(placed->copies, {}, std::vector<PrefillItem>{{placed->seq, 0, n, 0, true, {}}}, &out).ok());
    return out.logits;
  };
  int equal = 0, near_ties = 0;
  for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
    const auto all = run(reqs, mode);
    ASSERT_EQ(all.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto one = run(std::span(&reqs[i], 1), AttentionMode::kPaged);
      ASSERT_EQ(one.size(), 1u);
      const std::vector<int32_t>& a = all[i].samples[0].tokens;
      const std::vector<int32_t>& b = one[0].samples[0].tokens;
      ASSERT_EQ(a.size(), b.size());
      const size_t j = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
      if (j == a.size()) {
        ++equal;
        continue;
      }
      std::vector<int32_t> context = reqs[i].prompt;
      context.insert(context.end(), b.begin(), b.begin() + j);
      const std::vector<float> l = solo_logits(context);
      const float gap = std::fabs(l[a[j]] - l[b[j]]);
      std::printf("request %zu diverges at token %zu: %d vs %d, logit gap %.4f\n", i, j, a[j], b[j],
                  gap);
      EXPECT_LT(gap, kNearTieLogits) << "request " << i << ": batch and solo diverge at token "
                                     << j << " without a near-tie";
      ++near_ties;
    }
  }
  std::printf("[ batch vs solo ] %d of %d greedy sequences equal, %d near-tie divergences\n", equal,
              equal + near_ties, near_ties);
}

// Greedy sampling on the device (ForwardSample with temperature 0) takes the argmax of each row
// of Forward's logits.
TEST_F(CudaBackendTest, GreedySampleEqualsArgmaxOfForward) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = SmallConfig(64, 4, 1);
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  auto b = CudaBackend::Create(&w, o);
  ASSERT_TRUE(b.ok()) << b.status();
  kvcache::ChunkPool pool = *kvcache::ChunkPool::Create(kChunks, kChunkSize);
  kvcache::PrefixTree tree(&pool);
  StepBatch batch;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt(20 + i * 7);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.vocab_size);
    auto placed = tree.Insert("", prompt);
    ASSERT_TRUE(placed.ok());
    SeqWork sw;
    sw.tokens = prompt;
    sw.slots = tree.Slots(placed->seq, 0, static_cast<int32_t>(prompt.size()));
    sw.write_kv.assign(prompt.size(), 1);
    auto plan = kvcache::BuildAttentionPlan(tree, std::vector{placed->seq}, {.share = false});
    sw.span_chunk = plan.span_chunk;
    sw.span_begin = plan.span_begin;
    sw.span_end = plan.span_end;
    batch.prefill.push_back(sw);
  }
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  ASSERT_TRUE((*b)->Forward(batch, &logits).ok());
  testing::GreedySteps greedy;
  ASSERT_TRUE(greedy.Forward(**b, batch, &tokens).ok());
  ASSERT_EQ(tokens.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const float* row = logits.data() + size_t(r) * cfg.vocab_size;
    EXPECT_EQ(tokens[r], std::max_element(row, row + cfg.vocab_size) - row);
  }
}

TEST_F(CudaBackendTest, OutOfMemoryMessageHasNumbers) {
  auto cfg = model::NamedShapeConfig("llama-2-13b-shape");
  ASSERT_TRUE(cfg.ok());
  CudaBackendOptions o;
  o.num_chunks = 2000000;  // ~1.6 TB of KV
  auto b = CudaBackend::CreateDummy(*cfg, 1, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_NE(b.status().message().find("GiB"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("2000000 chunks"), std::string::npos) << b.status();
  std::printf("OOM message: %s\n", std::string(b.status().message()).c_str());
}

// The transformers oracle: tools/gpu/hf_oracle.py wrote random-weight LlamaForCausalLM models
// with save_pretrained, one per subfolder of $BANYAN_HF_ORACLE_DIR, plus their float64 logits for
// fixed token ids. Each sequence is prefilled up to half its length, then decoded token by token
// (teacher forcing); every position's logits are compared with transformers'.
// One row of the oracle table: a model folder on one backend.
struct OracleRow {
  std::string model, backend;
  double max_abs = 0, worst_rel = 0, tol = 0;
};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    m = std::max(m, std::fabs(double{a[i]} - b[i]));
  }
  return m;
}

void CheckOracleFolder(const std::string& dir, std::vector<OracleRow>* table) {
  SCOPED_TRACE(dir);
  auto w = model::LoadModel(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const model::ModelConfig& c = w->config;
  std::printf("[ transformers oracle ] %s: %s, dim %d, heads %d/%d, head_dim %d, layers %d, "
              "rope_theta %g, llama3 scaling %d, qkv bias %d, q/k norm %d, tied %d\n",
              dir.c_str(), c.arch.c_str(), c.dim, c.n_heads, c.n_kv_heads, c.head_dim(),
              c.n_layers, c.rope_theta, c.rope_scaling.type == model::RopeScalingType::kLlama3 ? 1 : 0,
              c.qkv_bias ? 1 : 0, c.qk_norm ? 1 : 0, c.tie_embeddings ? 1 : 0);
  const int vocab = c.vocab_size;
  std::ifstream tok_file(dir + "/oracle_tokens.txt");
  ASSERT_TRUE(tok_file.good());
  std::vector<std::vector<int32_t>> seqs;
  for (std::string line; std::getline(tok_file, line);) {
    std::istringstream in(line);
    std::vector<int32_t> s;
    for (int32_t t; in >> t;) s.push_back(t);
    if (!s.empty()) seqs.push_back(s);
  }
  std::ifstream logit_file(dir + "/oracle_logits.bin", std::ios::binary);
  ASSERT_TRUE(logit_file.good());
  std::vector<std::vector<float>> want;  // [seq][pos * vocab]
  for (const auto& s : seqs) {
    want.emplace_back(s.size() * vocab);
    logit_file.read(reinterpret_cast<char*>(want.back().data()),
                    static_cast<std::streamsize>(want.back().size() * 4));
    ASSERT_TRUE(logit_file.good());
  }
  struct Run {
    bool gpu;
    DType dt;
  };
  for (const Run& run : {Run{false, DType::kBf16}, Run{true, DType::kBf16}, Run{true, DType::kFp16}}) {
    std::unique_ptr<Side> side = run.gpu ? MakeCuda(&*w, AttentionMode::kTpp, run.dt)
                                         : MakeCpu(&*w, AttentionMode::kTpp);
    ASSERT_NE(side, nullptr);
    double worst = 0, max_abs = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& s = seqs[i];
      const int half = static_cast<int>(s.size()) / 2;
      auto placed = side->tree.Insert("", std::span(s.data(), half));
      ASSERT_TRUE(placed.ok());
      StepOutput out;
      const PrefillItem item{placed->seq, std::min(placed->matched_tokens, half - 1), half,
                             placed->matched_tokens, true, {}};
      ASSERT_TRUE(side->runner.RunLogits(placed->copies, {}, std::vector<PrefillItem>{item}, &out).ok());
      auto slice = [&](int pos) {
        return std::vector<float>(want[i].begin() + int64_t{pos} * vocab,
                                  want[i].begin() + int64_t{pos + 1} * vocab);
      };
      auto account = [&](const std::vector<float>& got, int pos) {
        const std::vector<float> ref = slice(pos);
        worst = std::max(worst, RelErr(got, ref));
        max_abs = std::max(max_abs, MaxAbsDiff(got, ref));
      };
      account(out.logits, half - 1);
      for (int pos = half; pos < static_cast<int>(s.size()); ++pos) {
        auto appended = side->tree.Append(placed->seq, s[pos]);
        ASSERT_TRUE(appended.ok());
        const DecodeItem d{placed->seq, !appended->new_slots.empty(), {}};
        ASSERT_TRUE(side->runner.RunLogits(appended->copies, std::vector<DecodeItem>{d}, {}, &out).ok());
        account(out.logits, pos);
      }
    }
    const std::string label =
        run.gpu ? std::string("cuda ") + kernels::cuda::DTypeName(run.dt) : "cpu fp32";
    const double tol = run.gpu ? Tol(run.dt) : 1e-4;
    std::printf("[ transformers oracle ] %s: worst rel err %.3g, max abs err %.3g over %zu sequences\n",
                label.c_str(), worst, max_abs, seqs.size());
    table->push_back({std::filesystem::path(dir).filename().string(), label, max_abs, worst, tol});
    EXPECT_LT(worst, tol) << label;  // NaN fails too: RelErr returns a huge value for it
  }
}

TEST_F(CudaBackendTest, MatchesTransformersOracle) {
  // Unset: a run by hand without the oracle. Set (tools/gpu/device_run.sh always sets it): the
  // oracle was asked for, and a missing or empty folder fails rather than skips.
  const char* root = std::getenv("BANYAN_HF_ORACLE_DIR");
  if (root == nullptr) GTEST_SKIP() << "BANYAN_HF_ORACLE_DIR not set (see tools/gpu/hf_oracle.py)";
  ASSERT_TRUE(std::filesystem::is_directory(root))
      << "BANYAN_HF_ORACLE_DIR=" << root
      << " is not a folder: tools/gpu/hf_oracle.py did not write the oracle";
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(entry.path() / "config.json")) folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());
  ASSERT_GT(folders.size(), 0u) << "BANYAN_HF_ORACLE_DIR=" << root
                                << " holds no model folder (config.json): tools/gpu/hf_oracle.py "
                                   "did not write the oracle";
  std::vector<OracleRow> table;
  for (const auto& f : folders) CheckOracleFolder(f.string(), &table);
  std::printf("[ transformers oracle ] %-24s %-10s %12s %12s %10s\n", "model", "backend",
              "max abs err", "rel err", "tolerance");
  for (const OracleRow& r : table) {
    std::printf("[ transformers oracle ] %-24s %-10s %12.3g %12.3g %10.3g %s\n", r.model.c_str(),
                r.backend.c_str(), r.max_abs, r.worst_rel, r.tol,
                r.worst_rel < r.tol ? "ok" : "FAIL");
  }
}

// The architecture variants ModelConfig describes (q/k/v biases, per-head q/k norm with a
// head_dim that is not dim / heads, Llama 3 RoPE scaling, tied embeddings), on dummy weights:
// the CUDA backend (its QkvBiasNorm kernel, the scaled RoPE table; graphs on) against the CPU
// backend, tpp and paged, bf16 and fp16.
TEST_F(CudaBackendTest, ArchitectureVariantsMatchCpu) {
  BANYAN_SEEDED_RNG(rng);
  struct Variant {
    const char* name;
    int head_dim, heads, kv_heads, dim;
    bool bias, qk_norm, llama3, tied;
  };
  for (const Variant& v : {Variant{"qwen2-like d64", 64, 4, 2, 256, true, false, false, true},
                           Variant{"qwen3-like d128", 128, 4, 2, 256, false, true, false, false},
                           Variant{"llama3-like d64", 64, 8, 2, 512, false, false, true, true},
                           Variant{"all d128 gqa4", 128, 8, 2, 512, true, true, true, false},
                           Variant{"qwen3-like d32 (paged kernel only)", 32, 4, 4, 256, true, true,
                                   false, false}}) {
    model::ModelConfig cfg = SmallConfig(v.head_dim, v.heads, v.kv_heads);
    cfg.dim = v.dim;
    cfg.hidden_dim = 2 * v.dim;
    if (v.dim != v.head_dim * v.heads) cfg.head_size = v.head_dim;
    cfg.qkv_bias = v.bias;
    cfg.qk_norm = v.qk_norm;
    cfg.tie_embeddings = v.tied;
    if (v.llama3) {
      cfg.rope_theta = 500000.0f;
      cfg.rope_scaling.type = model::RopeScalingType::kLlama3;
      cfg.rope_scaling.factor = 8.0f;
      cfg.rope_scaling.original_max_pos = 64;
    }
    const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
    for (DType dt : {DType::kBf16, DType::kFp16}) {
      const model::ModelWeights rounded = Rounded(w, dt);
      for (AttentionMode mode : {AttentionMode::kTpp, AttentionMode::kPaged}) {
        auto cpu = MakeCpu(&rounded, mode);
        auto gpu = MakeCuda(&w, mode, dt);
        ASSERT_NE(gpu, nullptr) << v.name;
        const std::string label = absl::StrCat(v.name, " ", kernels::cuda::DTypeName(dt),
                                               mode == AttentionMode::kTpp ? " tpp" : " paged");
        EXPECT_LT(CompareSteps(*cpu, *gpu, cfg.vocab_size, SharedPrefixPrompts(cfg.vocab_size, rng),
                               6, label),
                  Tol(dt))
            << label;
      }
    }
  }
}

}  // namespace
}  // namespace banyan::engine
