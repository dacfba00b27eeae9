// The engine loop's placement stage alone (scheduler/loop/placement.h): plans placed in a small
// tree of its own, with hooks that record what placement asked of the loop.
#include "scheduler/loop/placement.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "tests/scheduler/loop/loop_fixture.h"

namespace banyan::scheduler {
namespace {

using testing::LoopStageTest;
using testing::Tokens;

// Does what the loop does, on the test's tree, and counts it.
class RecordingHooks final : public PlacementHooks {
 public:
  explicit RecordingHooks(kvcache::PrefixTree* tree) : tree_(tree) {}
  void Preempt(LiveRequest& live) override {
    preempted.push_back(live.handle);
    if (live.prompt_seq >= 0) tree_->Release(live.prompt_seq).IgnoreError();
    live.prompt_seq = -1;
    for (LiveRequest::Sample& s : live.samples) {
      if (s.seq >= 0) tree_->Release(s.seq).IgnoreError();
      s.seq = -1;
    }
    live.placed = 0;
    live.resume = !live.samples.empty();
    live.state = RequestState::kWaiting;
  }
  void Fail(LiveRequest& live, absl::Status status) override {
    failed.push_back(live.handle);
    last_failure = std::move(status);
    live.state = RequestState::kFailed;
  }
  void StartSamples(LiveRequest& live) override {
    started.push_back(live.handle);
    live.samples.clear();
    for (int k = 0; k < live.req.n; ++k) live.samples.push_back(testing::MakeSample(-1, {}));
  }
  std::span<const uint64_t> MaskFor(LiveRequest& live, size_t) override {
    masked.push_back(live.handle);
    return {};
  }
  bool MaskReady(LiveRequest& live, size_t) override { return !unready.contains(live.handle); }

  std::vector<uint64_t> preempted, failed, started, masked;
  absl::flat_hash_set<uint64_t> unready;  // requests whose masks are not classified yet
  absl::Status last_failure;

 private:
  kvcache::PrefixTree* tree_;
};

class PlacementTest : public LoopStageTest {
 protected:
  void SetUp() override {
    LoopStageTest::SetUp();
    hooks_ = std::make_unique<RecordingHooks>(tree_.get());
  }
  void Remake(int32_t chunks) {
    MakeTree(chunks);
    hooks_ = std::make_unique<RecordingHooks>(tree_.get());
  }
  void TearDown() override {
    for (LivePtr& l : running_) Release(*l);
    LoopStageTest::TearDown();
  }
  ByHandle Handles() const {
    ByHandle by;
    for (const LivePtr& l : running_) by[l->handle] = l.get();
    return by;
  }
  std::vector<LivePtr> running_;
  std::unique_ptr<RecordingHooks> hooks_;
};

TEST_F(PlacementTest, PromptIsPlacedInChunksAndItsLastRowSamplesItsSamples) {
  running_.push_back(Waiting(1, Tokens(1, 10), /*n=*/2));
  LiveRequest& l = *running_[0];
  PlacedStep step;
  ASSERT_TRUE(PlacePrefill(*tree_, l, 6, *hooks_, &step).ok());
  EXPECT_EQ(l.state, RequestState::kPrefilling);
  EXPECT_EQ(l.placed, 6);
  ASSERT_EQ(step.prefill.size(), 1u);
  EXPECT_EQ(step.prefill[0].begin, 0);
  EXPECT_EQ(step.prefill[0].end, 6);
  EXPECT_FALSE(step.prefill[0].want_logits);
  EXPECT_TRUE(step.logit_owners.empty());
  EXPECT_TRUE(hooks_->started.empty());

  ASSERT_TRUE(PlacePrefill(*tree_, l, 6, *hooks_, &step).ok());
  EXPECT_EQ(l.placed, 10);
  ASSERT_EQ(step.prefill.size(), 2u);
  EXPECT_EQ(step.prefill[1].seq, l.prompt_seq);
  EXPECT_EQ(step.prefill[1].begin, 6);
  EXPECT_EQ(step.prefill[1].end, 10);
  EXPECT_TRUE(step.prefill[1].want_logits);
  EXPECT_EQ(step.prefill[1].samples.size(), 2u) << "one draw per sample from the last row";
  EXPECT_EQ(hooks_->started, std::vector<uint64_t>{1});
  EXPECT_EQ(step.logit_owners, std::vector<LiveRequest*>{&l});
  EXPECT_EQ(step.prompt_tokens, 10);
  EXPECT_EQ(step.cache_hit_tokens, 0);
  EXPECT_EQ(step.PrefillTokens(), 10);
  EXPECT_EQ(tree_->Length(l.prompt_seq), 10);
}

TEST_F(PlacementTest, CachedPromptRecomputesOnlyItsLastTokenForTheLogits) {
  Cache(Tokens(1, 8));
  running_.push_back(Waiting(1, Tokens(1, 8)));
  LiveRequest& l = *running_[0];
  PlacedStep step;
  ASSERT_TRUE(PlacePrefill(*tree_, l, 4, *hooks_, &step).ok());
  EXPECT_EQ(l.placed, 8) << "the match is placed whatever the budget";
  EXPECT_EQ(l.usage.cached_prompt_tokens, 8);
  ASSERT_EQ(step.prefill.size(), 1u);
  EXPECT_EQ(step.prefill[0].begin, 7);
  EXPECT_EQ(step.prefill[0].end, 8);
  EXPECT_EQ(step.prefill[0].cached_end, 8) << "its KV is not rewritten";
  EXPECT_TRUE(step.prefill[0].want_logits);
  EXPECT_EQ(step.cache_hit_tokens, 8);
  EXPECT_EQ(step.PrefillTokens(), 1);
}

TEST_F(PlacementTest, ResumedRequestReplacesEverySampleWithoutLogits) {
  Cache(Tokens(1, 4));
  running_.push_back(Waiting(1, Tokens(1, 6)));
  LiveRequest& l = *running_[0];
  l.resume = true;
  l.samples.push_back(testing::MakeSample(-1, {20, 21}));  // 1..6, 20 in the tree
  l.samples.push_back(testing::MakeSample(-1, {30, 31}));  // 1..6, 30
  PlacedStep step;
  ASSERT_TRUE(PlacePrefill(*tree_, l, 1, *hooks_, &step).ok());
  EXPECT_EQ(l.state, RequestState::kDecoding);
  EXPECT_FALSE(l.resume);
  ASSERT_EQ(step.prefill.size(), 2u);
  for (const engine::PrefillItem& p : step.prefill) {
    EXPECT_FALSE(p.want_logits);
    EXPECT_EQ(p.end, 7);
  }
  EXPECT_EQ(step.prefill[0].begin, 4) << "the cached chunk is matched";
  EXPECT_EQ(step.prefill[1].begin, 6) << "the first sample's prompt is matched";
  EXPECT_EQ(tree_->Length(l.samples[0].seq), 7);
  EXPECT_EQ(tree_->Length(l.samples[1].seq), 7);
  EXPECT_TRUE(hooks_->started.empty());
}

TEST_F(PlacementTest, PromptThatDoesNotFitIsPreemptedOrFailedWhenAlone) {
  Remake(2);
  running_.push_back(Waiting(1, Tokens(1, 3 * kChunk)));
  IterationPlan plan;
  plan.prefill = {{1, 3 * kChunk}};
  PlacedStep step;
  PlacePrompts(*tree_, plan, Handles(), running_, *hooks_, &step);
  EXPECT_EQ(hooks_->failed, std::vector<uint64_t>{1}) << "nothing else holds memory";
  EXPECT_TRUE(absl::IsResourceExhausted(hooks_->last_failure)) << hooks_->last_failure;
  EXPECT_TRUE(step.prefill.empty());
  Release(*running_[0]);
  running_.clear();

  running_.push_back(Decoding(2, Tokens(100, 3), {5}));  // holds a chunk
  running_.push_back(Waiting(3, Tokens(1, 3 * kChunk)));
  running_[1]->state = RequestState::kPrefilling;  // admitted by the plan
  plan.prefill = {{3, 3 * kChunk}};
  PlacedStep again;
  PlacePrompts(*tree_, plan, Handles(), running_, *hooks_, &again);
  EXPECT_EQ(hooks_->preempted, std::vector<uint64_t>{3}) << "it can wait for memory";
  EXPECT_EQ(running_[1]->state, RequestState::kWaiting);
  EXPECT_TRUE(again.prefill.empty());
  EXPECT_TRUE(again.logit_owners.empty());
}

TEST_F(PlacementTest, DecodeAppendsGiveEveryRowItsOwner) {
  running_.push_back(Decoding(1, Tokens(1, 5), {40, 41}));
  running_.push_back(Decoding(2, Tokens(100, 3), {50}));
  IterationPlan plan;
  plan.decode = {1, 2};
  PlacedStep step;
  PlaceDecodeAppends(*tree_, plan, Handles(), *hooks_, &step);
  ASSERT_EQ(step.decode.size(), 2u);
  for (const engine::DecodeItem& d : step.decode) {
    EXPECT_TRUE(d.write_kv);
    EXPECT_EQ(d.feed, -1);
    ASSERT_TRUE(step.owner.contains(d.seq));
  }
  EXPECT_EQ(step.owner.at(running_[0]->samples[0].seq).first, running_[0].get());
  EXPECT_EQ(tree_->Length(running_[0]->samples[0].seq), 7);
  EXPECT_EQ(tree_->Length(running_[1]->samples[0].seq), 4);
  EXPECT_TRUE(hooks_->preempted.empty());
}

TEST_F(PlacementTest, ASampleWhoseMaskIsNotReadySitsOutWhileOthersRun) {
  running_.push_back(Decoding(1, Tokens(1, 5), {40}));
  running_.push_back(Decoding(2, Tokens(100, 3), {50}));
  hooks_->unready = {2};
  IterationPlan plan;
  plan.decode = {1, 2};
  PlacedStep step;
  PlaceDecodeAppends(*tree_, plan, Handles(), *hooks_, &step);
  ASSERT_EQ(step.decode.size(), 1u);
  EXPECT_EQ(step.decode[0].seq, running_[0]->samples[0].seq);
  EXPECT_FALSE(step.owner.contains(running_[1]->samples[0].seq));
  EXPECT_EQ(tree_->Length(running_[1]->samples[0].seq), 3) << "its token waits for a later step";
  EXPECT_EQ(running_[1]->samples[0].next_token, 50);
}

TEST_F(PlacementTest, ASampleWhoseMaskIsNotReadyRunsWhenNothingElseWould) {
  running_.push_back(Decoding(2, Tokens(100, 3), {50}));
  hooks_->unready = {2};
  IterationPlan plan;
  plan.decode = {2};
  PlacedStep step;
  PlaceDecodeAppends(*tree_, plan, Handles(), *hooks_, &step);
  ASSERT_EQ(step.decode.size(), 1u) << "an empty step would help nobody: it waits for the mask";
  EXPECT_EQ(tree_->Length(running_[0]->samples[0].seq), 4);
}

TEST_F(PlacementTest, AppendsThatDoNotFitPreemptTheLeastImportantAndRetry) {
  Remake(2);
  running_.push_back(Decoding(1, Tokens(1, kChunk), {40}));    // a full chunk: the append needs one
  running_.push_back(Decoding(2, Tokens(100, kChunk), {50}));  // the same
  IterationPlan plan;
  plan.decode = {1, 2};
  PlacedStep step;
  PlaceDecodeAppends(*tree_, plan, Handles(), *hooks_, &step);
  EXPECT_EQ(hooks_->preempted, std::vector<uint64_t>{2}) << "the later arrival";
  ASSERT_EQ(step.decode.size(), 1u);
  EXPECT_EQ(step.decode[0].seq, running_[0]->samples[0].seq);
  EXPECT_EQ(tree_->Length(running_[0]->samples[0].seq), kChunk + 1);
}

TEST_F(PlacementTest, FedRowsTakeTheirTokenFromTheStepBefore) {
  running_.push_back(Decoding(1, Tokens(1, 5), {40}));
  running_.push_back(Decoding(2, Tokens(100, 5), {50}));
  running_[1]->req.params.max_tokens = 2;  // its token in flight is its last
  InFlightStep before;
  before.out.decode_rows = {running_[1]->samples[0].seq, running_[0]->samples[0].seq};
  // The step before appended the next tokens: the samples have them in the tree now.
  for (LivePtr& l : running_) {
    const std::vector<int32_t> token = {l->samples[0].next_token};
    ASSERT_TRUE(tree_->Extend(l->samples[0].seq, token, /*allow_evict=*/true).ok());
  }
  IterationPlan plan;
  plan.decode = {1, 2};
  PlacedStep step;
  ASSERT_EQ(PlaceFedRows(*tree_, plan, Handles(), before, &step), FedPlacement::kPlaced);
  ASSERT_EQ(step.decode.size(), 1u) << "no row after a sample's last token";
  const kvcache::SeqId seq = running_[0]->samples[0].seq;
  EXPECT_EQ(step.decode[0].seq, seq);
  EXPECT_EQ(step.decode[0].feed, 1) << "its spec in the step before";
  EXPECT_EQ(step.patches, (FedPatches{{seq, 1}}));
  EXPECT_EQ(tree_->Length(seq), 7) << "the pending token is in the tree";
  ASSERT_TRUE(tree_->SetPendingToken(seq, 77).ok());
}

TEST_F(PlacementTest, FedStepWithNothingToRunIsNotFed) {
  running_.push_back(Decoding(1, Tokens(1, 5), {40}));
  running_[0]->req.params.max_tokens = 2;
  InFlightStep before;
  before.out.decode_rows = {running_[0]->samples[0].seq};
  IterationPlan plan;
  plan.decode = {1};
  PlacedStep step;
  EXPECT_EQ(PlaceFedRows(*tree_, plan, Handles(), before, &step), FedPlacement::kNotFed);
  EXPECT_TRUE(step.decode.empty());
}

}  // namespace
}  // namespace banyan::scheduler
