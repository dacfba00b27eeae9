// The engine loop's summary stage alone (scheduler/loop/step_summary.h): a hand-built tree and
// request lists, and the policy input they become.
#include "scheduler/loop/step_summary.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/scheduler/loop/loop_fixture.h"

namespace banyan::scheduler {
namespace {

using testing::LoopStageTest;
using testing::Tokens;

class StepSummaryTest : public LoopStageTest {
 protected:
  StepSummary Summarize(bool fed = false, std::span<LiveRequest* const> in_flight = {}) {
    return SummarizeStep(*tree_, waiting_, running_,
                         {.max_sequences = 8, .prefill_token_budget = 32}, fed, in_flight);
  }
  void TearDown() override {
    for (LivePtr& l : running_) Release(*l);
    LoopStageTest::TearDown();
  }
  std::vector<LivePtr> waiting_;
  std::vector<LivePtr> running_;
};

TEST_F(StepSummaryTest, LimitsAndPoolComeFromTheTreeAndOptions) {
  Cache(Tokens(1, 2 * kChunk));  // two cached chunks
  const StepSummary s = Summarize();
  EXPECT_EQ(s.input.chunk_size, kChunk);
  EXPECT_EQ(s.input.max_sequences, 8);
  EXPECT_EQ(s.input.prefill_token_budget, 32);
  EXPECT_EQ(s.input.chunks_cached, 2);
  EXPECT_EQ(s.input.chunks_free, 62);
  EXPECT_TRUE(s.input.waiting.empty());
  EXPECT_TRUE(s.input.running.empty());
}

TEST_F(StepSummaryTest, WaitingPromptCostsItsUncachedTokensAndTheCachedChunksItRevives) {
  waiting_.push_back(Waiting(1, Tokens(1, 10), /*n=*/2));  // nothing cached
  Cache(Tokens(100, 2 * kChunk));
  std::vector<int32_t> cached = Tokens(100, 2 * kChunk + 2);  // two chunks cached, 2 tokens new
  waiting_.push_back(Waiting(2, cached));
  waiting_[1]->req.priority = 3;
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.waiting.size(), 2u);
  const PolicyRequest& a = s.input.waiting[0];
  EXPECT_EQ(a.handle, 1u);
  EXPECT_EQ(a.sequences, 2);
  EXPECT_EQ(a.remaining_prefill, 10);
  EXPECT_EQ(a.chunks_needed, AdmissionChunks(10, 0, 2, kChunk));
  EXPECT_FALSE(a.decoding);
  const PolicyRequest& b = s.input.waiting[1];
  EXPECT_EQ(b.priority, 3);
  EXPECT_EQ(b.remaining_prefill, 2);
  EXPECT_EQ(b.chunks_needed, AdmissionChunks(2, 2, 1, kChunk));
  EXPECT_EQ(s.by_handle.at(1), waiting_[0].get());
  EXPECT_EQ(s.by_handle.at(2), waiting_[1].get());
}

TEST_F(StepSummaryTest, ResumingRequestCostsEverySampleRecompute) {
  LivePtr l = Waiting(1, Tokens(1, 6));
  l->resume = true;
  l->samples.push_back(testing::MakeSample(-1, {50, 51, 52}));  // 6 + 2 tokens in the tree
  l->samples.push_back(testing::MakeSample(-1, {60}));          // 6 tokens
  l->samples.push_back(testing::MakeSample(-1, {70, 71}));
  l->samples.back().finished = true;  // not re-placed
  waiting_.push_back(std::move(l));
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.waiting.size(), 1u);
  EXPECT_TRUE(s.input.waiting[0].resume);
  EXPECT_EQ(s.input.waiting[0].remaining_prefill, 8 + 6);
  EXPECT_EQ(s.input.waiting[0].chunks_needed, ResumeChunks(14, 0, 2, kChunk));
}

TEST_F(StepSummaryTest, DecodingRequestCostsItsAppendsAndHoldsItsPrivateChunks) {
  running_.push_back(Decoding(1, Tokens(1, kChunk - 1), {40, 41}));  // the chunk is full
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.running.size(), 1u);
  const PolicyRequest& p = s.input.running[0];
  EXPECT_TRUE(p.decoding);
  EXPECT_EQ(p.remaining_prefill, 0);
  EXPECT_EQ(p.chunks_needed, 1) << "the next token opens a chunk";
  EXPECT_EQ(p.chunks_private, 1);
}

TEST_F(StepSummaryTest, PrefillingRequestHasItsUnplacedPromptLeft) {
  LivePtr l = Waiting(1, Tokens(1, 12));
  auto placed = tree_->Insert("", Tokens(1, 5), /*allow_evict=*/true);
  ASSERT_TRUE(placed.ok());
  l->prompt_seq = placed->seq;
  l->placed = 5;
  l->state = RequestState::kPrefilling;
  running_.push_back(std::move(l));
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.running.size(), 1u);
  EXPECT_FALSE(s.input.running[0].decoding);
  EXPECT_EQ(s.input.running[0].remaining_prefill, 7);
  EXPECT_EQ(s.input.running[0].chunks_private, 1);
}

TEST_F(StepSummaryTest, FinishedDecodingRequestIsLeftOut) {
  running_.push_back(Decoding(1, Tokens(1, 4), {9}));
  running_[0]->samples[0].finished = true;
  const StepSummary s = Summarize();
  EXPECT_TRUE(s.input.running.empty());
  EXPECT_FALSE(s.by_handle.contains(1));
}

TEST_F(StepSummaryTest, FedStepCountsAPromptWhoseFirstTokenIsInFlightAsDecoding) {
  LivePtr l = Waiting(1, Tokens(1, 6), /*n=*/3);
  auto placed = tree_->Insert("", l->req.prompt, /*allow_evict=*/true);
  ASSERT_TRUE(placed.ok());
  l->prompt_seq = placed->seq;
  l->placed = 6;
  l->state = RequestState::kPrefilling;
  running_.push_back(std::move(l));
  std::vector<LiveRequest*> in_flight = {running_[0].get()};
  const StepSummary unfed = Summarize(/*fed=*/false, in_flight);
  EXPECT_FALSE(unfed.input.running[0].decoding);
  const StepSummary fed = Summarize(/*fed=*/true, in_flight);
  EXPECT_TRUE(fed.input.running[0].decoding);
  EXPECT_EQ(fed.input.running[0].chunks_needed, 3) << "a pending fork's chunk per sample";
  const StepSummary other = Summarize(/*fed=*/true, {});
  EXPECT_FALSE(other.input.running[0].decoding) << "its first token is not in flight";
}

TEST_F(StepSummaryTest, TenantsWithBudgetsGetAnIndexAndTheChunksTheirRunningRequestsHold) {
  running_.push_back(Decoding(1, Tokens(1, 2 * kChunk), {30}));  // two chunks
  running_.push_back(Decoding(2, Tokens(100, 4), {31}));  // one chunk
  running_[0]->req.tenant = running_[1]->req.tenant = "a";
  running_[0]->req.tenant_kv_chunks = running_[1]->req.tenant_kv_chunks = 10;
  waiting_.push_back(Waiting(3, Tokens(200, 4)));
  waiting_[0]->req.tenant = "b";
  waiting_[0]->req.tenant_kv_chunks = 5;
  waiting_.push_back(Waiting(4, Tokens(300, 4)));  // no budget
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.tenants.size(), 2u);
  EXPECT_EQ(s.input.waiting[0].tenant, 0) << "waiting requests are indexed first";
  EXPECT_EQ(s.input.waiting[1].tenant, -1);
  EXPECT_EQ(s.input.running[0].tenant, 1);
  EXPECT_EQ(s.input.running[1].tenant, 1);
  EXPECT_EQ(s.input.tenants[0].chunks_budget, 5);
  EXPECT_EQ(s.input.tenants[0].chunks_used, 0);
  EXPECT_EQ(s.input.tenants[1].chunks_budget, 10);
  EXPECT_EQ(s.input.tenants[1].chunks_used, 3);
}

}  // namespace
}  // namespace banyan::scheduler
