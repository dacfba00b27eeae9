// FP8 weights kept as FP8: one byte per weight plus a few fp32 scales, never widened to fp32
// on the host unless a backend asks (the CPU backend does, at load; see Dequantize).
//
// A QuantizedTensor is a 2-D projection matrix [out, in] (row-major, like Tensor) of E4M3 codes
// (model/dtype.h) and its scales. The one definition of its value:
//
//   weight[i][j] = Fp8E4M3ToFloat(codes[i * in + j]) * scale(i, j), rounded once to fp32
//
// with scale(i, j) by kind:
//   kPerTensor   scales[0]                                          (scales: [1])
//   kPerChannel  scales[i]                                          (scales: [out])
//   kBlock128    scales[(i / 128) * ceil(in / 128) + j / 128]       (scales: [ceil(out / 128),
//                                                                     ceil(in / 128)], row-major)
// The product of a 4-bit significand and an fp32 scale has at most 28 significant bits, so the
// fp32 result is the exact product rounded to nearest even.
//
// Invariants (CheckQuantized): codes.size() == out * in, scales.size() matches the kind, every
// scale finite and > 0, no code is NaN.
//
// Where the formats come from: compressed-tensors' weight_scale (per tensor or per output
// channel) and Hugging Face's fine-grained FP8 weight_scale_inv (128 x 128 blocks) both multiply
// the FP8 value; the loaders (model/fp8_checkpoint.h) read them into this one form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace banyan::model {

struct Tensor;  // model/model.h
struct ModelWeights;

enum class Fp8ScaleKind { kPerTensor, kPerChannel, kBlock128 };
constexpr int64_t kFp8BlockSize = 128;

// "per-tensor", "per-channel", "128x128-block".
absl::string_view Fp8ScaleKindName(Fp8ScaleKind kind);

struct QuantizedTensor {
  std::vector<int64_t> shape;  // [out, in]; empty: no quantized form
  std::vector<uint8_t> codes;  // E4M3, row-major [out, in]
  Fp8ScaleKind scale_kind = Fp8ScaleKind::kPerChannel;
  std::vector<float> scales;   // see the header comment for the layout per kind

  bool empty() const { return shape.empty(); }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 0 : shape[1]; }
  // Host bytes this form takes (codes and scales).
  int64_t bytes() const {
    return static_cast<int64_t>(codes.size() + scales.size() * sizeof(float));
  }
};

// The scale shape a kind implies for a [out, in] matrix: {1}, {out} or {ceil(out/128), ceil(in/128)}.
std::vector<int64_t> Fp8ScaleShape(Fp8ScaleKind kind, int64_t out, int64_t in);

// The invariants above; InvalidArgument naming `what` (e.g. the tensor) otherwise.
absl::Status CheckQuantized(const QuantizedTensor& q, const std::string& what);

// Rows [row_begin, row_end) of the value, into out[(row_end - row_begin) * in]. Requires a
// tensor that passed CheckQuantized.
void DequantizeRows(const QuantizedTensor& q, int64_t row_begin, int64_t row_end, float* out);

// The whole value as a dense fp32 Tensor.
Tensor Dequantize(const QuantizedTensor& q);

// --quantization fp8 (vLLM's name): a dense [out, in] matrix to E4M3 with one scale per output
// row (kPerChannel). The rule, per row i:
//   amax = max_j |w[i][j]|;  scale = fp32(amax / 448), or 1 where that is 0 (a row of zeros, or
//   of values so small they encode as zeros);  codes[i][j] = FloatToFp8E4M3(fp32(w[i][j] / scale))
// (round to nearest even; a quotient just above 448 from the division's rounding saturates).
// InvalidArgument naming `what` for a weight that is not finite or a tensor that is not 2-D.
absl::Status QuantizeFp8PerChannel(const Tensor& w, const std::string& what, QuantizedTensor* out);

// What --quantization asks of a loaded model.
enum class WeightQuantization { kNone, kFp8 };

// "none" / "fp8"; InvalidArgument listing them otherwise.
absl::Status ParseWeightQuantization(absl::string_view name, WeightQuantization* out);

// --quantization fp8 on a loaded model: every dense projection (wq, wk, wv, wo, gate, down, up;
// never the embeddings, the norms or the LM head, as vLLM does) replaced by its
// QuantizeFp8PerChannel form, one tensor at a time, each fp32 copy freed as soon as it is
// quantized. A model that already holds FP8 projections (an FP8 checkpoint) is left as it is:
// its unquantized projections are the ones its checkpoint chose to keep.
absl::Status QuantizeWeightsFp8(ModelWeights* w);

}  // namespace banyan::model
