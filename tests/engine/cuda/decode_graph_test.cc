// CUDA graphs of the decode step (CudaBackendOptions::cuda_graphs): two backends on the same
// weights, one with graphs and one without, are driven through the same steps and must agree.
//
// The run changes the decode batch's shape several times: a shared-prefix batch decodes across
// chunk boundaries (new chunks: plan rebuilds), two sequences join through a mixed step (decode
// rows + prefill, which runs eagerly), a sequence forks into three, three sequences finish. Every
// decode-only step runs Forward (logits) and then ForwardSample with temperature 0 (device greedy
// sampling, tests/engine/cuda/greedy_steps.h) on the same batch in the graphs-on backend (the second run
// rewrites the same K/V values, so the cache stays equal to the graphs-off backend's). Tokens are
// teacher-forced from the graphs-off logits.
//
// Checked: logits with graphs equal logits without, bit for bit: a replay launches the same
// kernels with the same arguments as the eager path, and cuBLAS runs on the same handle and
// workspace, so nothing may differ (the relative error is printed as well); device greedy
// sampling equals the host argmax of the graph logits; every decode-only step went through a graph and no step
// with prefill did; a step whose attention plan was only advanced (same shape) and that follows
// a graph step replays without capturing; captures and replays both happened; plan changes
// within the padded row bucket updated the attention nodes instead of capturing. With
// graph_min_stable_steps = 2 (the default) a new key runs eagerly once and is captured on its
// second step. tpp (head_dim 128 GQA 4
// with the deferred-merge schedule forced, so the side-stream fork is captured; head_dim 64 MHA
// with the default schedule) and paged (head_dim 128). On sm_90 the graphs launch the layer
// kernels early (CudaBackendOptions::graph_early_launch_rows, 0 in one case; these steps
// have fewer rows than graph_early_launch_rows): the executables must have such edges, and the
// logits stay bitwise equal. One case has q/k/v biases and q/k norms: QkvBiasNorm runs between
// the QKV GEMM and RoPE (two early-launched kernels in a row; fp32 GEMM outputs). Two cases keep
// K and V in FP8 (CudaBackendOptions::kv_fp8): their attention nodes are the kernels' FP8
// instantiations, which the node updates must name (a served run once recaptured instead).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "model/dummy_weights.h"
#include "engine/step_runner.h"
#include "gtest/gtest.h"
#include "kvcache/attention_plan.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/engine/cuda/greedy_steps.h"
#include "tests/engine/cuda/small_model.h"
#include "tests/testing/random.h"

namespace banyan::engine {
namespace {

using kernels::cuda::DType;
using cuda::DecodeGraphStats;
using kvcache::SeqId;
using ::banyan::testing::RelErr;

constexpr int kChunks = 512;
constexpr int kChunkSize = 16;

// One backend with its own pool and tree, stepping as StepRunner does (kept here so that the
// same decode batch can go through both Forward and a greedy ForwardSample).
struct Lane {
  Lane(std::unique_ptr<CudaBackend> b, AttentionMode mode)
      : pool(*kvcache::ChunkPool::Create(kChunks, kChunkSize)), tree(&pool),
        backend(std::move(b)), share(mode != AttentionMode::kPaged) {}

  // A step: `decode` (sequence, token) rows append their token; `prefill` sequences were just
  // inserted (their uncached positions are computed). Rows in the result: decode rows in DFS
  // order (*rows), then prefill sequences in order. With `greedy`, a greedy ForwardSample runs
  // on the same batch after Forward.
  void Step(const std::vector<std::pair<SeqId, int32_t>>& decode,
            const std::vector<PrefillItem>& prefill, std::vector<kvcache::ChunkCopy> copies,
            bool greedy, std::vector<float>* logits, std::vector<int32_t>* tokens,
            std::vector<SeqId>* rows, bool* rebuilt) {
    StepBatch batch;
    rows->clear();
    *rebuilt = false;
    if (!decode.empty()) {
      auto placed = tree.AppendBatch(decode);
      ASSERT_TRUE(placed.ok()) << placed.status();
      std::vector<SeqId> seqs;
      std::vector<bool> writes;
      for (const auto& p : *placed) {
        copies.insert(copies.end(), p.copies.begin(), p.copies.end());
        seqs.push_back(p.seq);
        writes.push_back(!p.new_slots.empty());
      }
      for (SeqId s : tree.DfsOrder()) {
        if (std::find(seqs.begin(), seqs.end(), s) != seqs.end()) rows->push_back(s);
      }
      if (kvcache::PlanReusable(plan, tree, *rows)) {
        kvcache::AdvanceLengths(plan, tree);
      } else {
        plan = kvcache::BuildAttentionPlan(tree, *rows, {.share = share});
        *rebuilt = true;
      }
      batch.plan = &plan;
      for (SeqId s : *rows) {
        const int32_t len = tree.Length(s);
        SeqWork w;
        w.pos0 = len - 1;
        w.tokens = {tree.LastToken(s)};
        w.slots = tree.Slots(s, len - 1, len);
        const size_t i = std::find(seqs.begin(), seqs.end(), s) - seqs.begin();
        w.write_kv = {static_cast<uint8_t>(writes[i] ? 1 : 0)};
        batch.decode.push_back(std::move(w));
      }
    }
    for (const PrefillItem& p : prefill) {
      std::vector<int32_t> all = tree.Tokens(p.seq);
      SeqWork w;
      w.pos0 = p.begin;
      w.tokens.assign(all.begin() + p.begin, all.begin() + p.end);
      w.slots = tree.Slots(p.seq, p.begin, p.end);
      for (int32_t i = p.begin; i < p.end; ++i) w.write_kv.push_back(i >= p.cached_end);
      w.want_logits = true;
      kvcache::AttentionPlan row =
          kvcache::BuildAttentionPlan(tree, std::span<const SeqId>(&p.seq, 1), {.share = false});
      w.span_chunk = row.span_chunk;
      w.span_begin = row.span_begin;
      w.span_end = row.span_end;
      batch.prefill.push_back(std::move(w));
    }
    ASSERT_TRUE(backend->CopyChunks(copies).ok());
    const absl::Status st = backend->Forward(batch, logits);
    ASSERT_TRUE(st.ok()) << st;
    if (greedy) {
      const absl::Status sg = greedy_steps.Forward(*backend, batch, tokens);
      ASSERT_TRUE(sg.ok()) << sg;
    }
  }

  kvcache::ChunkPool pool;
  kvcache::PrefixTree tree;
  std::unique_ptr<CudaBackend> backend;
  bool share;
  kvcache::AttentionPlan plan;
  testing::GreedySteps greedy_steps;  // the backend's greedy steps (temperature 0)
};

std::vector<int32_t> RandomTokens(int n, int vocab, std::mt19937_64& rng) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = 1 + static_cast<int32_t>(rng() % (vocab - 1));
  return t;
}

int32_t Argmax(const std::vector<float>& logits, size_t row, int vocab) {
  const float* r = logits.data() + row * vocab;
  return static_cast<int32_t>(std::max_element(r, r + vocab) - r);
}

struct Case {
  const char* label;
  int head_dim, heads, kv_heads;
  AttentionMode mode;
  int32_t defer_merge;  // TppOptions::defer_merge
  int32_t min_stable;   // CudaBackendOptions::graph_min_stable_steps
  bool late_launch = false;  // CudaBackendOptions::graph_early_launch_rows = 0
  bool qkv_extras = false;   // q/k/v biases and per-head q/k norms (QkvBiasNorm before RoPE)
  bool kv_fp8 = false;       // CudaBackendOptions::kv_fp8: the attention nodes are the KV8 kernels
};

// Runs the scenario of the file comment for one case.
void RunCase(const Case& c, std::mt19937_64& rng) {
  model::ModelConfig cfg = testing::SmallModelConfig(c.head_dim, c.heads, c.kv_heads);
  cfg.qkv_bias = cfg.qk_norm = c.qkv_extras;
  const int vocab = cfg.vocab_size;
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  std::unique_ptr<Lane> lanes[2];  // 0: graphs off (the reference), 1: graphs on
  for (int g = 0; g < 2; ++g) {
    CudaBackendOptions o;
    o.num_chunks = kChunks;
    o.chunk_size = kChunkSize;
    o.attention = c.mode;
    o.tpp.defer_merge = c.defer_merge;
    o.cuda_graphs = g == 1;
    o.graph_min_stable_steps = c.min_stable;
    if (c.late_launch) o.graph_early_launch_rows = 0;
    o.kv_fp8 = c.kv_fp8;
    auto b = CudaBackend::Create(&w, o);
    ASSERT_TRUE(b.ok()) << b.status();
    lanes[g] = std::make_unique<Lane>(std::move(*b), c.mode);
  }
  CudaBackend& on = *lanes[1]->backend;
  ASSERT_TRUE(on.cuda_graphs());
  ASSERT_FALSE(lanes[0]->backend->cuda_graphs());

  // Live sequences (the same ids on both lanes: the trees see the same operations) and the token
  // each appends next.
  std::vector<SeqId> live;
  std::vector<int32_t> next;
  const std::vector<int32_t> prefix = RandomTokens(40, vocab, rng);
  auto prompt = [&] {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> tail = RandomTokens(3 + static_cast<int>(rng() % 18), vocab, rng);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };

  int decode_only_steps = 0, replay_steps = 0, bitwise_steps = 0, steps = 0;
  int rebuild_steps = 0;
  double worst = 0;
  int run_len = 0;  // decode-only steps in a row with the same plan shape, this one included
  // One step on both lanes: decode every live sequence, prefill `joining` new prompts.
  auto step = [&](const std::vector<std::vector<int32_t>>& joining) {
    const bool decode_only = joining.empty();
    std::vector<float> logits[2];
    std::vector<int32_t> greedy;
    std::vector<SeqId> rows[2];
    std::vector<SeqId> joined[2];
    bool rebuilt[2] = {false, false};
    const DecodeGraphStats before = on.attention_stats().graph;
    for (int g = 0; g < 2; ++g) {
      Lane& lane = *lanes[g];
      std::vector<std::pair<SeqId, int32_t>> decode;
      for (size_t i = 0; i < live.size(); ++i) decode.emplace_back(live[i], next[i]);
      std::vector<PrefillItem> prefill;
      std::vector<kvcache::ChunkCopy> copies;
      for (const auto& p : joining) {
        auto placed = lane.tree.Insert("", p);
        ASSERT_TRUE(placed.ok()) << placed.status();
        copies.insert(copies.end(), placed->copies.begin(), placed->copies.end());
        const int32_t len = static_cast<int32_t>(p.size());
        prefill.push_back({placed->seq, std::min(placed->matched_tokens, len - 1), len,
                           placed->matched_tokens, true, {}});
        joined[g].push_back(placed->seq);
      }
      lane.Step(decode, prefill, copies, g == 1 && decode_only, &logits[g], &greedy, &rows[g],
                &rebuilt[g]);
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_EQ(rows[0], rows[1]);
    ASSERT_EQ(joined[0], joined[1]);
    ASSERT_EQ(logits[0].size(), logits[1].size());
    ++steps;
    const double err = RelErr(logits[1], logits[0]);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-6) << c.label << " step " << steps;
    if (std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) == 0) {
      ++bitwise_steps;
    }
    const DecodeGraphStats& after = on.attention_stats().graph;
    if (decode_only) {
      ++decode_only_steps;
      if (rebuilt[1]) ++rebuild_steps;
      run_len = rebuilt[1] ? 1 : run_len + 1;
      // Forward and ForwardSample both ran, through a graph or eagerly while their key was new.
      EXPECT_EQ(after.steps - before.steps + after.unstable - before.unstable, 2)
          << c.label << " step " << steps;
      const int64_t captures = after.captures - before.captures;
      if (run_len > c.min_stable) {
        EXPECT_EQ(captures, 0) << c.label << " step " << steps
                               << ": the same shape was captured already, yet captured again";
      }
      if (captures == 0) ++replay_steps;
      ASSERT_EQ(greedy.size(), rows[1].size());
      for (size_t r = 0; r < rows[1].size(); ++r) {
        EXPECT_EQ(greedy[r], Argmax(logits[1], r, vocab)) << c.label << " row " << r;
      }
    } else {
      EXPECT_EQ(after.steps, before.steps) << c.label << ": a step with prefill used a graph";
      run_len = 0;
    }
    // Teacher forcing from the graphs-off logits: decode rows, then the joining sequences.
    for (size_t r = 0; r < rows[0].size(); ++r) {
      next[std::find(live.begin(), live.end(), rows[0][r]) - live.begin()] =
          Argmax(logits[0], r, vocab);
    }
    for (size_t j = 0; j < joined[0].size(); ++j) {
      live.push_back(joined[0][j]);
      next.push_back(Argmax(logits[0], rows[0].size() + j, vocab));
    }
  };

  // A shared-prefix batch of 4, decoded across chunk boundaries.
  step({prompt(), prompt(), prompt(), prompt()});
  for (int i = 0; i < 24 && !::testing::Test::HasFatalFailure(); ++i) step({});
  // Two sequences join (a mixed step), then 6 rows decode.
  step({prompt(), prompt()});
  for (int i = 0; i < 12 && !::testing::Test::HasFatalFailure(); ++i) step({});
  // Sequence 0 forks into three; the forks take other tokens next.
  for (int g = 0; g < 2; ++g) {
    auto forks = lanes[g]->tree.Fork(live[0], 3);
    ASSERT_TRUE(forks.ok()) << forks.status();
    if (g == 1) {
      ASSERT_EQ((*forks)[1], live[live.size() - 2]);
      ASSERT_EQ((*forks)[2], live[live.size() - 1]);
    } else {
      for (int k = 1; k < 3; ++k) {
        live.push_back((*forks)[k]);
        next.push_back((next[0] + 7 * k) % vocab);
      }
    }
  }
  for (int i = 0; i < 12 && !::testing::Test::HasFatalFailure(); ++i) step({});
  // Three sequences finish.
  for (int idx : {5, 3, 1}) {
    for (int g = 0; g < 2; ++g) ASSERT_TRUE(lanes[g]->tree.Release(live[idx]).ok());
    live.erase(live.begin() + idx);
    next.erase(next.begin() + idx);
  }
  for (int i = 0; i < 12 && !::testing::Test::HasFatalFailure(); ++i) step({});

  const CudaAttentionStats& st = on.attention_stats();
  const DecodeGraphStats& g = st.graph;
  std::printf(
      "[ %s ] %d steps (%d decode-only, %d with a plan rebuild): logits bitwise equal in %d, "
      "largest rel err %.3g; graph steps %lld: %lld replays, %lld captures (%.0f us); %lld "
      "eager (unstable key); %lld attention-node updates "
      "(%lld nodes, %.0f us); TPP steps %lld, plan builds %lld; fallbacks %lld %s\n",
      c.label, steps, decode_only_steps, rebuild_steps, bitwise_steps, worst,
      static_cast<long long>(g.steps), static_cast<long long>(g.replays),
      static_cast<long long>(g.captures), g.capture_host_us, static_cast<long long>(g.unstable),
      static_cast<long long>(g.patches), static_cast<long long>(g.patched_nodes), g.patch_host_us,
      static_cast<long long>(st.tpp_steps),
      static_cast<long long>(st.tpp_plan_builds), static_cast<long long>(g.fallbacks),
      on.graph_error().c_str());
  EXPECT_EQ(g.fallbacks, 0) << on.graph_error();
  EXPECT_EQ(g.patch_failures, 0) << on.graph_update_error();
  EXPECT_EQ(bitwise_steps, steps) << c.label;
  EXPECT_EQ(g.steps + g.unstable, 2 * decode_only_steps);
  EXPECT_EQ(g.replays + g.captures, g.steps);
  EXPECT_GT(g.captures, 0);
  EXPECT_GT(rebuild_steps, 3) << c.label << ": the run should change shape several times";
  EXPECT_GT(replay_steps, 0) << c.label;
  // Rows join, fork and leave within one padded row bucket and cross chunk boundaries: the
  // attention nodes are updated in place, which is what keeps serving on graphs. Bitwise equal
  // logits above show the updated nodes run the new work.
  EXPECT_GT(g.patches, 0) << c.label;
  if (g.patches > 0) {
    EXPECT_EQ(g.patched_nodes % g.patches, 0) << c.label;
  }
  if (c.mode == AttentionMode::kTpp) {
    EXPECT_GT(st.tpp_steps, 0) << c.label;
    EXPECT_GT(st.tpp_plan_builds, 3) << c.label;
  }
  // On sm_90 the layer kernels after a GEMM are launched early (the equality above holds with
  // them): per layer its two RMSNorms, RoPE (or QKV bias / norm, then RoPE after it) and SwiGLU,
  // and the final RMSNorm.
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  std::printf("[ %s ] edges launched early in the last executable: %lld %s\n", c.label,
              static_cast<long long>(g.early_edges), on.graph_early_error().c_str());
  if (c.late_launch || major < 9) {
    EXPECT_EQ(g.early_edges, 0) << c.label;
  } else {
    EXPECT_GE(g.early_edges, (c.qkv_extras ? 5 : 4) * cfg.n_layers + 1)
        << c.label << ": " << on.graph_early_error();
  }
}

class DecodeGraphTest : public ::testing::Test {
 protected:
};

TEST_F(DecodeGraphTest, GraphsOnEqualGraphsOffAcrossShapeChanges) {
  BANYAN_SEEDED_RNG(rng);
  for (const Case& c :
       {Case{"tpp d128 gqa4 deferred", 128, 4, 1, AttentionMode::kTpp, 1, 1},
        Case{"tpp d64 mha", 64, 4, 4, AttentionMode::kTpp, -1, 1},
        Case{"paged d128 gqa4", 128, 4, 1, AttentionMode::kPaged, -1, 1},
        Case{"tpp d128 gqa4 stable 2", 128, 4, 1, AttentionMode::kTpp, -1, 2},
        Case{"paged d128 gqa4 stable 2", 128, 4, 1, AttentionMode::kPaged, -1, 2},
        Case{"tpp d64 mha late launch", 64, 4, 4, AttentionMode::kTpp, -1, 1, true},
        Case{"tpp d128 gqa4 biases + qk norms", 128, 4, 1, AttentionMode::kTpp, -1, 1, false,
             true},
        Case{"tpp d128 gqa4 FP8 KV", 128, 4, 1, AttentionMode::kTpp, -1, 1, false, false, true},
        Case{"paged d64 mha FP8 KV", 64, 4, 4, AttentionMode::kPaged, -1, 1, false, false,
             true}}) {
    SCOPED_TRACE(c.label);
    RunCase(c, rng);
    if (HasFatalFailure()) return;
  }
}

// Turning graphs off and on again between steps is allowed (the benchmark does it); a backend
// with graphs off never captures.
TEST_F(DecodeGraphTest, SetCudaGraphsTogglesThePath) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = testing::SmallModelConfig(128, 2, 2, /*layers=*/1, /*vocab=*/256, 256);
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  o.graph_min_stable_steps = 1;
  auto b = CudaBackend::Create(&w, o);
  ASSERT_TRUE(b.ok()) << b.status();
  Lane lane(std::move(*b), AttentionMode::kTpp);
  auto placed = lane.tree.Insert("", RandomTokens(20, cfg.vocab_size, rng));
  ASSERT_TRUE(placed.ok());
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<SeqId> rows;
  bool rebuilt = false;
  lane.Step({}, {{placed->seq, 0, 20, 0, true, {}}}, placed->copies, false, &logits, &tokens, &rows,
            &rebuilt);
  for (bool graphs : {false, true, false, true}) {
    lane.backend->SetCudaGraphs(graphs);
    const int64_t before = lane.backend->attention_stats().graph.steps;
    lane.Step({{placed->seq, 5}}, {}, {}, true, &logits, &tokens, &rows, &rebuilt);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(lane.backend->attention_stats().graph.steps - before, graphs ? 2 : 0);
    ASSERT_EQ(tokens.size(), 1u);
    EXPECT_EQ(tokens[0], Argmax(logits, 0, cfg.vocab_size));
  }
}

}  // namespace
}  // namespace banyan::engine
