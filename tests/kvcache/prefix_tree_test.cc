// Property and unit tests of ChunkPool, PrefixTree and AttentionPlan.
//
// The property test drives random operation sequences against a simple model (each live
// sequence's token list) and a simulated KV store: every slot the tree says to write gets a value
// derived from the sequence's whole prefix up to that position, and every reported chunk copy is
// applied. After every step, each live sequence must read back its own prefix values through its
// slots: this proves splits, copies, reuse and in-place growth keep KV positions right.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <span>
#include <unordered_map>

#include "gtest/gtest.h"
#include "kvcache/attention_plan.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/random.h"

namespace banyan::kvcache {
namespace {

uint64_t PrefixHash(const std::vector<int32_t>& tokens, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(tokens[i])) * 1099511628211ull;
  return h ^ (n * 0x9e3779b97f4a7c15ull);
}

TEST(ChunkPoolTest, AllocatesEachChunkOnceAndCounts) {
  auto pool = ChunkPool::Create(8, 16);
  ASSERT_TRUE(pool.ok());
  std::set<ChunkId> got;
  for (int i = 0; i < 8; ++i) {
    auto id = pool->Allocate();
    ASSERT_TRUE(id.ok());
    EXPECT_TRUE(got.insert(*id).second) << "chunk handed out twice";
  }
  EXPECT_EQ(pool->chunks_used(), 8);
  EXPECT_EQ(pool->chunks_free(), 0);
  auto none = pool->Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  pool->Free(3);
  EXPECT_EQ(pool->chunks_free(), 1);
  EXPECT_FALSE(pool->IsAllocated(3));
  EXPECT_EQ(*pool->Allocate(), 3);
}

// Chunks freed while held are handed out again only after ReleaseHeld (LIFO would otherwise
// return the chunk just freed first).
TEST(ChunkPoolTest, HeldChunksAreNotReusedUntilReleased) {
  auto pool = *ChunkPool::Create(4, 16);
  const ChunkId a = *pool.Allocate(), b = *pool.Allocate();
  pool.HoldFreed();
  pool.Free(a);
  EXPECT_FALSE(pool.IsAllocated(a));
  EXPECT_EQ(pool.chunks_free(), 2);  // a is neither free nor allocated
  const ChunkId c = *pool.Allocate(), d = *pool.Allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(d, a);
  EXPECT_FALSE(pool.Allocate().ok());  // only a is left, and it is held
  pool.ReleaseHeld();
  EXPECT_EQ(pool.chunks_free(), 1);
  EXPECT_EQ(*pool.Allocate(), a);
  EXPECT_TRUE(pool.IsAllocated(b));
}

TEST(ChunkPoolTest, RejectsBadSizes) {
  EXPECT_FALSE(ChunkPool::Create(8, 8).ok());
  EXPECT_FALSE(ChunkPool::Create(8, 512).ok());
  EXPECT_FALSE(ChunkPool::Create(0, 64).ok());
  EXPECT_TRUE(ChunkPool::Create(1, 256).ok());
}

int64_t CeilDivForTest(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(PrefixTreeTest, SharesPrefixAndSplitsMidChunk) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> a(100), b(100);
  for (int i = 0; i < 100; ++i) a[i] = b[i] = i;
  b[85] = 999;  // diverges at position 85: mid-chunk (80 <= 85 < 96)
  auto pa = tree.Insert("", a);
  ASSERT_TRUE(pa.ok());
  EXPECT_EQ(pa->matched_tokens, 0);
  EXPECT_EQ(pool.chunks_used(), 7);
  auto pb = tree.Insert("", b);
  ASSERT_TRUE(pb.ok());
  EXPECT_EQ(pb->matched_tokens, 85);
  ASSERT_EQ(pb->copies.size(), 1u);  // the straddled chunk: 5 tokens above, 11 below in it
  EXPECT_EQ(pb->copies[0].slot_begin, 0);
  EXPECT_EQ(pb->copies[0].slot_end, 5);
  EXPECT_EQ(pb->new_slots.size(), 15u);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  EXPECT_EQ(tree.Tokens(pa->seq), a);
  EXPECT_EQ(tree.Tokens(pb->seq), b);
  // Other namespaces never match.
  EXPECT_EQ(tree.Match("tenant-b", a), 0);
  EXPECT_EQ(tree.Match("", a), 100);
  MemoryStats st = tree.Stats();
  EXPECT_EQ(st.chunks_live, pool.chunks_used());
  EXPECT_EQ(st.chunks_live, 9);  // 6 shared (one copied) + 2 for a's tail + 1 for b's
  // Both sequences use the shared node's chunks (positions 0..84: 6 chunks of 16), stored once.
  EXPECT_EQ(st.chunks_saved_by_sharing, CeilDivForTest(85, 16));
}

// 16 tokens: one whole chunk of 16, so that the next token takes a new chunk.
std::vector<int32_t> OneFullChunk() {
  std::vector<int32_t> p(16);
  for (int i = 0; i < 16; ++i) p[i] = 10 + i;
  return p;
}

// Pending tokens (the engine loop's fed steps): only a sequence alone on a childless leaf takes
// one; its slot is the one the real token would get; the pending token matches nothing until it
// is set, and then the sequence reads back as if the token had been appended.
TEST(PrefixTreeTest, PendingTokensGrowInPlaceAndAreSetLater) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const std::vector<int32_t> p = OneFullChunk();  // the pending token takes a new chunk
  auto a = tree.Insert("", p);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(tree.GrowsInPlace(a->seq));
  auto forks = tree.Fork(a->seq, 2);
  ASSERT_TRUE(forks.ok());
  EXPECT_FALSE(tree.GrowsInPlace(a->seq)) << "two samples share the leaf";
  ASSERT_TRUE(tree.Release((*forks)[1]).ok());
  EXPECT_TRUE(tree.GrowsInPlace(a->seq));
  const int32_t used = pool.chunks_used();
  EXPECT_FALSE(tree.AppendPending(std::vector<SeqId>{a->seq, a->seq}).ok());
  EXPECT_FALSE(tree.AppendPending(std::vector<SeqId>{a->seq, 999}).ok());
  EXPECT_EQ(pool.chunks_used(), used) << "a refused pending append changes nothing";
  EXPECT_EQ(tree.Length(a->seq), 16);

  // The same append with the real token, on a twin tree, gives the slot to compare with.
  auto twin_pool = *ChunkPool::Create(64, 16);
  PrefixTree twin(&twin_pool);
  auto t = twin.Insert("", p);
  ASSERT_TRUE(t.ok());
  auto want = twin.Append(t->seq, 77);
  ASSERT_TRUE(want.ok());

  auto placed = tree.AppendPending(std::vector<SeqId>{a->seq});
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 1u);
  EXPECT_EQ((*placed)[0].new_slots, want->new_slots);
  EXPECT_TRUE((*placed)[0].copies.empty());
  EXPECT_EQ(tree.LastToken(a->seq), PrefixTree::kPendingToken);
  EXPECT_EQ(tree.Length(a->seq), 17);
  std::vector<int32_t> with = p;
  with.push_back(77);
  EXPECT_EQ(tree.Match("", with), 16) << "a pending token matches nothing";
  EXPECT_FALSE(tree.SetPendingToken(a->seq, -5).ok());
  EXPECT_FALSE(tree.AppendPending(std::vector<SeqId>{a->seq}).ok()) << "pending already";
  ASSERT_TRUE(tree.SetPendingToken(a->seq, 77).ok());
  EXPECT_FALSE(tree.SetPendingToken(a->seq, 78).ok()) << "it is no longer pending";
  EXPECT_EQ(tree.Tokens(a->seq), with);
  EXPECT_EQ(tree.Match("", with), 17);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();

  // A leaf with a (cached) child does not grow in place.
  auto b = tree.Insert("", p);  // matches the whole prompt: a second sequence on that path
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(tree.GrowsInPlace(b->seq));
  ASSERT_TRUE(tree.Release(a->seq).ok());
  EXPECT_FALSE(tree.GrowsInPlace(b->seq)) << "the released continuation is a cached child";
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

// A pending token whose step failed is never set: releasing its sequence drops it (and the
// chunk it alone took), so the cache keeps only known tokens and the prompt still matches whole.
TEST(PrefixTreeTest, ReleasingAPendingSequenceDropsItsPendingToken) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const std::vector<int32_t> p = OneFullChunk();  // the pending token takes a new chunk
  auto a = tree.Insert("", p);
  ASSERT_TRUE(a.ok());
  const int32_t used = pool.chunks_used();
  ASSERT_TRUE(tree.AppendPending(std::vector<SeqId>{a->seq}).ok());
  EXPECT_EQ(pool.chunks_used(), used + 1);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  ASSERT_TRUE(tree.Release(a->seq).ok());
  EXPECT_EQ(pool.chunks_used(), used) << "the pending token's chunk is freed";
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  auto b = tree.Insert("", p);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->matched_tokens, 16);
  EXPECT_TRUE(tree.GrowsInPlace(b->seq)) << "no cached pending child below the prompt";
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

// Samples that share a leaf (n > 1 that agree so far) take pending forks: each its own
// one-token child with a chunk of its own, so that no slot depends on a token. Once set, the
// forks are keyed by their tokens (two agreeing forks side by side), read back as appended, and
// grow in place from then on.
TEST(PrefixTreeTest, SamplesSharingALeafTakePendingForks) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};  // ends mid-chunk
  auto a = tree.Insert("", p);
  ASSERT_TRUE(a.ok());
  auto forks = tree.Fork(a->seq, 3);
  ASSERT_TRUE(forks.ok());
  const int32_t used = pool.chunks_used();
  auto placed = tree.AppendPending(*forks);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 3u);
  EXPECT_EQ(pool.chunks_used(), used + 3) << "a chunk per fork";
  std::set<ChunkId> chunks;
  for (size_t i = 0; i < 3; ++i) {
    const PlaceResult& r = (*placed)[i];
    EXPECT_EQ(r.seq, (*forks)[i]);
    ASSERT_EQ(r.new_slots.size(), 1u);
    EXPECT_EQ(r.new_slots[0].slot, 0) << "a fork starts its own chunk";
    chunks.insert(r.new_slots[0].chunk);
    EXPECT_EQ(tree.SlotAt(r.seq, 5), r.new_slots[0]);
    EXPECT_EQ(tree.Length(r.seq), 6);
    EXPECT_EQ(tree.LastToken(r.seq), PrefixTree::kPendingToken);
  }
  EXPECT_EQ(chunks.size(), 3u);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 7}), 5) << "forks match nothing";

  ASSERT_TRUE(tree.SetPendingToken((*forks)[0], 7).ok());
  ASSERT_TRUE(tree.SetPendingToken((*forks)[1], 7).ok());
  ASSERT_TRUE(tree.SetPendingToken((*forks)[2], 8).ok());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  EXPECT_EQ(tree.Tokens((*forks)[0]), (std::vector<int32_t>{1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(tree.Tokens((*forks)[1]), (std::vector<int32_t>{1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(tree.Tokens((*forks)[2]), (std::vector<int32_t>{1, 2, 3, 4, 5, 8}));
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 7, 9}), 6);
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 8}), 6);

  // Each fork now grows in place: the next pending tokens take spare slots of their chunks.
  for (SeqId s : *forks) EXPECT_TRUE(tree.GrowsInPlace(s));
  auto again = tree.AppendPending(*forks);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(pool.chunks_used(), used + 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*again)[i].new_slots[0].chunk, (*placed)[i].new_slots[0].chunk);
    EXPECT_EQ((*again)[i].new_slots[0].slot, 1);
    ASSERT_TRUE(tree.SetPendingToken((*forks)[i], 9).ok());
  }
  EXPECT_EQ(tree.Tokens((*forks)[1]), (std::vector<int32_t>{1, 2, 3, 4, 5, 7, 9}));
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  for (SeqId s : *forks) ASSERT_TRUE(tree.Release(s).ok());
  EXPECT_EQ(tree.Stats().chunks_live, 0);
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 7, 9}), 7);
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 8, 9}), 7);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

// A sequence whose leaf has a cached continuation below it (a repeated prompt) takes a pending
// fork beside it. A token that starts the cached continuation makes it a stale duplicate, which
// is dropped (as an unfed append drops it); another token leaves it cached.
TEST(PrefixTreeTest, APendingForkBesideACachedContinuation) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  const std::vector<int32_t> answer = {1, 2, 3, 4, 5, 20, 21, 22};
  auto a = tree.Insert("", p);
  ASSERT_TRUE(a.ok());
  for (int32_t t : {20, 21, 22}) ASSERT_TRUE(tree.Append(a->seq, t).ok());
  ASSERT_TRUE(tree.Release(a->seq).ok());

  auto b = tree.Insert("", p);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->matched_tokens, 5);
  EXPECT_FALSE(tree.GrowsInPlace(b->seq)) << "the cached answer hangs below the prompt";
  ASSERT_TRUE(tree.AppendPending(std::vector<SeqId>{b->seq}).ok());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  ASSERT_TRUE(tree.SetPendingToken(b->seq, 30).ok());
  EXPECT_EQ(tree.Match("", answer), 8) << "another token leaves the cached answer";
  EXPECT_EQ(tree.Tokens(b->seq), (std::vector<int32_t>{1, 2, 3, 4, 5, 30}));
  ASSERT_TRUE(tree.Release(b->seq).ok());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();

  auto c = tree.Insert("", p);
  ASSERT_TRUE(c.ok());
  const int32_t cached = tree.Stats().chunks_cached;
  ASSERT_TRUE(tree.AppendPending(std::vector<SeqId>{c->seq}).ok());
  ASSERT_TRUE(tree.SetPendingToken(c->seq, 20).ok());
  EXPECT_EQ(tree.Stats().chunks_cached, cached - 1) << "the stale answer's chunk is freed";
  EXPECT_EQ(tree.Match("", answer), 6) << "only the live fork starts with 20 now";
  EXPECT_EQ(tree.Match("", std::vector<int32_t>{1, 2, 3, 4, 5, 30}), 6) << "the other stays";
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

// A pending fork whose step failed is never set: releasing its sequence drops the fork and its
// chunk, so the cache keeps only known tokens and the prompt's leaf is childless again.
TEST(PrefixTreeTest, ReleasingAnUnsetPendingForkDropsIt) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  auto a = tree.Insert("", p);
  ASSERT_TRUE(a.ok());
  auto forks = tree.Fork(a->seq, 2);
  ASSERT_TRUE(forks.ok());
  const int32_t used = pool.chunks_used();
  ASSERT_TRUE(tree.AppendPending(*forks).ok());
  EXPECT_EQ(pool.chunks_used(), used + 2);
  ASSERT_TRUE(tree.Release((*forks)[0]).ok());
  EXPECT_EQ(pool.chunks_used(), used + 1);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  ASSERT_TRUE(tree.Release((*forks)[1]).ok());
  EXPECT_EQ(pool.chunks_used(), used);
  EXPECT_EQ(tree.Stats().chunks_live, 0);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  auto b = tree.Insert("", p);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->matched_tokens, 5);
  EXPECT_TRUE(tree.GrowsInPlace(b->seq)) << "no fork left below the prompt";
}

int64_t SavedBySharingOf(const PrefixTree& tree) { return tree.Stats().chunks_saved_by_sharing; }

// Issue 13: banyan_kv_chunks_saved_by_sharing went negative under load. Sharing a short prefix
// that ends mid-chunk costs a chunk at the node boundary (each branch's first chunk), which the
// old "sum(ceil(len / c)) - chunks_live" charged to sharing: -1 here. The shared chunk is still
// stored once for two sequences, so one chunk is saved.
TEST(PrefixTreeTest, SavedBySharingCountsChunksStoredOnceForSeveralSequences) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 10, 11, 12, 13, 14};
  std::vector<int32_t> b = {1, 2, 3, 4, 5, 20, 21, 22, 23, 24};
  auto pa = tree.Insert("", a);
  ASSERT_TRUE(pa.ok());
  EXPECT_EQ(SavedBySharingOf(tree), 0);  // one sequence shares nothing
  auto pb = tree.Insert("", b);
  ASSERT_TRUE(pb.ok());
  EXPECT_EQ(pb->matched_tokens, 5);
  MemoryStats st = tree.Stats();
  EXPECT_GT(st.chunks_live, 2) << "the layout costs more than ceil(len / c) per sequence";
  EXPECT_EQ(st.chunks_saved_by_sharing, 1);
  // A third sequence through the same prefix saves it once more; a fork shares the whole path.
  auto pc = tree.Insert("", std::vector<int32_t>{1, 2, 3, 4, 5, 30});
  ASSERT_TRUE(pc.ok());
  EXPECT_EQ(SavedBySharingOf(tree), 2);
  // Released sequences save nothing: what stays cached is not shared by anyone live.
  ASSERT_TRUE(tree.Release(pb->seq).ok());
  ASSERT_TRUE(tree.Release(pc->seq).ok());
  EXPECT_EQ(SavedBySharingOf(tree), 0);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

TEST(PrefixTreeTest, AppendGrowsInPlaceWithoutShapeChange) {
  auto pool = *ChunkPool::Create(8, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> p = {5, 6, 7};
  SeqId s = tree.Insert("", p)->seq;
  uint64_t v = tree.shape_version();
  for (int i = 0; i < 13; ++i) ASSERT_TRUE(tree.Append(s, 100 + i).ok());  // fills chunk 0
  EXPECT_EQ(tree.shape_version(), v);
  ASSERT_TRUE(tree.Append(s, 1).ok());  // needs a second chunk
  EXPECT_NE(tree.shape_version(), v);
  EXPECT_EQ(pool.chunks_used(), 2);
}

TEST(PrefixTreeTest, ForkThenDivergeAndReuse) {
  auto pool = *ChunkPool::Create(16, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> p(20, 7);
  SeqId s = tree.Insert("", p)->seq;
  auto ids = *tree.Fork(s, 3);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(pool.chunks_used(), 2);
  auto a0 = *tree.Append(ids[0], 1);
  EXPECT_EQ(a0.new_slots.size(), 1u);
  auto a1 = *tree.Append(ids[1], 1);  // same token at the same place: reuse ids[0]'s KV
  EXPECT_EQ(a1.matched_tokens, 1);
  EXPECT_TRUE(a1.new_slots.empty());
  auto a2 = *tree.Append(ids[2], 2);
  EXPECT_EQ(a2.new_slots.size(), 1u);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  auto order = tree.DfsOrder();
  EXPECT_EQ(order.size(), 3u);
}

// Rejected speculative candidates: a sequence's own in-place tail is cut back (its emptied chunks
// return to the pool); candidates in a node other sequences share end the sequence at a split,
// leaving the sharers' tokens and KV where they were.
TEST(PrefixTreeTest, TruncateDropsRejectedCandidates) {
  auto pool = *ChunkPool::Create(16, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> p(14, 7);
  SeqId s = tree.Insert("", p)->seq;
  std::vector<int32_t> chain = {1, 2, 3, 4, 5};  // crosses into a second chunk
  ASSERT_TRUE(tree.Extend(s, chain).ok());
  EXPECT_EQ(pool.chunks_used(), 2);
  std::vector<ChunkCopy> copies;
  ASSERT_TRUE(tree.Truncate(s, 16, &copies).ok());  // keeps 1, 2
  EXPECT_EQ(tree.Length(s), 16);
  EXPECT_EQ(tree.TokenAt(s, 15), 2);
  EXPECT_EQ(pool.chunks_used(), 1);
  EXPECT_TRUE(copies.empty());
  ASSERT_TRUE(tree.Append(s, 9).ok());  // grows again where the candidates were
  EXPECT_EQ(tree.TokenAt(s, 16), 9);
  EXPECT_EQ(tree.SlotAt(s, 16).chunk, tree.LastSlot(s).chunk);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();

  // Another sequence shares the prefix and the first two candidates.
  auto ids = *tree.Fork(s, 2);
  ASSERT_TRUE(tree.Extend(ids[0], std::vector<int32_t>{20, 21, 22}).ok());
  ASSERT_TRUE(tree.Extend(ids[1], std::vector<int32_t>{20, 21, 30}).ok());
  const int32_t before = pool.chunks_used();
  ASSERT_TRUE(tree.Truncate(ids[1], tree.Length(ids[1]) - 2, &copies).ok());  // keeps 20
  EXPECT_EQ(tree.Length(ids[1]), 18);
  EXPECT_EQ(tree.TokenAt(ids[1], 17), 20);
  EXPECT_EQ(tree.Length(ids[0]), 20);
  EXPECT_EQ(tree.TokenAt(ids[0], 19), 22);
  // The private node holding 30 is freed; the split at the cut may take a chunk for its copy.
  EXPECT_LE(pool.chunks_used(), before);
  EXPECT_FALSE(copies.empty());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  EXPECT_FALSE(tree.Truncate(ids[1], 0, &copies).ok());
  EXPECT_FALSE(tree.Truncate(ids[1], 19, &copies).ok());
  ASSERT_TRUE(tree.Release(ids[0]).ok());
  ASSERT_TRUE(tree.Release(ids[1]).ok());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

// A candidate tree placed packed: a fork per leaf, each extended by its root-to-leaf path, the
// nodes sharing one chunk. The paths split each other's nodes without copies; every slot is the
// node's own; cut back and released, the forks leave the pool as it was.
TEST(PrefixTreeTest, PackedCandidateTreeSharesAChunk) {
  auto pool = *ChunkPool::Create(16, 16);
  PrefixTree tree(&pool);
  const SeqId s = tree.Insert("", std::vector<int32_t>(10, 7))->seq;
  const int32_t base = tree.Length(s);
  const int32_t used = pool.chunks_used();
  // [2, 2]: paths (1, 3), (1, 4), (2, 5), (2, 6).
  const std::vector<std::vector<int32_t>> paths = {{1, 3}, {1, 4}, {2, 5}, {2, 6}};
  auto forks = *tree.Fork(s, static_cast<int>(paths.size()) + 1);
  std::set<std::pair<ChunkId, int32_t>> slots;
  for (size_t f = 0; f < paths.size(); ++f) {
    auto r = tree.ExtendPacked(forks[f + 1], paths[f]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->copies.empty()) << "fork " << f;  // a packed split copies nothing
    for (const SlotRef& sl : r->new_slots) {
      EXPECT_TRUE(slots.insert({sl.chunk, sl.slot}).second) << "slot written twice";
    }
    ASSERT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  }
  tree.EndPacking();
  EXPECT_EQ(slots.size(), 6u);                 // 6 nodes, 6 slots
  EXPECT_EQ(pool.chunks_used(), used + 1);     // not 6 chunks
  EXPECT_EQ(tree.Stats().chunks_live, used + 1);
  for (size_t f = 0; f < paths.size(); ++f) {
    EXPECT_EQ(tree.TokenAt(forks[f + 1], base), paths[f][0]);
    EXPECT_EQ(tree.TokenAt(forks[f + 1], base + 1), paths[f][1]);
    EXPECT_NE(tree.SlotAt(forks[f + 1], base + 1), tree.SlotAt(forks[(f + 1) % 4 + 1], base + 1));
  }
  // A packed leaf never grows in place: a plain append after it takes a chunk of its own.
  ASSERT_TRUE(tree.Append(forks[1], 9).ok());
  EXPECT_EQ(pool.chunks_used(), used + 2);
  ASSERT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  std::vector<ChunkCopy> copies;
  for (size_t f = 1; f < forks.size(); ++f) {
    ASSERT_TRUE(tree.Truncate(forks[f], base, &copies).ok());
    ASSERT_TRUE(tree.Release(forks[f]).ok());
    ASSERT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  }
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(pool.chunks_used(), used);
  EXPECT_EQ(forks[0], s);  // Fork's first is the sequence itself
  ASSERT_TRUE(tree.Release(s).ok());
  tree.Evict(1 << 20);
  EXPECT_EQ(pool.chunks_used(), 0);
}

// Cutting inside a shared node mid-chunk needs a chunk for the split's copy: a cached leaf is
// evicted for it, and without one Truncate fails before changing anything (it once aborted).
TEST(PrefixTreeTest, TruncateInsideASharedNodeWithAFullPool) {
  auto pool = *ChunkPool::Create(3, 16);
  PrefixTree tree(&pool);
  SeqId s = tree.Insert("", std::vector<int32_t>(10, 7))->seq;
  auto ids = *tree.Fork(s, 2);
  // Both samples drafted the same candidates: one shared child node in a chunk of its own.
  ASSERT_TRUE(tree.Extend(ids[0], std::vector<int32_t>{1, 2, 3, 4}).ok());
  ASSERT_TRUE(tree.Extend(ids[1], std::vector<int32_t>{1, 2, 3, 4}).ok());
  SeqId other = tree.Insert("", std::vector<int32_t>(5, 9))->seq;  // the last chunk
  ASSERT_EQ(pool.chunks_free(), 0);
  std::vector<ChunkCopy> copies;
  const uint64_t v = tree.shape_version();
  const absl::Status t = tree.Truncate(ids[0], 12, &copies);  // keeps 1, 2 of the shared node
  EXPECT_EQ(t.code(), absl::StatusCode::kResourceExhausted) << t;
  EXPECT_EQ(tree.Length(ids[0]), 14);
  EXPECT_EQ(tree.shape_version(), v);
  EXPECT_TRUE(copies.empty());
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  // With a cached leaf to evict, the same cut goes through.
  ASSERT_TRUE(tree.Release(other).ok());
  ASSERT_TRUE(tree.Truncate(ids[0], 12, &copies).ok());
  EXPECT_EQ(tree.Length(ids[0]), 12);
  EXPECT_EQ(tree.TokenAt(ids[1], 13), 4);
  EXPECT_EQ(copies.size(), 1u);
  EXPECT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
}

TEST(PrefixTreeTest, OutOfMemoryLeavesTreeUnchanged) {
  auto pool = *ChunkPool::Create(4, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> a(40, 1);
  SeqId s = tree.Insert("", a)->seq;  // 3 chunks
  uint64_t v = tree.shape_version();
  MemoryStats before = tree.Stats();
  std::vector<int32_t> b(40, 1);
  b[20] = 2;  // needs a split copy + 2 chunks: 3 > 1 free
  auto r = tree.Insert("", b);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("need 3 chunks, 1 free"), std::string::npos)
      << r.status();
  EXPECT_EQ(tree.shape_version(), v);
  MemoryStats after = tree.Stats();
  EXPECT_EQ(after.chunks_free, before.chunks_free);
  EXPECT_EQ(after.nodes, before.nodes);
  EXPECT_EQ(tree.Tokens(s), a);
  EXPECT_TRUE(tree.CheckInvariants().ok());
  // A live sequence is never evicted, even when asked to.
  EXPECT_EQ(tree.Evict(100), 0);
  ASSERT_TRUE(tree.Release(s).ok());
  // After release its nodes are cached; with allow_evict the insert evicts them and succeeds.
  EXPECT_EQ(tree.Stats().chunks_cached, 3);
  auto r2 = tree.Insert("other", b, /*allow_evict=*/true);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_TRUE(tree.CheckInvariants().ok());
}

// ---------------------------------------------------------------- property test

class TreeModel {
 public:
  TreeModel(int32_t chunks, int32_t chunk_size)
      : pool_(*ChunkPool::Create(chunks, chunk_size)), tree_(&pool_),
        kv_(static_cast<size_t>(chunks) * chunk_size, 0) {}

  PrefixTree& tree() { return tree_; }
  ChunkPool& pool() { return pool_; }
  std::map<SeqId, std::vector<int32_t>>& live() { return live_; }

  void Apply(const PlaceResult& r, const std::vector<int32_t>& tokens) {
    const int32_t c = pool_.chunk_size();
    for (const ChunkCopy& cp : r.copies) {
      for (int32_t s = cp.slot_begin; s < cp.slot_end; ++s) {
        kv_[static_cast<size_t>(cp.dst) * c + s] = kv_[static_cast<size_t>(cp.src) * c + s];
      }
    }
    size_t first_new = tokens.size() - r.new_slots.size();
    for (size_t i = 0; i < r.new_slots.size(); ++i) {
      const SlotRef& sl = r.new_slots[i];
      kv_[static_cast<size_t>(sl.chunk) * c + sl.slot] = PrefixHash(tokens, first_new + i + 1);
    }
  }

  void Verify() {
    ASSERT_TRUE(tree_.CheckInvariants().ok()) << tree_.CheckInvariants();
    const int32_t c = pool_.chunk_size();
    ASSERT_EQ(tree_.Stats().live_sequences, static_cast<int32_t>(live_.size()));
    for (auto& [seq, tokens] : live_) {
      ASSERT_EQ(tree_.Tokens(seq), tokens) << "sequence " << seq;
      auto slots = tree_.Slots(seq, 0, static_cast<int32_t>(tokens.size()));
      ASSERT_EQ(slots.size(), tokens.size());
      for (size_t i = 0; i < slots.size(); ++i) {
        ASSERT_EQ(kv_[static_cast<size_t>(slots[i].chunk) * c + slots[i].slot],
                  PrefixHash(tokens, i + 1))
            << "sequence " << seq << " position " << i << " reads the wrong KV";
      }
    }
    MemoryStats st = tree_.Stats();
    ASSERT_EQ(st.chunks_live + st.chunks_cached, pool_.chunks_used());
    ASSERT_EQ(st.chunks_free, pool_.chunks_free());
  }

 private:
  ChunkPool pool_;
  PrefixTree tree_;
  std::vector<uint64_t> kv_;  // simulated KV: one value per slot
  std::map<SeqId, std::vector<int32_t>> live_;
};

// Checks a plan against the tree: each row's segments + private spans hold exactly its slots;
// segments cover exactly the rows whose paths contain their chunks; with DFS order nothing shared
// by >= 2 rows is read privately.
// `lengths` (optional): each row's context length, when the plan was built with row lengths.
void VerifyPlan(const PrefixTree& tree, const AttentionPlan& plan, bool dfs_order,
                std::span<const int32_t> lengths = {}) {
  // Rows by the slots they read (packed candidate nodes share a chunk, not a slot).
  std::map<std::pair<int32_t, int32_t>, std::set<int32_t>> rows_of_slot;
  std::vector<std::vector<SlotRef>> slots_of_row(plan.num_rows());
  for (int32_t r = 0; r < plan.num_rows(); ++r) {
    const int32_t len = lengths.empty() ? tree.Length(plan.rows[r]) : lengths[r];
    slots_of_row[r] = tree.Slots(plan.rows[r], 0, len);
    for (auto& s : slots_of_row[r]) rows_of_slot[{s.chunk, s.slot}].insert(r);
  }
  for (int32_t s = 0; s < plan.num_segments(); ++s) {
    ASSERT_GE(plan.seg_row_end[s] - plan.seg_row_begin[s], 2);
    std::set<int32_t> want;
    for (int32_t r = plan.seg_row_begin[s]; r < plan.seg_row_end[s]; ++r) want.insert(r);
    for (int32_t sp = plan.seg_span_begin[s]; sp < plan.seg_span_end[s]; ++sp) {
      for (int32_t sl = plan.span_begin[sp]; sl < plan.span_end[sp]; ++sl) {
        ASSERT_EQ((rows_of_slot[{plan.span_chunk[sp], sl}]), want) << "segment " << s;
      }
    }
  }
  for (int32_t r = 0; r < plan.num_rows(); ++r) {
    std::multiset<std::pair<int32_t, int32_t>> got, want;
    auto add_spans = [&](int32_t lo, int32_t hi) {
      for (int32_t sp = lo; sp < hi; ++sp) {
        for (int32_t sl = plan.span_begin[sp]; sl < plan.span_end[sp]; ++sl) {
          got.insert({plan.span_chunk[sp], sl});
        }
      }
    };
    for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
      int32_t s = plan.row_seg_ids[i];
      ASSERT_TRUE(r >= plan.seg_row_begin[s] && r < plan.seg_row_end[s]);
      add_spans(plan.seg_span_begin[s], plan.seg_span_end[s]);
    }
    add_spans(plan.row_span_begin[r], plan.row_span_end[r]);
    for (auto& s : slots_of_row[r]) want.insert({s.chunk, s.slot});
    ASSERT_EQ(got, want) << "row " << r;
    ASSERT_EQ(plan.row_length[r], static_cast<int32_t>(want.size()));
    if (dfs_order) {
      for (int32_t sp = plan.row_span_begin[r]; sp < plan.row_span_end[r]; ++sp) {
        for (int32_t sl = plan.span_begin[sp]; sl < plan.span_end[sp]; ++sl) {
          ASSERT_EQ((rows_of_slot[{plan.span_chunk[sp], sl}].size()), 1u)
              << "row " << r << " reads a shared slot privately under DFS order";
        }
      }
    }
  }
}

// Thirty random trials, in six instances of five (each with its own seed), so that ctest's shards
// of kvcache_test split them: under ASan + UBSan the trials take most of the binary's time.
class PrefixTreePropertyTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(FiveTrials, PrefixTreePropertyTest, ::testing::Range(0, 6));

TEST_P(PrefixTreePropertyTest, RandomOperationSequences) {
  BANYAN_SEEDED_RNG(rng);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 5; ++trial) {
    const int32_t c = std::vector<int32_t>{16, 32, 64}[uni(0, 2)];
    TreeModel m(uni(8, 80), c);
    const int vocab = uni(2, 50);  // small vocabularies force deep sharing and reuse
    std::vector<std::vector<int32_t>> prefixes;  // depth-1 and depth-2 shared prefixes
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p(uni(1, 3 * c));
      for (auto& t : p) t = uni(0, vocab - 1);
      prefixes.push_back(p);
      std::vector<int32_t> q = p;
      for (int k = uni(1, c + 5); k > 0; --k) q.push_back(uni(0, vocab - 1));
      prefixes.push_back(q);
    }
    AttentionPlan plan;
    for (int step = 0; step < 120; ++step) {
      auto& live = m.live();
      const int op = uni(0, 10);
      if (op <= 2 || live.empty()) {  // insert
        std::vector<int32_t> t = prefixes[uni(0, prefixes.size() - 1)];
        if (uni(0, 3) == 0) t.resize(uni(1, t.size()));
        for (int k = uni(0, 2 * c); k > 0; --k) t.push_back(uni(0, vocab - 1));
        std::string ns = uni(0, 4) == 0 ? "tenant-b" : "";
        uint64_t v = m.tree().shape_version();
        int32_t used = m.pool().chunks_used();
        const bool allow_evict = uni(0, 1) == 1;
        auto r = m.tree().Insert(ns, t, allow_evict);
        if (r.ok()) {
          live[r->seq] = t;
          m.Apply(*r, t);
        } else {
          ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
          ASSERT_EQ(m.tree().shape_version(), v);
          if (!allow_evict) {
            ASSERT_EQ(m.pool().chunks_used(), used);
          }
        }
      } else {
        auto it = live.begin();
        std::advance(it, uni(0, live.size() - 1));
        SeqId seq = it->first;
        if (op <= 5) {  // append / extend, often repeating a sibling's token
          int n = uni(0, 2) == 0 ? uni(1, c + 3) : 1;
          std::vector<int32_t> add(n);
          for (auto& t : add) t = uni(0, vocab - 1);
          uint64_t v = m.tree().shape_version();
          int32_t used = m.pool().chunks_used();
          const bool allow_evict = uni(0, 1) == 1;
          // Packed (speculation's candidate trees): new nodes share a chunk (never evicts).
          const bool packed = uni(0, 3) == 0;
          auto r = packed ? m.tree().ExtendPacked(seq, add) : m.tree().Extend(seq, add, allow_evict);
          if (r.ok()) {
            it->second.insert(it->second.end(), add.begin(), add.end());
            m.Apply(*r, it->second);
          } else {
            ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
            ASSERT_EQ(m.tree().shape_version(), v);
            if (!allow_evict || packed) {
              ASSERT_EQ(m.pool().chunks_used(), used);
            }
          }
        } else if (op == 6 && uni(0, 1) == 0) {  // a decode step over a subset, often agreeing
          std::vector<std::pair<SeqId, int32_t>> items;
          const int32_t common = uni(0, vocab - 1);
          for (auto& [id, toks] : live) {
            if (uni(0, 3) != 0) items.emplace_back(id, uni(0, 2) != 0 ? common : uni(0, vocab - 1));
          }
          uint64_t v = m.tree().shape_version();
          int32_t used = m.pool().chunks_used();
          const bool allow_evict = uni(0, 1) == 1;
          auto r = m.tree().AppendBatch(items, allow_evict);
          if (r.ok()) {
            ASSERT_EQ(r->size(), items.size());
            for (size_t i = 0; i < items.size(); ++i) live[items[i].first].push_back(items[i].second);
            for (size_t i = 0; i < items.size(); ++i) m.Apply((*r)[i], live[items[i].first]);
          } else {
            ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
            ASSERT_EQ(m.tree().shape_version(), v);
            if (!allow_evict) {
              ASSERT_EQ(m.pool().chunks_used(), used);
            }
          }
        } else if (op == 6) {
          auto ids = m.tree().Fork(seq, uni(2, 4));
          ASSERT_TRUE(ids.ok());
          for (SeqId id : *ids) live[id] = live[seq];
        } else if (op <= 8) {
          ASSERT_TRUE(m.tree().Release(seq).ok());
          live.erase(seq);
        } else if (op == 9) {
          m.tree().Evict(uni(1, 10));
          if (uni(0, 1) == 0) m.tree().EndPacking();
        } else {
          // A fed step over a subset: pending tokens placed, their KV written with the tokens
          // the step samples (often agreeing), then set; or the step fails and some of its
          // sequences are released with their tokens never set.
          std::vector<SeqId> seqs;
          for (auto& [id, toks] : live) {
            if (uni(0, 2) != 0) seqs.push_back(id);
          }
          uint64_t v = m.tree().shape_version();
          int32_t used = m.pool().chunks_used();
          const bool allow_evict = uni(0, 1) == 1;
          auto r = m.tree().AppendPending(seqs, allow_evict);
          if (r.ok()) {
            ASSERT_EQ(r->size(), seqs.size());
            ASSERT_TRUE(m.tree().CheckInvariants().ok()) << m.tree().CheckInvariants();
            const bool fails = uni(0, 5) == 0;
            const int32_t common = uni(0, vocab - 1);
            for (size_t i = 0; i < seqs.size(); ++i) {
              ASSERT_EQ((*r)[i].new_slots.size(), 1u);
              ASSERT_TRUE((*r)[i].copies.empty());
              if (fails && uni(0, 1) == 0) {
                ASSERT_TRUE(m.tree().Release(seqs[i]).ok());
                live.erase(seqs[i]);
                continue;
              }
              const int32_t t = uni(0, 2) != 0 ? common : uni(0, vocab - 1);
              live[seqs[i]].push_back(t);
              m.Apply((*r)[i], live[seqs[i]]);
              ASSERT_TRUE(m.tree().SetPendingToken(seqs[i], t).ok());
            }
          } else {
            ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
            ASSERT_EQ(m.tree().shape_version(), v);
            if (!allow_evict) {
              ASSERT_EQ(m.pool().chunks_used(), used);
            }
          }
        }
      }
      m.Verify();
      if (HasFatalFailure()) return;

      // Plans: DFS order, a random subset of it, and a shuffled order.
      std::vector<SeqId> rows = m.tree().DfsOrder();
      bool reuse = PlanReusable(plan, m.tree(), rows);
      if (reuse) {
        AdvanceLengths(plan, m.tree());
        AttentionPlan fresh = BuildAttentionPlan(m.tree(), rows);
        ASSERT_EQ(plan.span_end, fresh.span_end);
        ASSERT_EQ(plan.row_length, fresh.row_length);
      } else {
        plan = BuildAttentionPlan(m.tree(), rows);
      }
      VerifyPlan(m.tree(), plan, true);
      std::vector<SeqId> subset;
      for (SeqId s : rows) if (uni(0, 2) != 0) subset.push_back(s);
      VerifyPlan(m.tree(), BuildAttentionPlan(m.tree(), subset), true);
      std::shuffle(rows.begin(), rows.end(), rng);
      VerifyPlan(m.tree(), BuildAttentionPlan(m.tree(), rows), false);
      AttentionPlan unshared = BuildAttentionPlan(m.tree(), rows, {.share = false});
      ASSERT_EQ(unshared.num_segments(), 0);
      VerifyPlan(m.tree(), unshared, false);
      if (HasFatalFailure()) return;
    }
    // Nothing leaks: release everything, evict everything.
    for (auto& [seq, t] : m.live()) ASSERT_TRUE(m.tree().Release(seq).ok());
    m.live().clear();
    m.tree().Evict(1 << 30);
    m.tree().EndPacking();
    EXPECT_EQ(m.pool().chunks_used(), 0);
    EXPECT_EQ(m.tree().Stats().nodes, 0);
    ASSERT_TRUE(m.tree().CheckInvariants().ok());
  }
}

TEST(AttentionPlanTest, HierarchicalSegmentsSpanWholePaths) {
  auto pool = *ChunkPool::Create(200, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> global(100);
  for (int i = 0; i < 100; ++i) global[i] = i;
  std::vector<SeqId> ids;
  for (int g = 0; g < 2; ++g) {
    for (int r = 0; r < 3; ++r) {
      std::vector<int32_t> t = global;
      for (int k = 0; k < 40; ++k) t.push_back(1000 + g * 100 + k);  // group prefix
      t.push_back(5000 + g * 10 + r);                              // private tail
      ids.push_back(tree.Insert("", t)->seq);
    }
  }
  auto rows = tree.DfsOrder();
  AttentionPlan plan = BuildAttentionPlan(tree, rows);
  // One global segment over all 6 rows, one per group over 3 rows.
  ASSERT_EQ(plan.num_segments(), 3);
  EXPECT_EQ(plan.seg_row_end[0] - plan.seg_row_begin[0], 6);
  EXPECT_EQ(plan.seg_tokens[0], 100);
  EXPECT_EQ(plan.seg_tokens[1], 40);
  EXPECT_EQ(plan.num_partials, 12);
  EXPECT_EQ(plan.shared_tokens(), 180);
  EXPECT_EQ(plan.private_tokens(), 6);
  VerifyPlan(tree, plan, true);
}

// build_id: a fresh one per build (never 0), kept by AdvanceLengths and by copies, so that a
// consumer keyed on it sees exactly the owner's decision to rebuild or advance.
TEST(AttentionPlanTest, BuildIdChangesOnlyWithARebuild) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  const SeqId a = tree.Insert("", std::vector<int32_t>{1, 2, 3})->seq;
  const SeqId b = tree.Insert("", std::vector<int32_t>{1, 2, 4})->seq;
  const std::vector<SeqId> rows = tree.DfsOrder();
  AttentionPlan plan = BuildAttentionPlan(tree, rows);
  const uint64_t id = plan.build_id;
  EXPECT_NE(id, 0u);
  EXPECT_NE(BuildAttentionPlan(tree, rows).build_id, id);  // the same shape, built again
  ASSERT_TRUE(tree.Append(a, 5).ok());
  ASSERT_TRUE(PlanReusable(plan, tree, rows));
  AdvanceLengths(plan, tree);
  EXPECT_EQ(plan.build_id, id);
  const AttentionPlan copy = plan;
  EXPECT_EQ(copy.build_id, id);
  EXPECT_NE(BuildAttentionPlan(tree, std::vector<SeqId>{b}).build_id, id);
  EXPECT_EQ(AttentionPlan{}.build_id, 0u);
}

// Candidate-chain rows: a sequence in several adjacent rows, each attending to a prefix of it.
// Every row must read exactly the slots of its own prefix; the prefix both sequences share stays
// one phase-1 segment over all their rows; the cut leaves are read per row.
TEST(AttentionPlanTest, RowLengthsReadPrefixesOfTheirSequence) {
  auto pool = *ChunkPool::Create(64, 16);
  PrefixTree tree(&pool);
  std::vector<int32_t> shared(40);
  for (int i = 0; i < 40; ++i) shared[i] = i;
  std::vector<SeqId> seqs;
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> t = shared;
    for (int i = 0; i < 14; ++i) t.push_back(100 * (k + 1) + i);  // 10-token tail + 4 candidates
    seqs.push_back(tree.Insert("", t)->seq);
  }
  std::vector<SeqId> rows;
  std::vector<int32_t> lengths;
  for (SeqId s : tree.DfsOrder()) {
    for (int32_t len = 50; len <= 54; ++len) {
      rows.push_back(s);
      lengths.push_back(len);
    }
  }
  AttentionPlan plan = BuildAttentionPlan(tree, rows, lengths);
  EXPECT_TRUE(plan.limited);
  EXPECT_FALSE(PlanReusable(plan, tree, rows));
  ASSERT_EQ(plan.num_segments(), 1);
  EXPECT_EQ(plan.seg_row_end[0] - plan.seg_row_begin[0], 10);
  EXPECT_EQ(plan.seg_tokens[0], 40);
  VerifyPlan(tree, plan, /*dfs_order=*/false, lengths);
  for (int32_t r = 0; r < plan.num_rows(); ++r) EXPECT_EQ(plan.row_tail_span[r], -1);
  // Full lengths give the same reads as the plan without lengths.
  std::vector<SeqId> full_rows = tree.DfsOrder();
  std::vector<int32_t> full(full_rows.size(), 54);
  AttentionPlan a = BuildAttentionPlan(tree, full_rows, full);
  AttentionPlan b = BuildAttentionPlan(tree, full_rows);
  EXPECT_EQ(a.span_chunk, b.span_chunk);
  EXPECT_EQ(a.span_end, b.span_end);
  EXPECT_EQ(a.row_length, b.row_length);
}

}  // namespace
}  // namespace banyan::kvcache
