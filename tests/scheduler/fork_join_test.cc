// ForkJoin (scheduler/fork_join.h): every index runs exactly once per Run, on more than one thread
// when the pool has threads, Run returns only when all are done, and the pool is reusable.
#include "scheduler/fork_join.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace banyan::scheduler {
namespace {

TEST(ForkJoinTest, EveryIndexOnceAndAllDoneWhenRunReturns) {
  ForkJoin pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (size_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> calls(n);
    pool.Run(n, [&](size_t i) { calls[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << "index " << i << " of " << n;
  }
}

TEST(ForkJoinTest, PiecesRunBesideTheCaller) {
  ForkJoin pool(2);
  std::mutex mu;
  std::set<std::thread::id> seen;
  std::atomic<int> waiting{0};
  // Each of the first three pieces waits until three pieces have started: they can only all get
  // there if three threads (the caller and both pool threads) hold one each. A state, not a time.
  pool.Run(3, [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(std::this_thread::get_id());
    }
    waiting.fetch_add(1);
    while (waiting.load() < 3) std::this_thread::yield();
  });
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.contains(std::this_thread::get_id()));
}

TEST(ForkJoinTest, WithoutThreadsTheCallerRunsEverything) {
  ForkJoin pool(0);
  std::vector<int> order;
  pool.Run(5, [&](size_t i) { order.push_back(static_cast<int>(i)); });  // no lock: one thread
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace banyan::scheduler
