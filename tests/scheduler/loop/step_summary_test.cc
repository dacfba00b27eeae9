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

// Prefix groups: a waiting request whose uncached prefix an earlier request will place leads it.
TEST_F(StepSummaryTest, WaitingRequestsSharingAnUncachedPrefixFollowTheFirstOfThem) {
  Cache(Tokens(1, kChunk));  // the first chunk of the shared prompt is cached
  std::vector<int32_t> shared = Tokens(1, 3 * kChunk);
  auto with_tail = [&](int32_t first, int32_t n) {
    std::vector<int32_t> p = shared;
    std::vector<int32_t> tail = Tokens(first, n);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  waiting_.push_back(Waiting(1, with_tail(500, 5)));   // the leader
  waiting_.push_back(Waiting(2, with_tail(600, 7)));   // follows 1
  waiting_.push_back(Waiting(3, Tokens(900, 40)));     // unrelated
  waiting_.push_back(Waiting(4, with_tail(700, 3)));   // follows 1 too (the first holder)
  waiting_.push_back(Waiting(5, Tokens(1, 2 * kChunk + 4)));  // shares one uncached chunk
  waiting_[0]->req.priority = 1;  // the leader comes first in the policy's order...
  waiting_[1]->arrival = 0;       // ...even though 2 arrived before it
  const StepSummary s = Summarize();
  ASSERT_EQ(s.input.waiting.size(), 5u);
  const auto& w = s.input.waiting;
  EXPECT_EQ(w[0].leader, 0u);
  EXPECT_EQ(w[2].leader, 0u);
  // 2: uncached tokens [16, 55); blocks 2 and 3 (tokens [16, 48)) are the leader's to place.
  EXPECT_EQ(w[1].remaining_prefill, 3 * kChunk + 7 - kChunk);
  EXPECT_EQ(w[1].leader, 1u);
  EXPECT_EQ(w[1].leader_tokens, 2 * kChunk);
  EXPECT_EQ(w[1].led_prefill, 7);
  EXPECT_EQ(w[1].led_chunks, w[1].chunks_needed - 2);
  EXPECT_EQ(w[3].leader, 1u);
  EXPECT_EQ(w[3].led_prefill, 3);
  // 5 shares one uncached chunk with 1 (its third chunk is partial: not a block).
  EXPECT_EQ(w[4].leader, 1u);
  EXPECT_EQ(w[4].leader_tokens, kChunk);
  EXPECT_EQ(w[4].led_prefill, 2 * kChunk + 4 - 2 * kChunk);
}

TEST_F(StepSummaryTest, APrefillingRequestLeadsFromWhereItHasPlaced) {
  LivePtr l = Waiting(1, Tokens(1, 4 * kChunk));
  auto placed = tree_->Insert("", Tokens(1, kChunk + 3), /*allow_evict=*/true);
  ASSERT_TRUE(placed.ok());
  l->prompt_seq = placed->seq;
  l->placed = kChunk + 3;
  l->state = RequestState::kPrefilling;
  running_.push_back(std::move(l));
  waiting_.push_back(Waiting(2, Tokens(1, 4 * kChunk + 2)));
  waiting_.push_back(Waiting(3, Tokens(1, 4 * kChunk)));
  waiting_[1]->resume = true;  // a resuming request neither leads nor follows
  waiting_.push_back(Waiting(4, Tokens(1, 3 * kChunk)));
  waiting_[2]->req.cache_namespace = "tenant-b";  // another namespace: another hash chain
  waiting_[2]->prompt_blocks = PromptBlocks("tenant-b", waiting_[2]->req.prompt, kChunk);
  const StepSummary s = Summarize();
  const auto& w = s.input.waiting;
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].remaining_prefill, 4 * kChunk + 2 - (kChunk + 3));
  EXPECT_EQ(w[0].leader, 1u);
  EXPECT_EQ(w[0].leader_tokens, 4 * kChunk - (kChunk + 3));
  EXPECT_EQ(w[0].led_prefill, 2);
  EXPECT_EQ(w[1].leader, 0u);
  EXPECT_EQ(w[2].leader, 0u);
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
