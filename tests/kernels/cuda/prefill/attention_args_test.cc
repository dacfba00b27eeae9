// The CUDA attention entry points refuse unsupported head dims, and work lists of tiles no
// kernel here runs, before touching a device, so this runs on the host (cuda_host_test, no GPU
// needed).
#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/tpp/tpp_attention.h"

namespace banyan::kernels::cuda {
namespace {

TEST(CudaAttention, RejectsUnsupportedHeadDim) {
  EXPECT_FALSE(tpp::TppSupportsHeadDim(12));
  EXPECT_FALSE(tpp::TppSupportsHeadDim(264));
  EXPECT_TRUE(tpp::TppSupportsHeadDim(40));
  PrefillParams pp;
  pp.kv.head_dim = 512;
  pp.kv.num_kv_heads = 1;
  pp.num_q_heads = 1;
  EXPECT_EQ(PrefillAttention(DType::kBf16, pp, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Tiles of 128 rows need the wgmma kernel: without a compute capability 9.0 device PrefillTileRows
// asks for 64, and a list of 128 is refused, not run in 64-row tiles; tile sizes of neither
// kernel are refused everywhere.
TEST(CudaAttention, RefusesTilesNoKernelRuns) {
  PrefillParams pp;
  pp.kv.head_dim = 128;
  pp.kv.num_kv_heads = 1;
  pp.kv.chunk_size = 64;
  pp.num_q_heads = 4;
  pp.num_tokens = 1;
  if (!tpp::TppPhase1WgmmaAvailable()) {  // (on such a device the kernel would run)
    EXPECT_EQ(PrefillTileRows(pp.kv), kPrefillBlockM);
    pp.block_m = kPrefillWgmmaBlockM;
    EXPECT_EQ(PrefillAttention(DType::kBf16, pp, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
  pp.block_m = 32;
  EXPECT_EQ(PrefillAttention(DType::kBf16, pp, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace banyan::kernels::cuda
