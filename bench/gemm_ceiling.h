// The projection-only GEMM time of one decode step, measured on the device: the term of the
// physical limit (bench/physical_limit.h) that PERFORMANCE.md section 2 gives as "the projection,
// MLP and LM-head GEMMs alone, bf16 through cuBLAS with CUDA graphs, one decode step".
//
// The GEMMs are the ones the CUDA backend runs for a decode step of `batch` rows (fused QKV,
// O, fused gate+up, down, per layer; then the LM head), each layer with its own weights so that
// every step streams all of them from HBM as a real step does, with bf16 inputs and outputs and
// fp32 accumulation (the backend writes fp32 outputs; bf16 is how the ceiling was measured).
// Nothing else runs: no norms, RoPE, attention or sampling. The step is captured once in a CUDA
// graph and replayed; the result is the median replay. Weights are random bf16, not the model's.
// It allocates the shape's weights (about 13 GiB for a 7B shape) and frees them before it
// returns, so call it while nothing else large is allocated.
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"

namespace banyan::bench {

// Median seconds of one GEMM-only decode step of `batch` rows of the shape `cfg`, over `reps`
// graph replays (after three warm-up replays). `fp8`: the four projections of each layer as the
// backend runs FP8 weights (engine/cuda/fp8_gemm.h, cuBLASLt, per-channel
// weight and per-token activation scales, bf16 out; the activations' quantization not included),
// the LM head in bf16 as before: the FP8 step's GEMM ceiling. `fp8_gemv_rows`: Fp8Gemm::Create's
// (products of at most that many rows through kernels/cuda/fp8_gemv.h; 0: all through cuBLASLt).
// `lm_head_rows`: the rows of the LM head's GEMM (-1: `batch`, as in a decode step; a prefill
// step computes logits only for the prompts whose last token it holds; 0: none), at most `batch`.
absl::StatusOr<double> MeasureProjectionGemmSeconds(const model::ModelConfig& cfg, int batch,
                                                    int reps = 20, bool fp8 = false,
                                                    int fp8_gemv_rows = 0,
                                                    int lm_head_rows = -1);

// The dense bf16 tensor-core rate of this GPU as cuBLAS reaches it: the median of `reps` square
// GEMMs of side `n` (bf16 in and out, fp32 accumulation), in FLOP/s. The ceiling of work that
// runs at the matrix units' rate without streaming weights, such as prefill attention's products.
absl::StatusOr<double> MeasureDenseGemmFlops(int n = 8192, int reps = 20);

}  // namespace banyan::bench
