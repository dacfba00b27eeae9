// The padded row count of graph-captured decode steps (engine/cuda/cuda_backend.h); host only
// (cuda_host_test, no GPU needed).
#include "engine/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace banyan::engine {
namespace {

TEST(DecodeRowBucket, RoundsUpToTheBucketOfItsRange) {
  EXPECT_EQ(DecodeRowBucket(1), 8);
  EXPECT_EQ(DecodeRowBucket(8), 8);
  EXPECT_EQ(DecodeRowBucket(9), 16);
  EXPECT_EQ(DecodeRowBucket(64), 64);
  EXPECT_EQ(DecodeRowBucket(65), 80);
  EXPECT_EQ(DecodeRowBucket(250), 256);
  EXPECT_EQ(DecodeRowBucket(257), 288);
  EXPECT_EQ(DecodeRowBucket(1000), 1024);
  EXPECT_EQ(DecodeRowBucket(1025), 1088);
  for (int r = 1; r < 3000; ++r) {
    EXPECT_GE(DecodeRowBucket(r), r);
    EXPECT_LE(DecodeRowBucket(r) - r, 63);
  }
}

}  // namespace
}  // namespace banyan::engine
