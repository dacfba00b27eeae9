// The CUDA attention entry points refuse unsupported head dims before touching a device, so this
// runs on the host (cuda_host_test, no GPU needed).
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

}  // namespace
}  // namespace banyan::kernels::cuda
