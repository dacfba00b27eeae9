// Greedy steps launched ahead of their results (CudaBackend::LaunchSample / CollectSample with
// temperature 0, tests/engine/cuda/greedy_steps.h): the host places and launches step N + 1 before step
// N's tokens are back, and each decode row's input token is fed on the device from the step
// before. Two backends on the same weights, each with its own pool and tree, decode the same
// sequences: one step by step with ForwardSample (the reference, its trees holding the real
// tokens), one pipelined with two steps in flight
// (its tree holding placeholder tokens, the real ones only on the device). The tokens must be
// equal, step by step and row by row: the same kernels run on the same inputs. The run crosses
// chunk boundaries (plan rebuilds, graph node updates and captures) with graphs on and off, on
// the TPP kernels (head_dim 128, GQA 4, a shared prefix) and on the paged ones.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "model/dummy_weights.h"
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

using kvcache::SeqId;

constexpr int kChunks = 256;
constexpr int kChunkSize = 16;

// One backend with its pool and tree.
struct Side {
  Side(std::unique_ptr<CudaBackend> b, bool share)
      : pool(*kvcache::ChunkPool::Create(kChunks, kChunkSize)), tree(&pool),
        backend(std::move(b)), share(share) {}

  // Appends `token` (one per sequence, by id) and builds the decode batch over every sequence,
  // rows in DFS order (*rows).
  void Place(const std::map<SeqId, int32_t>& token, StepBatch* batch, std::vector<SeqId>* rows) {
    std::vector<std::pair<SeqId, int32_t>> appends(token.begin(), token.end());
    auto placed = tree.AppendBatch(appends);
    ASSERT_TRUE(placed.ok()) << placed.status();
    std::map<SeqId, bool> writes;
    std::vector<kvcache::ChunkCopy> copies;
    for (const auto& p : *placed) {
      writes[p.seq] = !p.new_slots.empty();
      copies.insert(copies.end(), p.copies.begin(), p.copies.end());
    }
    ASSERT_TRUE(backend->CopyChunks(copies).ok());
    rows->clear();
    for (SeqId s : tree.DfsOrder()) {
      if (token.contains(s)) rows->push_back(s);
    }
    if (kvcache::PlanReusable(plan, tree, *rows)) {
      kvcache::AdvanceLengths(plan, tree);
    } else {
      plan = kvcache::BuildAttentionPlan(tree, *rows, {.share = share});
    }
    batch->plan = &plan;
    batch->decode.clear();
    for (SeqId s : *rows) {
      const int32_t len = tree.Length(s);
      SeqWork w;
      w.pos0 = len - 1;
      w.tokens = {tree.LastToken(s)};
      w.slots = tree.Slots(s, len - 1, len);
      w.write_kv = {static_cast<uint8_t>(writes.at(s) ? 1 : 0)};
      batch->decode.push_back(std::move(w));
    }
  }

  kvcache::ChunkPool pool;
  kvcache::PrefixTree tree;
  std::unique_ptr<CudaBackend> backend;
  bool share;
  kvcache::AttentionPlan plan;
  testing::GreedySteps greedy;  // the backend's steps, sampled with temperature 0
};

struct Case {
  AttentionMode mode;
  bool graphs;
};

void RunCase(const Case& c, std::mt19937_64& rng) {
  const model::ModelConfig cfg = testing::SmallModelConfig(128, 4, 1);  // GQA 4
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  std::unique_ptr<Side> sides[2];  // 0: step by step, 1: pipelined
  for (auto& side : sides) {
    CudaBackendOptions o;
    o.num_chunks = kChunks;
    o.chunk_size = kChunkSize;
    o.attention = c.mode;
    o.cuda_graphs = c.graphs;
    auto b = CudaBackend::Create(&w, o);
    ASSERT_TRUE(b.ok()) << b.status();
    side = std::make_unique<Side>(std::move(*b), c.mode != AttentionMode::kPaged);
  }
  Side& ref = *sides[0];
  Side& pip = *sides[1];

  // Prompts: a shared 40-token prefix and a distinct tail each; one prefill step on both sides.
  std::vector<int32_t> prefix(40);
  for (auto& t : prefix) t = 1 + static_cast<int32_t>(rng() % (cfg.vocab_size - 1));
  constexpr int kSeqs = 6;
  std::vector<SeqId> prefill_order;
  std::map<SeqId, int32_t> next;  // the reference's next token per sequence
  for (Side* side : {&ref, &pip}) {
    StepBatch batch;
    std::vector<SeqId> seqs;
    std::mt19937_64 tails(7);  // the same tails on both sides
    for (int i = 0; i < kSeqs; ++i) {
      std::vector<int32_t> p = prefix;
      for (int k = 0; k < 3 + i; ++k) {
        p.push_back(1 + static_cast<int32_t>(tails() % (cfg.vocab_size - 1)));
      }
      auto placed = side->tree.Insert("", p);
      ASSERT_TRUE(placed.ok()) << placed.status();
      ASSERT_TRUE(side->backend->CopyChunks(placed->copies).ok());
      const int32_t len = static_cast<int32_t>(p.size());
      SeqWork sw;
      sw.pos0 = placed->matched_tokens;
      sw.tokens.assign(p.begin() + placed->matched_tokens, p.end());
      sw.slots = side->tree.Slots(placed->seq, placed->matched_tokens, len);
      sw.write_kv.assign(sw.tokens.size(), 1);
      const auto plan =
          kvcache::BuildAttentionPlan(side->tree, std::vector{placed->seq}, {.share = false});
      sw.span_chunk = plan.span_chunk;
      sw.span_begin = plan.span_begin;
      sw.span_end = plan.span_end;
      batch.prefill.push_back(std::move(sw));
      seqs.push_back(placed->seq);
    }
    std::vector<int32_t> out;
    const absl::Status s = side->greedy.Forward(*side->backend, batch, &out);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), static_cast<size_t>(kSeqs));
    if (side == &ref) {
      for (int i = 0; i < kSeqs; ++i) next[seqs[i]] = out[i];
    } else {
      ASSERT_EQ(seqs, prefill_order.empty() ? seqs : prefill_order);
    }
    prefill_order = seqs;
  }

  // The reference, step by step: the tokens of every step by sequence.
  constexpr int kSteps = 40;  // 40 tokens past prompts of 43-48: chunk boundaries crossed
  std::vector<std::map<SeqId, int32_t>> want(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    StepBatch batch;
    std::vector<SeqId> rows;
    ref.Place(next, &batch, &rows);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    std::vector<int32_t> out;
    const absl::Status s = ref.greedy.Forward(*ref.backend, batch, &out);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) next[rows[r]] = want[k][rows[r]] = out[r];
  }

  // Pipelined: placeholder tokens in the tree, the real ones fed on the device from the step
  // launched before (the prefill step first: its rows are the prefill order).
  std::vector<SeqId> prev_rows = prefill_order;
  std::map<SeqId, int32_t> placeholder;
  for (SeqId s : prefill_order) placeholder[s] = 0;
  std::vector<std::vector<SeqId>> step_rows;
  std::vector<std::map<SeqId, int32_t>> got;
  auto collect = [&] {
    std::vector<int32_t> out;
    const absl::Status s = pip.greedy.Collect(*pip.backend, &out);
    ASSERT_TRUE(s.ok()) << s;
    const std::vector<SeqId>& rows = step_rows[got.size()];
    ASSERT_EQ(out.size(), rows.size());
    std::map<SeqId, int32_t> m;
    for (size_t r = 0; r < rows.size(); ++r) m[rows[r]] = out[r];
    got.push_back(std::move(m));
  };
  const double device_before = pip.backend->device_seconds();
  StepBatch batches[2];  // a batch stays alive while its step is in flight
  for (int k = 0; k < kSteps; ++k) {
    StepBatch& batch = batches[k % 2];
    std::vector<SeqId> rows;
    pip.Place(placeholder, &batch, &rows);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    std::vector<int32_t> feed(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      feed[r] = static_cast<int32_t>(std::find(prev_rows.begin(), prev_rows.end(), rows[r]) -
                                     prev_rows.begin());
    }
    if (pip.backend->steps_in_flight() == 2) {
      collect();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    const absl::Status s = pip.greedy.Launch(*pip.backend, batch, feed);
    ASSERT_TRUE(s.ok()) << "step " << k << ": " << s;
    step_rows.push_back(rows);
    prev_rows = rows;
    if (k == 1) {
      // Two steps in flight: a third launch and the other kinds of step are refused.
      ASSERT_EQ(pip.backend->steps_in_flight(), 2);
      EXPECT_EQ(pip.greedy.Launch(*pip.backend, batch, feed).code(),
                absl::StatusCode::kFailedPrecondition);
      std::vector<int32_t> out;
      EXPECT_EQ(pip.greedy.Forward(*pip.backend, batch, &out).code(),
                absl::StatusCode::kFailedPrecondition);
    }
  }
  while (pip.backend->steps_in_flight() > 0) {
    collect();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  EXPECT_EQ(pip.greedy.Collect(*pip.backend, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_GT(pip.backend->device_seconds(), device_before);
  ASSERT_EQ(got.size(), want.size());
  for (int k = 0; k < kSteps; ++k) EXPECT_EQ(got[k], want[k]) << "step " << k;
  if (c.graphs) {
    EXPECT_GT(pip.backend->attention_stats().graph.replays, 0);
  }
}

TEST(PipelinedGreedyTest, FedStepsEqualStepByStep) {
  BANYAN_SEEDED_RNG(rng);
  for (Case c : {Case{AttentionMode::kTpp, true}, Case{AttentionMode::kTpp, false},
                 Case{AttentionMode::kPaged, true}}) {
    SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(c.mode) << ", graphs "
                                      << c.graphs);
    RunCase(c, rng);
    if (HasFatalFailure()) return;
  }
}

// A fed step needs a step just before it whose rows it indexes; while a step is in flight, a step
// of another kind (Forward) is refused.
TEST(PipelinedGreedyTest, FeedNeedsTheStepBefore) {
  BANYAN_SEEDED_RNG(rng);
  const model::ModelConfig cfg = testing::SmallModelConfig(128, 2, 2, /*layers=*/1, /*vocab=*/256, 256);
  const model::ModelWeights w = model::MakeDummyWeights(cfg, rng());
  CudaBackendOptions o;
  o.num_chunks = kChunks;
  o.chunk_size = kChunkSize;
  auto b = CudaBackend::Create(&w, o);
  ASSERT_TRUE(b.ok()) << b.status();
  Side side(std::move(*b), true);
  auto placed = side.tree.Insert("", std::vector<int32_t>(20, 5));
  ASSERT_TRUE(placed.ok());
  StepBatch batch;
  std::vector<SeqId> rows;
  side.Place({{placed->seq, 7}}, &batch, &rows);
  ASSERT_FALSE(HasFatalFailure());
  // No sampled step has run yet.
  EXPECT_EQ(side.greedy.Launch(*side.backend, batch, std::vector<int32_t>{0}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(side.backend->steps_in_flight(), 0);
  // One entry per decode row.
  EXPECT_EQ(side.greedy.Launch(*side.backend, batch, std::vector<int32_t>{0, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(side.greedy.Launch(*side.backend, batch, {}).ok());
  std::vector<int32_t> out;
  ASSERT_TRUE(side.greedy.Collect(*side.backend, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  // The step before had one row: row 1 does not exist. The batch's token is a placeholder
  // other than the sampled one.
  const int32_t placeholder = (out[0] + 1) % cfg.vocab_size;
  side.Place({{placed->seq, placeholder}}, &batch, &rows);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(side.greedy.Launch(*side.backend, batch, std::vector<int32_t>{1}).code(),
            absl::StatusCode::kInvalidArgument);
  // Fed from row 0: the token the previous step sampled (out[0]), whatever the batch says.
  ASSERT_TRUE(side.greedy.Launch(*side.backend, batch, std::vector<int32_t>{0}).ok());
  std::vector<int32_t> fed;
  ASSERT_TRUE(side.greedy.Collect(*side.backend, &fed).ok());
  ASSERT_EQ(fed.size(), 1u);
  // The same step again with out[0] in the batch and no feed (its K/V slot is rewritten with
  // the same values): the same token.
  batch.decode[0].tokens[0] = out[0];
  std::vector<int32_t> direct;
  ASSERT_TRUE(side.greedy.Forward(*side.backend, batch, &direct).ok());
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_EQ(fed[0], direct[0]);
  // A step in flight: a step of another kind (Forward, the logits) is refused until it is
  // collected. The step, greedy, samples the argmax of the same step again.
  ASSERT_TRUE(side.greedy.Launch(*side.backend, batch, {}).ok());
  EXPECT_EQ(side.backend->steps_in_flight(), 1);
  std::vector<float> logits;
  EXPECT_EQ(side.backend->Forward(batch, &logits).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> again;
  ASSERT_TRUE(side.greedy.Collect(*side.backend, &again).ok());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0], direct[0]);
  EXPECT_EQ(side.backend->steps_in_flight(), 0);
  EXPECT_EQ(side.greedy.Collect(*side.backend, &again).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace banyan::engine
