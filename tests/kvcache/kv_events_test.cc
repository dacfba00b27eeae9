// KV events of the prefix tree (kvcache/kv_events.h).
//
// The property test drives random operations (shared-prefix inserts, extends, batched appends
// that keep forked samples together or split them, forks, releases, truncations, evictions,
// pending tokens set or dropped) with an event log attached, and after every operation flushes
// the log into a subscriber that keeps a set of hashes. That set must equal the set of full
// blocks recomputed from the tree's tokens, and the log's holder counts the multiset.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/kv_events.h"
#include "kvcache/prefix_tree.h"
#include "tests/testing/random.h"

namespace banyan::kvcache {
namespace {

// Applies batches as a router would: a set of hashes.
class SetSink : public KvEventSink {
 public:
  void Publish(std::vector<KvEvent> events) override {
    ++batches;
    for (KvEvent& e : events) {
      switch (e.kind) {
        case KvEvent::Kind::kStored:
          EXPECT_TRUE(held.insert(e.hash).second) << "stored twice: " << e.hash;
          if (e.parent.has_value()) {
            EXPECT_TRUE(held.contains(*e.parent)) << "stored before its parent";
          }
          stored.push_back(std::move(e));
          break;
        case KvEvent::Kind::kRemoved:
          EXPECT_EQ(held.erase(e.hash), 1u) << "removed but not held: " << e.hash;
          break;
        case KvEvent::Kind::kAllCleared:
          held.clear();
          ++cleared;
          break;
      }
    }
  }
  bool TakeResyncRequest() override { return std::exchange(resync, false); }

  std::set<uint64_t> held;
  std::vector<KvEvent> stored;
  int batches = 0;
  int cleared = 0;
  bool resync = false;
};

struct Fixture {
  explicit Fixture(int chunks, int chunk_size = 16)
      : pool(*ChunkPool::Create(chunks, chunk_size)), tree(&pool) {
    tree.set_event_log(&log);
  }
  ~Fixture() { tree.set_event_log(nullptr); }

  // Flushes as the engine loop does at a step boundary, then checks the subscriber's view.
  void FlushAndCheck() {
    std::vector<FullBlock> snapshot;
    const bool want = log.WantsSnapshot(&sink);
    if (want) snapshot = tree.FullBlocks();
    log.Flush(&sink, want ? &snapshot : nullptr);
    std::map<uint64_t, int32_t> expect;
    for (const FullBlock& b : tree.FullBlocks()) ++expect[b.hash];
    std::set<uint64_t> expect_set;
    for (auto& [h, n] : expect) expect_set.insert(h);
    ASSERT_EQ(sink.held, expect_set);
    std::map<uint64_t, int32_t> holders(log.holders().begin(), log.holders().end());
    ASSERT_EQ(holders, expect);
    ASSERT_TRUE(tree.CheckInvariants().ok()) << tree.CheckInvariants();
  }

  KvEventLog log;
  SetSink sink;
  ChunkPool pool;
  PrefixTree tree;
};

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

TEST(KvEventsTest, FullBlocksChainFromTheNamespaceAndPartialOnesWait) {
  Fixture f(32);
  auto p = f.tree.Insert("alice", Range(100, 40));  // blocks [0,16), [16,32); 8 tokens wait
  ASSERT_TRUE(p.ok());
  f.FlushAndCheck();
  ASSERT_EQ(f.sink.stored.size(), 2u);
  const std::vector<int32_t> all = Range(100, 40);
  const std::vector<int32_t> b0(all.begin(), all.begin() + 16), b1(all.begin() + 16, all.begin() + 32);
  const uint64_t h0 = BlockHash(NamespaceSeed("alice"), b0);
  EXPECT_EQ(f.sink.stored[0].hash, h0);
  EXPECT_FALSE(f.sink.stored[0].parent.has_value());
  EXPECT_EQ(f.sink.stored[0].tokens, b0);
  EXPECT_EQ(f.sink.stored[0].ns, "alice");
  EXPECT_EQ(f.sink.stored[1].hash, BlockHash(h0, b1));
  EXPECT_EQ(f.sink.stored[1].parent, h0);
  EXPECT_EQ(f.sink.stored[1].tokens, b1);

  // The same prompt in another namespace: other hashes.
  ASSERT_TRUE(f.tree.Insert("bob", Range(100, 40)).ok());
  f.FlushAndCheck();
  ASSERT_EQ(f.sink.stored.size(), 4u);
  EXPECT_NE(f.sink.stored[2].hash, h0);
  EXPECT_EQ(f.sink.held.size(), 4u);

  // Eight more tokens fill the third block.
  ASSERT_TRUE(f.tree.Extend(p->seq, Range(140, 8)).ok());
  f.FlushAndCheck();
  ASSERT_EQ(f.sink.stored.size(), 5u);
  EXPECT_EQ(f.sink.stored[4].parent, f.sink.stored[1].hash);
}

TEST(KvEventsTest, SplitsReportNothingAndEvictionRemoves) {
  Fixture f(32);
  auto a = f.tree.Insert("", Range(0, 40));
  ASSERT_TRUE(a.ok());
  f.FlushAndCheck();
  const int batches = f.sink.batches;
  // Diverges at 20 (mid-chunk): the node splits, a chunk is copied, no block changes.
  std::vector<int32_t> other = Range(0, 20);
  other.push_back(999);
  auto b = f.tree.Insert("", other);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->copies.empty());
  f.FlushAndCheck();
  EXPECT_EQ(f.sink.batches, batches) << "a split reported events";
  ASSERT_TRUE(f.tree.Release(a->seq).ok());
  ASSERT_TRUE(f.tree.Release(b->seq).ok());
  f.tree.Evict(1000);
  f.FlushAndCheck();
  EXPECT_TRUE(f.sink.held.empty());
}

TEST(KvEventsTest, PendingTokenCompletesItsBlockOnlyOnceSet) {
  Fixture f(32);
  auto a = f.tree.Insert("", Range(0, 15));
  ASSERT_TRUE(a.ok());
  f.FlushAndCheck();
  EXPECT_TRUE(f.sink.held.empty());
  const SeqId seqs[] = {a->seq};
  ASSERT_TRUE(f.tree.AppendPending(seqs).ok());
  f.FlushAndCheck();
  EXPECT_TRUE(f.sink.held.empty()) << "a block holding a pending token was reported";
  ASSERT_TRUE(f.tree.SetPendingToken(a->seq, 15).ok());
  f.FlushAndCheck();
  EXPECT_EQ(f.sink.held.size(), 1u);
  EXPECT_TRUE(f.sink.held.contains(BlockHash(NamespaceSeed(""), Range(0, 16))));
}

TEST(KvEventsTest, ClearAndResync) {
  Fixture f(32);
  auto a = f.tree.Insert("", Range(0, 64));
  ASSERT_TRUE(a.ok());
  f.FlushAndCheck();
  // The sink lost batches: the next flush sends AllBlocksCleared and the whole state.
  f.sink.held.clear();
  f.sink.resync = true;
  f.FlushAndCheck();
  EXPECT_EQ(f.sink.cleared, 1);
  EXPECT_EQ(f.sink.held.size(), 4u);
  // Everything released and evicted, then cleared.
  ASSERT_TRUE(f.tree.Release(a->seq).ok());
  f.tree.Evict(1000);
  f.log.AllCleared();
  f.FlushAndCheck();
  EXPECT_EQ(f.sink.cleared, 2);
}

TEST(KvEventsTest, RandomOperationsKeepTheSubscriberExact) {
  BANYAN_SEEDED_RNG(rng);
  size_t stored_total = 0, removed_total = 0;
  for (int round = 0; round < 20; ++round) {
    const int chunk = (rng() % 2) ? 16 : 32;
    Fixture f(24 + static_cast<int>(rng() % 40), chunk);
    std::vector<SeqId> live;
    std::vector<SeqId> pending;  // live with a pending token
    const char* spaces[] = {"", "t1", "t2"};
    auto pick = [&](std::vector<SeqId>& v) { return v[rng() % v.size()]; };
    auto is_pending = [&](SeqId s) {
      return std::find(pending.begin(), pending.end(), s) != pending.end();
    };
    auto drop = [&](std::vector<SeqId>& v, SeqId s) { v.erase(std::find(v.begin(), v.end(), s)); };
    auto tok = [&]() { return static_cast<int32_t>(rng() % 4); };  // a tiny vocabulary: collisions
    for (int op = 0; op < 300; ++op) {
      const int kind = static_cast<int>(rng() % 9);
      std::vector<SeqId> settled;
      for (SeqId s : live) {
        if (!is_pending(s)) settled.push_back(s);
      }
      if (kind == 0 || live.empty()) {
        // A prompt: a shared stem (by namespace), then random tokens.
        std::vector<int32_t> prompt = Range(1000, static_cast<int32_t>(rng() % 50));
        const int tail = 1 + static_cast<int>(rng() % 40);
        for (int i = 0; i < tail; ++i) prompt.push_back(tok());
        auto r = f.tree.Insert(spaces[rng() % 3], prompt, /*allow_evict=*/true);
        if (r.ok()) live.push_back(r->seq);
      } else if (kind == 1 && !settled.empty()) {
        std::vector<int32_t> more;
        const int n = 1 + static_cast<int>(rng() % 30);
        for (int i = 0; i < n; ++i) more.push_back(tok());
        (void)f.tree.Extend(pick(settled), more, /*allow_evict=*/true);
      } else if (kind == 2 && !settled.empty()) {
        std::vector<std::pair<SeqId, int32_t>> items;
        const int32_t same = tok();
        for (SeqId s : settled) {
          if (rng() % 2) items.emplace_back(s, (rng() % 3) ? same : tok());
        }
        (void)f.tree.AppendBatch(items, /*allow_evict=*/true);
      } else if (kind == 3 && !settled.empty()) {
        auto ids = f.tree.Fork(pick(settled), 1 + static_cast<int>(rng() % 3));
        if (ids.ok()) live.insert(live.end(), ids->begin() + 1, ids->end());
      } else if (kind == 4) {
        const SeqId s = pick(live);
        ASSERT_TRUE(f.tree.Release(s).ok());
        drop(live, s);
        if (is_pending(s)) drop(pending, s);
      } else if (kind == 5 && !settled.empty()) {
        const SeqId s = pick(settled);
        const int32_t len = f.tree.Length(s);
        std::vector<ChunkCopy> copies;
        (void)f.tree.Truncate(s, 1 + static_cast<int32_t>(rng() % len), &copies);
      } else if (kind == 6) {
        f.tree.Evict(static_cast<int32_t>(rng() % 8));
      } else if (kind == 7 && !settled.empty()) {
        std::vector<SeqId> some;
        for (SeqId s : settled) {
          if (rng() % 2) some.push_back(s);
        }
        if (f.tree.AppendPending(some, /*allow_evict=*/true).ok()) {
          pending.insert(pending.end(), some.begin(), some.end());
        }
      } else if (kind == 8 && !pending.empty()) {
        const SeqId s = pick(pending);
        ASSERT_TRUE(f.tree.SetPendingToken(s, tok()).ok());
        drop(pending, s);
      }
      ASSERT_NO_FATAL_FAILURE(f.FlushAndCheck()) << "round " << round << " op " << op
                                                 << " kind " << kind;
      if (rng() % 50 == 0) f.sink.resync = true;  // a lost batch now and then
    }
    stored_total += f.sink.stored.size();
    removed_total += f.sink.stored.size() - f.sink.held.size();
  }
  // The walk exercised the events, not only empty trees.
  EXPECT_GT(stored_total, 500u);
  EXPECT_GT(removed_total, 100u);
}

}  // namespace
}  // namespace banyan::kvcache
