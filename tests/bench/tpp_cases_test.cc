// The TPP microbenchmark's case list, trees and floors (bench/tpp/cases.h), on the host: the
// cases recorded in docs/benchmarks_tpp.md keep their floors, and issue 15's new cases have the
// shapes and trees they claim.
#include "bench/tpp/cases.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "kvcache/chunk_pool.h"

namespace banyan::bench {
namespace {

struct Planned {
  kvcache::AttentionPlan plan;
  TppFloor floor;
};

// As tpp_bench plans a case: seed 12345, the plan with sharing.
Planned Plan(const TppCase& c) {
  std::mt19937_64 rng(12345);
  auto pool = kvcache::ChunkPool::Create(static_cast<int32_t>(TppPoolChunks(c)), kTppBenchChunk);
  EXPECT_TRUE(pool.ok());
  kvcache::PrefixTree tree(&*pool);
  const std::vector<kvcache::SeqId> rows = BuildTppTree(tree, c, rng);
  Planned p;
  p.plan = kvcache::BuildAttentionPlan(tree, rows, {.share = true});
  p.floor = TppCaseFloor(c, p.plan);
  return p;
}

std::map<std::string, TppCase> ById() {
  std::map<std::string, TppCase> m;
  for (const TppCase& c : TppCases()) {
    const std::string id = c.Id() + "_s" + c.PrivateDesc() + (c.share ? "" : "_noshare");
    EXPECT_TRUE(m.emplace(id, c).second) << "duplicate case " << id;
  }
  return m;
}

TEST(TppCases, RecordedFloorsAreUnchanged) {
  // Bytes, FLOPs and floors of the H200 run of 2026-11-30
  // (results/tpp/h200-2026-12-04-s16-table.jsonl has the same floors), shared cases.
  struct Recorded {
    const char* id;
    double floor_us, bytes, flops;
    int segments;
  };
  const Recorded recorded[] = {
      {"chunkattn_table_b32_p1024_s1", 3.93, 17301504, 537395200, 1},
      {"chunkattn_table_b32_p4096_s1", 15.37, 67633152, 2148007936, 1},
      {"hydragen_fig5_b1024_p32768_s1", 183.26, 17301504, 137443147776, 1},
      {"hydragen_fig5_suffix256_b256_p32768_s256", 46.17, 50331648, 34628173824, 1},
      {"llama7b_b256_p16k_s128_b256_p16384_s128", 183.02, 805306368, 69256347648, 1},
      {"noshare_chunkattn_b32_p4096_s1_noshare", 488.18, 2148007936, 2148007936, 0},
      {"hierarchical_b256_p4096_s32..256", 53.83, 236834816, 22086631424, 17},
  };
  const auto cases = ById();
  for (const Recorded& r : recorded) {
    SCOPED_TRACE(r.id);
    ASSERT_TRUE(cases.contains(r.id));
    const Planned p = Plan(cases.at(r.id));
    EXPECT_EQ(p.floor.bytes, r.bytes);
    EXPECT_EQ(p.floor.flops, r.flops);
    EXPECT_NEAR(p.floor.us, r.floor_us, 0.005);
    EXPECT_EQ(p.plan.num_segments(), r.segments);
  }
}

// With an FP8 cache the floor's bytes are (head_dim + 1) / (2 head_dim) of bf16's and its FLOPs
// the same (the products stay bf16).
TEST(TppCases, Fp8FloorCountsFp8Bytes) {
  const auto cases = ById();
  const TppCase& c = cases.at("chunkattn_table_b32_p4096_s1");
  const Planned p = Plan(c);
  const TppFloor f8 = TppCaseFloor(c, p.plan, /*kv_fp8=*/true);
  EXPECT_EQ(f8.bytes * 256, p.floor.bytes * 129);
  EXPECT_EQ(f8.flops, p.floor.flops);
  EXPECT_LE(f8.us, p.floor.us);
}

TEST(TppCases, Mha7bAtB1024HasFixedAndSpreadTails) {
  const auto cases = ById();
  for (int p : {2048, 16384}) {
    for (const char* tail : {"1", "64", "1..64"}) {
      const std::string name = std::string(tail) == "1"    ? "mha7b_tail1"
                               : std::string(tail) == "64" ? "mha7b_tail64"
                                                           : "mha7b_tail1to64";
      const std::string id = name + "_b1024_p" + std::to_string(p) + "_s" + tail;
      SCOPED_TRACE(id);
      ASSERT_TRUE(cases.contains(id));
      const TppCase& c = cases.at(id);
      EXPECT_EQ(c.hq, 32);
      EXPECT_EQ(c.hkv, 32);
      EXPECT_EQ(c.d, 128);
      const Planned pl = Plan(c);
      ASSERT_EQ(pl.plan.num_rows(), 1024);
      EXPECT_EQ(pl.plan.num_segments(), 1);
      EXPECT_EQ(pl.plan.shared_tokens(), p);
      int64_t private_tokens = 0;
      for (int32_t len : pl.plan.row_length) {
        EXPECT_GE(len - p, c.tail_min > 0 ? c.tail_min : c.priv);
        EXPECT_LE(len - p, c.priv);
        private_tokens += len - p;
      }
      EXPECT_EQ(pl.plan.private_tokens(), private_tokens);
      // Floor: bytes (16 KiB of K+V per token), FLOPs (4 x 32 x 128 per context token).
      EXPECT_EQ(pl.floor.bytes, (p + private_tokens) * 16384.0);
      EXPECT_EQ(pl.floor.flops, 4.0 * 32 * 128 * (1024.0 * p + private_tokens));
    }
  }
  // 16K, 64-token tails: FLOP-bound, 4 x 32 x 128 x 1024 x 16448 at 750 TFLOP/s.
  EXPECT_NEAR(Plan(cases.at("mha7b_tail64_b1024_p16384_s64")).floor.us, 367.9, 0.05);
  // 2K, 64-token tails: bound by the 1,024 private tails' KV (1.1 GB at 4.4 TB/s).
  EXPECT_NEAR(Plan(cases.at("mha7b_tail64_b1024_p2048_s64")).floor.us, 251.7, 0.05);
}

TEST(TppCases, Llama3_8bHeadsAtB256And1024) {
  const auto cases = ById();
  for (int b : {256, 1024}) {
    for (int p : {2048, 16384}) {
      const std::string id =
          "llama3_8b_tail1to64_b" + std::to_string(b) + "_p" + std::to_string(p) + "_s1..64";
      SCOPED_TRACE(id);
      ASSERT_TRUE(cases.contains(id));
      const TppCase& c = cases.at(id);
      EXPECT_EQ(c.hq, 32);
      EXPECT_EQ(c.hkv, 8);
      const Planned pl = Plan(c);
      EXPECT_EQ(pl.plan.num_rows(), b);
      EXPECT_EQ(pl.plan.shared_tokens(), p);
      EXPECT_GT(pl.floor.us, 0);
    }
  }
}

TEST(TppCases, TreeHas64RowsUnderFourSharedLevels) {
  const auto cases = ById();
  const std::string id = "tree_4x4x2x2_b64_p2048_s1..64";
  ASSERT_TRUE(cases.contains(id));
  const Planned pl = Plan(cases.at(id));
  ASSERT_EQ(pl.plan.num_rows(), 64);
  // 1 + 4 + 16 + 32 segments, shared by 64, 16, 4 and 2 rows.
  std::map<int, std::pair<int, int>> rows_to_count_and_tokens;
  for (int s = 0; s < pl.plan.num_segments(); ++s) {
    auto& [count, tokens] =
        rows_to_count_and_tokens[pl.plan.seg_row_end[s] - pl.plan.seg_row_begin[s]];
    ++count;
    tokens = pl.plan.seg_tokens[s];
  }
  const std::map<int, std::pair<int, int>> want = {
      {64, {1, 2048}}, {16, {4, 1024}}, {4, {16, 512}}, {2, {32, 256}}};
  EXPECT_EQ(rows_to_count_and_tokens, want);
  EXPECT_EQ(pl.plan.shared_tokens(), 2048 + 4 * 1024 + 16 * 512 + 32 * 256);
  for (int32_t len : pl.plan.row_length) {
    EXPECT_GE(len, 2048 + 1024 + 512 + 256 + 1);
    EXPECT_LE(len, 2048 + 1024 + 512 + 256 + 64);
  }
}

}  // namespace
}  // namespace banyan::bench
