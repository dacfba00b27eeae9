// Table tests of the pure scheduling policy: each case is a state and the plan it must give.
#include "scheduler/policy.h"

#include "gtest/gtest.h"

namespace banyan::scheduler {
namespace {

using Prefill = std::vector<std::pair<uint64_t, int32_t>>;

PolicyRequest Waiting(uint64_t h, int32_t prompt, int priority = 0, int n = 1) {
  return PolicyRequest{.handle = h, .priority = priority, .arrival = h, .sequences = n,
                       .remaining_prefill = prompt, .chunks_needed = (prompt + 15) / 16 + 1 + n};
}
PolicyRequest Decoding(uint64_t h, int32_t need, int32_t priv, int priority = 0) {
  return PolicyRequest{.handle = h, .priority = priority, .arrival = h, .sequences = 1,
                       .chunks_needed = need, .chunks_private = priv, .decoding = true};
}
PolicyRequest Prefilling(uint64_t h, int32_t remaining) {
  return PolicyRequest{.handle = h, .arrival = h, .sequences = 1, .remaining_prefill = remaining,
                       .chunks_private = 2};
}

struct Case {
  const char* name;
  PolicyInput in;
  std::vector<uint64_t> preempt, decode, admit;
  Prefill prefill;
};

TEST(PolicyTest, Table) {
  auto input = [](std::vector<PolicyRequest> w, std::vector<PolicyRequest> r, int free,
                  int cached = 0, int budget = 64, int max_seq = 8) {
    return PolicyInput{.waiting = w, .running = r, .chunks_free = free, .chunks_cached = cached,
                       .chunk_size = 16, .max_sequences = max_seq,
                       .prefill_token_budget = budget, .tenants = {}};
  };
  std::vector<Case> cases = {
      {"idle", input({}, {}, 100), {}, {}, {}, {}},
      {"admit FCFS within the prefill budget, chunked",
       input({Waiting(1, 40), Waiting(2, 40)}, {}, 100), {}, {}, {1, 2}, {{1, 40}, {2, 24}}},
      {"higher priority admitted first",
       input({Waiting(1, 40), Waiting(2, 40, 5)}, {}, 100, 0, 40), {}, {}, {2}, {{2, 40}}},
      {"decode rows continue while a long prompt prefills in chunks",
       input({}, {Decoding(1, 1, 3), Prefilling(2, 200)}, 100), {}, {1}, {}, {{2, 64}}},
      {"cached chunks count as available memory",
       input({Waiting(1, 100)}, {}, 2, 50), {}, {}, {1}, {{1, 64}}},
      {"no memory: the head of the queue waits, nobody overtakes it",
       input({Waiting(1, 400), Waiting(2, 10)}, {Decoding(5, 1, 3)}, 10), {}, {5}, {}, {}},
      {"nothing running: the head is admitted whatever the estimate (alone it fits)",
       input({Waiting(1, 400), Waiting(2, 10)}, {}, 10), {}, {}, {1}, {{1, 64}}},
      {"the last running request is never preempted",
       input({}, {Decoding(1, 5, 5)}, 2), {}, {1}, {}, {}},
      {"decode short of memory: preempt lowest priority, then latest arrival",
       input({Waiting(9, 10)}, {Decoding(1, 1, 5, 1), Decoding(2, 1, 5), Decoding(3, 1, 5)}, 2),
       {3}, {1, 2}, {}, {}},
      {"no admission in an iteration that preempted",
       input({Waiting(9, 10)}, {Decoding(1, 2, 5), Decoding(2, 2, 5)}, 3), {2}, {1}, {}, {}},
      {"sequence cap limits admission (n counts)",
       input({Waiting(1, 10, 0, 6), Waiting(2, 10, 0, 4)}, {}, 100), {}, {}, {1}, {{1, 10}}},
      {"fully cached prompt admitted even with no budget left",
       input({Waiting(1, 64), PolicyRequest{.handle = 2, .arrival = 2, .sequences = 1,
                                           .remaining_prefill = 0, .chunks_needed = 2}},
             {}, 100),
       {}, {}, {1, 2}, {{1, 64}, {2, 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    IterationPlan p = Schedule(c.in);
    EXPECT_EQ(p.preempt, c.preempt);
    EXPECT_EQ(p.decode, c.decode);
    EXPECT_EQ(p.admit, c.admit);
    EXPECT_EQ(p.prefill, c.prefill);
  }
}

// A sequence of iterations: a long prompt is prefilled in budget-sized chunks across iterations
// while a running request keeps decoding every iteration.
TEST(PolicyTest, ChunkedPrefillNeverStallsDecodes) {
  int32_t remaining = 300;
  int iterations = 0;
  while (remaining > 0) {
    PolicyInput in{.waiting = {}, .running = {Decoding(1, 1, 3), Prefilling(2, remaining)},
                   .chunks_free = 100, .chunks_cached = 0, .chunk_size = 16,
                   .max_sequences = 8, .prefill_token_budget = 128, .tenants = {}};
    IterationPlan p = Schedule(in);
    ASSERT_EQ(p.decode, std::vector<uint64_t>{1});
    ASSERT_EQ(p.prefill.size(), 1u);
    EXPECT_LE(p.prefill[0].second, 128);
    remaining -= p.prefill[0].second;
    ++iterations;
  }
  EXPECT_EQ(iterations, 3);
}

// Prefix groups: followers are charged what their leader does not compute, when it computes it.
PolicyRequest Led(PolicyRequest r, uint64_t leader, int32_t leader_tokens, int32_t led) {
  r.leader = leader;
  r.leader_tokens = leader_tokens;
  r.led_prefill = led;
  r.led_chunks = r.chunks_needed - ((r.remaining_prefill + 15) / 16 - (led + 15) / 16);
  return r;
}

TEST(PolicyTest, PrefixGroupsChargeTheSharedPromptOnce) {
  auto input = [](std::vector<PolicyRequest> w, std::vector<PolicyRequest> r, int budget) {
    return PolicyInput{.waiting = w, .running = r, .chunks_free = 200, .chunks_cached = 0,
                       .chunk_size = 16, .max_sequences = 16, .prefill_token_budget = budget,
                       .tenants = {}};
  };
  // Four requests with a 96-token uncached prompt in common and 8 tokens each of their own.
  std::vector<PolicyRequest> burst = {Waiting(1, 104)};
  for (uint64_t h = 2; h <= 4; ++h) burst.push_back(Led(Waiting(h, 104), 1, 96, 8));
  {
    // Without groups a budget of 128 admits the leader and 24 tokens of a second; with them,
    // all four (104 + 3 x 8).
    std::vector<PolicyRequest> plain = {Waiting(1, 104), Waiting(2, 104), Waiting(3, 104),
                                        Waiting(4, 104)};
    EXPECT_EQ(Schedule(input(plain, {}, 128)).prefill, (Prefill{{1, 104}, {2, 24}}));
    const IterationPlan p = Schedule(input(burst, {}, 128));
    EXPECT_EQ(p.admit, (std::vector<uint64_t>{1, 2, 3, 4}));
    EXPECT_EQ(p.prefill, (Prefill{{1, 104}, {2, 8}, {3, 8}, {4, 8}}));
  }
  {
    // The leader gets 64 tokens, short of the shared 96: its followers are held, and a request
    // needing no prefill behind them is still admitted.
    std::vector<PolicyRequest> w = burst;
    w.push_back(Waiting(5, 0));
    const IterationPlan p = Schedule(input(w, {}, 64));
    EXPECT_EQ(p.admit, (std::vector<uint64_t>{1, 5}));
    EXPECT_EQ(p.prefill, (Prefill{{1, 64}, {5, 0}}));
  }
  {
    // A prefilling leader placing the rest of the shared part this iteration brings them in.
    std::vector<PolicyRequest> w(burst.begin() + 1, burst.end());
    for (PolicyRequest& r : w) r.leader_tokens = 40;
    const IterationPlan p = Schedule(input(w, {Prefilling(1, 48)}, 80));
    EXPECT_EQ(p.prefill, (Prefill{{1, 48}, {2, 8}, {3, 8}, {4, 8}}));
  }
  {
    // A leader not in this plan (one still waiting elsewhere in the queue): the follower pays
    // in full, as without a leader.
    std::vector<PolicyRequest> w = {Led(Waiting(2, 104), 7, 96, 8)};
    const IterationPlan p = Schedule(input(w, {}, 64));
    EXPECT_EQ(p.prefill, (Prefill{{2, 64}}));
  }
}

}  // namespace
}  // namespace banyan::scheduler

namespace banyan::scheduler {
namespace {

PolicyRequest OfTenant(PolicyRequest r, int32_t tenant) {
  r.tenant = tenant;
  return r;
}

// Tenant KV budgets (issue 14): a tenant at its budget waits, without blocking other tenants.
TEST(PolicyTest, TenantKvBudgets) {
  auto input = [](std::vector<PolicyRequest> w, std::vector<PolicyRequest> r,
                  std::vector<PolicyTenant> tenants) {
    return PolicyInput{.waiting = w, .running = r, .chunks_free = 1000, .chunks_cached = 0,
                       .chunk_size = 16, .max_sequences = 64, .prefill_token_budget = 1024,
                       .tenants = tenants};
  };
  struct TenantCase {
    const char* name;
    PolicyInput in;
    std::vector<uint64_t> admit;
  };
  // Waiting(h, prompt tokens): chunks_needed = ceil(tokens / 16) + 2.
  const std::vector<TenantCase> cases = {
      {"within budget: admitted",
       input({OfTenant(Waiting(1, 64), 0)}, {OfTenant(Decoding(9, 1, 1), 0)}, {{20, 10}}), {1}},
      {"over budget while the tenant runs: held",
       input({OfTenant(Waiting(1, 64), 0)}, {OfTenant(Decoding(9, 1, 1), 0)}, {{12, 10}}), {}},
      {"held requests do not block another tenant behind them",
       input({OfTenant(Waiting(1, 64), 0), OfTenant(Waiting(2, 64), 1)},
             {OfTenant(Decoding(9, 1, 1), 0)}, {{12, 10}, {100, 0}}),
       {2}},
      {"nothing of the tenant runs: its head request is admitted whatever its size",
       input({OfTenant(Waiting(1, 640), 0)}, {Decoding(9, 1, 1)}, {{12, 0}}), {1}},
      {"admissions in one iteration add up",
       input({OfTenant(Waiting(1, 64), 0), OfTenant(Waiting(2, 64), 0),
              OfTenant(Waiting(3, 64), 0)},
             {OfTenant(Decoding(9, 1, 1), 0)}, {{15, 2}}),
       {1, 2}},
      {"no budget (-1): unlimited", input({Waiting(1, 640)}, {Decoding(9, 1, 1)}, {}), {1}},
  };
  for (const TenantCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Schedule(c.in).admit, c.admit);
  }
}

TEST(PolicyTest, MemoryCostModel) {
  // Admission: ceil(uncached / c) + cached chunks turned live + a split copy + one per sample.
  EXPECT_EQ(AdmissionChunks(0, 0, 1, 16), 2);
  EXPECT_EQ(AdmissionChunks(1, 0, 1, 16), 3);
  EXPECT_EQ(AdmissionChunks(16, 0, 1, 16), 3);
  EXPECT_EQ(AdmissionChunks(17, 3, 4, 16), 2 + 3 + 1 + 4);
  // Resume: ceil(uncached / c) + cached chunks + two per sample.
  EXPECT_EQ(ResumeChunks(0, 0, 1, 16), 2);
  EXPECT_EQ(ResumeChunks(33, 5, 3, 16), 3 + 5 + 6);
}

TEST(PolicyTest, AppendVictimIsTheLeastImportant) {
  struct VictimCase {
    const char* name;
    std::vector<PolicyRequest> candidates;
    uint64_t victim;
  };
  const std::vector<VictimCase> cases = {
      {"none", {}, 0},
      {"one", {Decoding(4, 1, 1)}, 4},
      {"latest arrival among equals", {Decoding(1, 1, 1), Decoding(3, 1, 1), Decoding(2, 1, 1)},
       3},
      {"lowest priority first",
       {Decoding(1, 1, 1, /*priority=*/0), Decoding(2, 1, 1, /*priority=*/5),
        Decoding(3, 1, 1, /*priority=*/1)},
       1},
      {"priority beats arrival",
       {Decoding(9, 1, 1, /*priority=*/2), Decoding(1, 1, 1, /*priority=*/-1)},
       1},
  };
  for (const VictimCase& c : cases) {
    EXPECT_EQ(ChooseAppendVictim(c.candidates), c.victim) << c.name;
  }
}

}  // namespace
}  // namespace banyan::scheduler
