// Table tests of the TPP cost model (kernels/cuda/tpp/tpp_cost_model.h): each case is a shape
// summary, a problem and options, and the choices they must give. The rule numbers are the
// header's. Where the split model picks a count from its estimate, the case bounds it; the rest is
// exact.
#include "kernels/cuda/tpp/tpp_cost_model.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace banyan::kernels::cuda::tpp {
namespace {

// `rows` rows with private tails of `tail` tokens each and nothing shared.
TppShapeSummary Unshared(int32_t rows, int64_t tail, double reuse = 1.0) {
  TppShapeSummary s;
  s.num_rows = rows;
  s.private_tokens = rows * tail;
  s.phase2_tokens = rows * tail;
  s.private_reuse = reuse;
  return s;
}

// One segment of `prefix` tokens (in chunks of 64) over `rows` rows, each with a tail.
TppShapeSummary Shared(int32_t rows, int64_t prefix, int64_t tail) {
  TppShapeSummary s = Unshared(rows, tail);
  s.segments.push_back(TppSegmentShape{.tokens = prefix,
                                       .spans = static_cast<int32_t>((prefix + 63) / 64),
                                       .row_begin = 0,
                                       .row_end = rows});
  return s;
}

TppOptions With(void (*set)(TppOptions&)) {
  TppOptions o;
  set(o);
  return o;
}

struct Case {
  const char* name;
  TppShapeSummary shape;
  TppProblem problem;
  TppOptions options;
  // Expected choices.
  Phase1Path p1_path;
  int32_t p1_block_m;
  int32_t p1_splits_min, p1_splits_max;  // of the first segment; 0, 0 without segments
  bool deferred;
  Phase2Path p2_path;
  int32_t group, groups;
  int64_t split_tokens;
};

TEST(TppCostModelTest, Table) {
  const TppProblem mha{32, 32, 128, 64};     // the 7B shape's heads
  const TppProblem llama3{32, 8, 128, 64};   // GQA 4
  const TppProblem hydragen{8, 1, 128, 64};  // GQA 8, one kv head
  const auto mma = Phase1Path::kMmaSync;
  const std::vector<Case> cases = {
      // Rules 5, 6: one 2K row, MHA: CUDA cores; 32 CTAs a row split of 528 wanted, so the
      // minimum piece of 256 tokens.
      {"one row, MHA", Unshared(1, 2048), mha, {}, mma, 64, 0, 0, false, Phase2Path::kCudaCores,
       1, 1, 256},
      // 16K: pieces of ceil(16384 * 32 / 528) = 993 tokens.
      {"one long row, MHA", Unshared(1, 16384), mha, {}, mma, 64, 0, 0, false,
       Phase2Path::kCudaCores, 1, 1, 993},
      {"piece length capped by p2_max_split_tokens", Unshared(1, 2048), mha,
       With([](TppOptions& o) { o.p2_max_split_tokens = 48; }), mma, 64, 0, 0, false,
       Phase2Path::kCudaCores, 1, 1, 48},
      // Rule 5: distinct long tails on a full machine (128 x 32 = 4,096 warps) stay on the CTA
      // kernel; re-read ones (a plan without sharing over a common prefix) take the warp kernel.
      // Pieces: 25,600 tokens x 32 CTAs (CTA kernel) or 8 (warp kernel: 32 warps, four a CTA)
      // over 528 CTAs.
      {"distinct long tails, full machine", Unshared(128, 200, 1.0), mha, {}, mma, 64, 0, 0,
       false, Phase2Path::kCudaCores, 1, 1, 1552},
      {"re-read long tails, full machine", Unshared(128, 200, 128.0), mha, {}, mma, 64, 0, 0,
       false, Phase2Path::kWarpPerHead, 1, 1, 388},
      {"re-read long tails, half the machine", Unshared(64, 200, 64.0), mha, {}, mma, 64, 0, 0,
       false, Phase2Path::kCudaCores, 1, 1, 776},
      // GQA 4 with tails of 64 tokens or more: tensor cores, 16 q heads per CTA.
      {"GQA 4, tails of 300", Unshared(4, 300), llama3, {}, mma, 64, 0, 0, false,
       Phase2Path::kTensorCores, 16, 1, 256},
      {"GQA 4, tails of 300, p2_mma 0", Unshared(4, 300), llama3,
       With([](TppOptions& o) { o.p2_mma = 0; }), mma, 64, 0, 0, false, Phase2Path::kCudaCores,
       4, 1, 256},
      {"GQA 2, p2_mma 1", Unshared(4, 300), TppProblem{4, 2, 128, 64},
       With([](TppOptions& o) { o.p2_mma = 1; }), mma, 64, 0, 0, false,
       Phase2Path::kTensorCores, 16, 1, 256},
      {"GQA 12 on CUDA cores: two groups of 8", Unshared(4, 300), TppProblem{24, 2, 128, 64},
       With([](TppOptions& o) { o.p2_mma = 0; }), mma, 64, 0, 0, false, Phase2Path::kCudaCores,
       8, 2, 256},
      // Short tails: 256 rows x 8 kv heads = 2,048 warps of 4 heads, 2,048 x 256 >= 12 x 2,560
      // x 4: the warp kernel; 64 rows (512 warps) the CTA kernel.
      {"GQA 4, 256 short tails", Unshared(256, 10), llama3, {}, mma, 64, 0, 0, false,
       Phase2Path::kWarpPerHead, 4, 1, 256},
      {"GQA 4, 64 short tails", Unshared(64, 10), llama3, {}, mma, 64, 0, 0, false,
       Phase2Path::kCudaCores, 4, 1, 256},
      {"GQA 4, 256 short tails, p2_warp 0", Unshared(256, 10), llama3,
       With([](TppOptions& o) { o.p2_warp = 0; }), mma, 64, 0, 0, false, Phase2Path::kCudaCores,
       4, 1, 256},
      {"GQA 12, 256 short tails: three warps of 4 heads", Unshared(256, 10),
       TppProblem{72, 6, 128, 64}, {}, mma, 64, 0, 0, false, Phase2Path::kWarpPerHead, 4, 3,
       256},
      // No compiled family: the generic kernel, a warp per q head, whatever else holds.
      {"head_dim without a family",
       [] {
         TppShapeSummary s = Unshared(4, 300);
         s.compiled_family = false;
         return s;
       }(),
       TppProblem{32, 8, 96, 64}, {}, mma, 64, 0, 0, false, Phase2Path::kGeneric, 1, 4, 256},
      // Rules 1-4. Hydragen's shape: M = 1,024 x 8 queries of one kv head fill the machine with
      // M tiles of 128; little to gain from splitting; both phases long enough to overlap.
      {"Hydragen, 1,024 rows over 32K", Shared(1024, 32768, 1), hydragen, {}, mma, 128, 1, 4,
       false, Phase2Path::kWarpPerHead, 4, 2, 256},
      // Two rows: 16 queries, one tile; the segment is split to fill the SMs.
      {"two rows over 32K", Shared(2, 32768, 1), hydragen, {}, mma, 64, 17, 64, false,
       Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_splits forces the count", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) { o.p1_splits = 3; }), mma, 64, 3, 3, false,
       Phase2Path::kCudaCores, 8, 1, 256},
      // 64 forced splits of 512 tokens; the minimum split of 1,024 allows 32.
      {"p1_splits within the minimum length", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) {
         o.p1_splits = 64;
         o.p1_min_split_tokens = 1024;
       }),
       mma, 64, 32, 32, false, Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_block_m forced", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) {
         o.p1_block_m = 128;
         o.p1_splits = 1;
       }),
       mma, 128, 1, 1, false, Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_wgmma 1", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) {
         o.p1_wgmma = 1;
         o.p1_splits = 1;
       }),
       Phase1Path::kWgmma, 64, 1, 1, false, Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_wgmma 2", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) {
         o.p1_wgmma = 2;
         o.p1_splits = 1;
       }),
       Phase1Path::kWgmmaCooperative, 64, 1, 1, false, Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_wgmma -1 follows the device",
       [] {
         TppShapeSummary s = Shared(2, 32768, 1);
         s.wgmma_available = true;
         return s;
       }(),
       hydragen, With([](TppOptions& o) { o.p1_splits = 1; }), Phase1Path::kWgmma, 64, 1, 1,
       false, Phase2Path::kCudaCores, 8, 1, 256},
      {"p1_wgmma 0 whatever the device",
       [] {
         TppShapeSummary s = Shared(2, 32768, 1);
         s.wgmma_available = true;
         return s;
       }(),
       hydragen,
       With([](TppOptions& o) {
         o.p1_wgmma = 0;
         o.p1_splits = 1;
       }),
       mma, 64, 1, 1, false, Phase2Path::kCudaCores, 8, 1, 256},
      // Rule 4: 128 rows of 4K private tokens (0.6 ms of reads) behind a 32K prefix: both
      // phases far longer than the merge, so phase 2 does not wait for phase 1. Pieces of
      // 524,288 x 8 / 528 tokens.
      {"both phases long: deferred merge", Shared(128, 32768, 4096), llama3, {}, mma, 128, 1, 64,
       true, Phase2Path::kTensorCores, 16, 1, 7944},
      {"deferred merge off", Shared(128, 32768, 4096), llama3,
       With([](TppOptions& o) { o.defer_merge = 0; }), mma, 128, 1, 64, false,
       Phase2Path::kTensorCores, 16, 1, 7944},
      {"deferred merge forced", Shared(2, 32768, 1), hydragen,
       With([](TppOptions& o) { o.defer_merge = 1; }), mma, 64, 17, 64, true,
       Phase2Path::kCudaCores, 8, 1, 256},
      {"deferred merge forced, nothing shared", Unshared(2, 300), hydragen,
       With([](TppOptions& o) { o.defer_merge = 1; }), mma, 64, 0, 0, false,
       Phase2Path::kTensorCores, 16, 1, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TppChoices got = ChooseTppConfig(c.shape, c.problem, c.options);
    EXPECT_EQ(got.p1_path, c.p1_path);
    EXPECT_EQ(got.p1_block_m, c.p1_block_m);
    ASSERT_EQ(got.p1_splits.size(), c.shape.segments.size());
    if (!got.p1_splits.empty()) {
      EXPECT_GE(got.p1_splits[0], c.p1_splits_min);
      EXPECT_LE(got.p1_splits[0], c.p1_splits_max);
      EXPECT_GT(got.p1_seconds, 0.0);
    } else {
      EXPECT_EQ(got.p1_seconds, 0.0);
    }
    EXPECT_EQ(got.deferred_merge, c.deferred);
    EXPECT_EQ(got.p2_path, c.p2_path);
    EXPECT_EQ(got.p2_head_group, c.group);
    EXPECT_EQ(got.p2_head_groups, c.groups);
    EXPECT_EQ(got.p2_split_tokens, c.split_tokens);
    EXPECT_EQ(got.p2_max_splits, c.options.p2_max_splits);
  }
}

// Rule 6 for one range: the count rounds down to stay within the CTA target, rounds up where
// the length was capped, and never exceeds p2_max_splits or the range's spans.
TEST(TppCostModelTest, Phase2Pieces) {
  TppChoices c;
  c.p2_split_tokens = 256;
  c.p2_max_splits = 16;
  struct Row {
    int64_t tokens;
    int32_t spans;
    bool capped;
    int32_t want;
  };
  for (const Row r : {Row{2048, 32, false, 8}, Row{2047, 32, false, 7}, Row{2047, 32, true, 8},
                      Row{100, 2, false, 1}, Row{0, 0, false, 1}, Row{100000, 2000, false, 16},
                      Row{2048, 3, false, 3}, Row{2048, 3, true, 3}}) {
    c.p2_length_capped = r.capped;
    EXPECT_EQ(TppPhase2Pieces(c, r.tokens, r.spans), r.want)
        << r.tokens << " tokens, " << r.spans << " spans, capped " << r.capped;
  }
}

// Rule 7: tiles of 64 slots on tensor cores, 4 x 128 / (head_dim / 8) on CUDA cores; two stages up
// to eight tiles; the option when 2 or 3; always two on the kernels without a pipeline.
TEST(TppCostModelTest, Phase2Stages) {
  struct Row {
    Phase2Path path;
    bool tensor_tiles;
    int32_t head_dim, option;
    int64_t longest;
    int32_t want;
  };
  for (const Row r : {Row{Phase2Path::kTensorCores, true, 128, 0, 512, 2},
                      Row{Phase2Path::kTensorCores, true, 128, 0, 513, 3},
                      Row{Phase2Path::kCudaCores, false, 128, 0, 256, 2},
                      Row{Phase2Path::kCudaCores, false, 128, 0, 300, 3},
                      Row{Phase2Path::kCudaCores, false, 64, 0, 512, 2},
                      Row{Phase2Path::kCudaCores, false, 128, 2, 100000, 2},
                      Row{Phase2Path::kCudaCores, false, 128, 3, 1, 3},
                      Row{Phase2Path::kWarpPerHead, false, 128, 3, 100000, 2},
                      Row{Phase2Path::kGeneric, true, 96, 3, 100000, 2}}) {
    TppChoices c;
    c.p2_path = r.path;
    c.p2_tensor_tiles = r.tensor_tiles;
    TppOptions o;
    o.p2_stages = r.option;
    EXPECT_EQ(ChooseTppPhase2Stages(c, TppProblem{8, 2, r.head_dim, 64}, o, r.longest), r.want)
        << "path " << static_cast<int>(r.path) << " longest " << r.longest;
  }
}

// The warp kernel for re-read tails needs a full machine of warps: the summary computes the reuse
// only then.
TEST(TppCostModelTest, ReadsPrivateReuseOnAFullMachine) {
  EXPECT_TRUE(TppReadsPrivateReuse(TppProblem{32, 32, 128, 64}, 128));   // 4,096 warps
  EXPECT_FALSE(TppReadsPrivateReuse(TppProblem{32, 32, 128, 64}, 127));
  EXPECT_TRUE(TppReadsPrivateReuse(TppProblem{32, 8, 128, 64}, 512));    // 4 heads a warp
  EXPECT_FALSE(TppReadsPrivateReuse(TppProblem{32, 8, 128, 64}, 511));
  EXPECT_TRUE(TppReadsPrivateReuse(TppProblem{64, 8, 128, 64}, 256));    // 2 warps a kv head
  EXPECT_FALSE(TppReadsPrivateReuse(TppProblem{8, 8, 128, 64}, 0));
}

}  // namespace
}  // namespace banyan::kernels::cuda::tpp
