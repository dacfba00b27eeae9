// The physical limit's arithmetic (bench/physical_limit.h) against the numbers
// ../shared/PERFORMANCE.md section 2 and issue 15 quote for the 7B shape at B = 1,024, with the
// projection-only GEMM step PERFORMANCE.md measured on the H200 (19.6 ms).
#include "bench/physical_limit.h"

#include <gtest/gtest.h>

namespace banyan::bench {
namespace {

constexpr double kGemm7bB1024Seconds = 19.6e-3;  // PERFORMANCE.md: 52.3K tok/s, 691 TFLOP/s

DecodeStepShape Llama7b(int64_t batch, double prefix, double private_tokens) {
  DecodeStepShape s;
  s.batch = batch;
  s.layers = 32;
  s.q_heads = 32;
  s.kv_heads = 32;
  s.head_dim = 128;
  s.shared_tokens = prefix;
  s.private_tokens_per_row = private_tokens;
  return s;
}

// gpu_decode_bench's 64-step run: 2 warm-up steps, then rows hold s + 2 private tokens at step
// s = 2 .. 65, a mean of (64 + 7) / 2.
constexpr double kPrivateTokens64Steps = 35.5;

TEST(PhysicalLimit, SharedAttentionFlopsOf7bAt16k) {
  // PERFORMANCE.md: "at B = 1024 and P = 16K the attention's FLOPs alone take 11.5 ms at 764
  // TFLOP/s"; docs/benchmarks.md: 8.8 TFLOP per step.
  const DecodeStepShape s = Llama7b(1024, 16384, 0);
  EXPECT_NEAR(SharedAttentionFlops(s), 8.796e12, 0.001e12);
  EXPECT_NEAR(SharedAttentionFlops(s) / 764e12 * 1e3, 11.5, 0.05);
  EXPECT_EQ(KvBytesPerToken(s), 512.0 * 1024);  // 0.5 MiB per token over 32 layers
}

// An FP8 KV cache (kernels/kv_fp8.h): a code per element and an exponent byte per K or V row,
// 129 bytes where bf16 takes 256 at head_dim 128.
TEST(PhysicalLimit, Fp8KvCountsCodesAndExponents) {
  DecodeStepShape s = Llama7b(1024, 16384, 0);
  s.kv_elem_bytes = 1;
  s.kv_row_extra_bytes = 1;
  EXPECT_EQ(KvBytesPerToken(s), 2.0 * 32 * 32 * 129);
  EXPECT_EQ(SharedKvBytes(s) * 256, SharedKvBytes(Llama7b(1024, 16384, 0)) * 129);
}

TEST(PhysicalLimit, SevenBAt16kIsAbout31Ms) {
  // "about 31 ms per step at P = 16K (~ 33K tok/s)": GEMMs + the shared attention; the quote
  // leaves the private tails out (as its P = 2K twin, "about 21 ms plus the private tails", does).
  const DecodeStepLimit l = PhysicalDecodeStepLimit(kGemm7bB1024Seconds, Llama7b(1024, 16384, 0));
  EXPECT_NEAR(l.seconds() * 1e3, 31.0, 0.5);
  EXPECT_NEAR(l.tokens_per_s(1024), 33e3, 0.5e3);
  EXPECT_NEAR(l.shared_s * 1e3, 11.73, 0.01);  // FLOP-bound: the KV read once is 1.95 ms
}

TEST(PhysicalLimit, SevenBAt2kIsAbout21MsPlusTails) {
  const DecodeStepLimit bare = PhysicalDecodeStepLimit(kGemm7bB1024Seconds, Llama7b(1024, 2048, 0));
  EXPECT_NEAR(bare.seconds() * 1e3, 21.0, 0.5);
  // Issue 15: "about 25 ms at P = 2K including the private tails of a 64-step run".
  const DecodeStepLimit l =
      PhysicalDecodeStepLimit(kGemm7bB1024Seconds, Llama7b(1024, 2048, kPrivateTokens64Steps));
  EXPECT_NEAR(l.private_s * 1e3, 4.33, 0.01);  // 1024 x 35.5 x 0.5 MiB at 4.4 TB/s
  EXPECT_NEAR(l.seconds() * 1e3, 25.0, 0.5);
}

TEST(PhysicalLimit, SevenBAt16kWithTheTailsOfA64StepRun) {
  // The same definition with the 64-step run's tails at P = 16K: 35.7 ms (28.7K tok/s), not 31;
  // gpu_decode_bench prints this one, since its rows carry those tails.
  const DecodeStepLimit l =
      PhysicalDecodeStepLimit(kGemm7bB1024Seconds, Llama7b(1024, 16384, kPrivateTokens64Steps));
  EXPECT_NEAR(l.seconds() * 1e3, 35.66, 0.01);
}

TEST(PhysicalLimit, SmallBatchesAreBoundByReadingThePrefixOnce) {
  // B = 1: the prefix's FLOPs take 1.5 us at the tensor rate, its KV (1 GiB) 0.24 ms.
  const DecodeStepShape s = Llama7b(1, 2048, 0);
  const DecodeStepLimit l = PhysicalDecodeStepLimit(0, s);
  EXPECT_DOUBLE_EQ(l.shared_s, SharedKvBytes(s) / kCopyBytesPerSecond);
  EXPECT_GT(l.shared_s, SharedAttentionFlops(s) / kTensorFlopsPerSecond);
}

TEST(PhysicalLimit, RatesCanBeReplacedByMeasuredOnes) {
  const Rates measured{.copy_bytes_per_s = 4.2e12, .tensor_flops_per_s = 764e12};
  const DecodeStepLimit l =
      PhysicalDecodeStepLimit(kGemm7bB1024Seconds, Llama7b(1024, 16384, 0), measured);
  EXPECT_NEAR(l.shared_s * 1e3, 11.51, 0.01);
}

TEST(PhysicalLimit, ProjectionGemmFlopsMatchPerformanceMdRate) {
  // PERFORMANCE.md: the 7B GEMM-only step at B = 1024 is 19.6 ms at 691 TFLOP/s.
  const double flops = ProjectionGemmFlops(1024, 32, 4096, 32, 32, 128, 11008, 32000);
  EXPECT_NEAR(flops / kGemm7bB1024Seconds / 1e12, 691, 2);
  // Llama-3-8B (GQA 8, ffn 14336, vocab 128256): 7.50e9 weights in the GEMMs.
  EXPECT_NEAR(ProjectionGemmFlops(1, 32, 4096, 32, 8, 128, 14336, 128256) / 2, 7.50e9, 0.01e9);
}

TEST(PhysicalLimit, AttentionFloorIsTheLargerTerm) {
  EXPECT_DOUBLE_EQ(AttentionFloorSeconds(4.4e12, 0), 1.0);
  EXPECT_DOUBLE_EQ(AttentionFloorSeconds(0, 750e12), 1.0);
  EXPECT_DOUBLE_EQ(AttentionFloorSeconds(4.4e12, 1500e12), 2.0);
}

}  // namespace
}  // namespace banyan::bench
