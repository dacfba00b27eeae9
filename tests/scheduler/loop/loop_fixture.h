// What the engine loop's stage tests share: a small prefix tree of its own and requests built
// by hand in the states the loop keeps them in (scheduler/loop/live_request.h).
#pragma once

#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/loop/live_request.h"
#include "scheduler/loop/step_summary.h"

namespace banyan::scheduler::testing {

inline std::vector<int32_t> Tokens(int32_t first, int32_t count) {
  std::vector<int32_t> t(static_cast<size_t>(count));
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline LiveRequest::Sample MakeSample(kvcache::SeqId seq, std::vector<int32_t> generated) {
  const int32_t next = generated.empty() ? -1 : generated.back();
  return LiveRequest::Sample{.seq = seq, .sampling = engine::SequenceSamplingState(1, {}, 0),
                             .text = {}, .generated = std::move(generated), .next_token = next,
                             .last_token = {}, .cand = {}, .drafted = {}, .lookup = {},
                             .matcher = {}, .mask = {}, .trigger_tail = {}};
}

class LoopStageTest : public ::testing::Test {
 protected:
  static constexpr int32_t kChunk = 16;  // the pool's smallest

  void MakeTree(int32_t chunks) {
    tree_.reset();
    pool_ = std::make_unique<kvcache::ChunkPool>(*kvcache::ChunkPool::Create(chunks, kChunk));
    tree_ = std::make_unique<kvcache::PrefixTree>(pool_.get());
  }
  void SetUp() override { MakeTree(64); }
  void TearDown() override {
    EXPECT_TRUE(tree_->CheckInvariants().ok()) << tree_->CheckInvariants();
  }

  // A request as Add queues it: waiting, nothing placed.
  LivePtr Waiting(uint64_t handle, std::vector<int32_t> prompt, int n = 1) {
    auto l = std::make_unique<LiveRequest>();
    l->handle = l->arrival = handle;
    l->req.id = std::to_string(handle);
    l->req.prompt = std::move(prompt);
    l->req.n = n;
    l->req.params.max_tokens = 32;
    l->prompt_blocks = PromptBlocks(l->req.cache_namespace, l->req.prompt, kChunk);
    return l;
  }

  // A request decoding: its prompt and `generated` (all but the last in the tree) in one
  // sequence, the last token its next_token.
  LivePtr Decoding(uint64_t handle, std::vector<int32_t> prompt, std::vector<int32_t> generated) {
    LivePtr l = Waiting(handle, std::move(prompt));
    std::vector<int32_t> in_tree = l->req.prompt;
    in_tree.insert(in_tree.end(), generated.begin(), generated.end() - 1);
    auto placed = tree_->Insert(l->req.cache_namespace, in_tree, /*allow_evict=*/true);
    EXPECT_TRUE(placed.ok()) << placed.status();
    l->samples.push_back(MakeSample(placed->seq, std::move(generated)));
    l->state = RequestState::kDecoding;
    return l;
  }

  // Caches `tokens` in the tree (placed, then released).
  void Cache(const std::vector<int32_t>& tokens, const std::string& ns = "") {
    auto placed = tree_->Insert(ns, tokens, /*allow_evict=*/true);
    ASSERT_TRUE(placed.ok()) << placed.status();
    ASSERT_TRUE(tree_->Release(placed->seq).ok());
  }

  // Releases what a request holds (as the loop does when it ends or is preempted).
  void Release(LiveRequest& l) {
    if (l.prompt_seq >= 0) {
      EXPECT_TRUE(tree_->Release(l.prompt_seq).ok());
    }
    l.prompt_seq = -1;
    for (LiveRequest::Sample& s : l.samples) {
      if (s.seq >= 0) {
        EXPECT_TRUE(tree_->Release(s.seq).ok());
      }
      s.seq = -1;
    }
  }

  std::unique_ptr<kvcache::ChunkPool> pool_;
  std::unique_ptr<kvcache::PrefixTree> tree_;
};

}  // namespace banyan::scheduler::testing
