#include "model/quantized.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/weights_layout.h"

namespace banyan::model {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::string_view Fp8ScaleKindName(Fp8ScaleKind kind) {
  switch (kind) {
    case Fp8ScaleKind::kPerTensor:
      return "per-tensor";
    case Fp8ScaleKind::kPerChannel:
      return "per-channel";
    case Fp8ScaleKind::kBlock128:
      return "128x128-block";
  }
  return "?";
}

std::vector<int64_t> Fp8ScaleShape(Fp8ScaleKind kind, int64_t out, int64_t in) {
  switch (kind) {
    case Fp8ScaleKind::kPerTensor:
      return {1};
    case Fp8ScaleKind::kPerChannel:
      return {out};
    case Fp8ScaleKind::kBlock128:
      return {CeilDiv(out, kFp8BlockSize), CeilDiv(in, kFp8BlockSize)};
  }
  return {};
}

absl::Status CheckQuantized(const QuantizedTensor& q, const std::string& what) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parts...));
  };
  if (q.shape.size() != 2 || q.shape[0] < 1 || q.shape[1] < 1) {
    return bad("an FP8 weight must be a non-empty matrix, got shape ", ShapeString(q.shape));
  }
  if (q.codes.size() != static_cast<size_t>(q.shape[0] * q.shape[1])) {
    return bad(q.codes.size(), " FP8 values for shape ", ShapeString(q.shape));
  }
  int64_t n_scales = 1;
  for (int64_t s : Fp8ScaleShape(q.scale_kind, q.shape[0], q.shape[1])) n_scales *= s;
  if (q.scales.size() != static_cast<size_t>(n_scales)) {
    return bad(q.scales.size(), " ", Fp8ScaleKindName(q.scale_kind), " scales, expected ",
               n_scales);
  }
  for (size_t i = 0; i < q.scales.size(); ++i) {
    if (!(std::isfinite(q.scales[i]) && q.scales[i] > 0)) {
      return bad("scale ", i, " is ", q.scales[i], " (scales must be finite and positive)");
    }
  }
  for (size_t i = 0; i < q.codes.size(); ++i) {
    if (IsFp8E4M3Nan(q.codes[i])) {
      return bad("FP8 value ", i, " (row ", i / q.shape[1], ") is NaN");
    }
  }
  return absl::OkStatus();
}

void DequantizeRows(const QuantizedTensor& q, int64_t row_begin, int64_t row_end, float* out) {
  const int64_t in = q.cols();
  const int64_t blocks_per_row = CeilDiv(in, kFp8BlockSize);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const uint8_t* src = q.codes.data() + i * in;
    float* dst = out + (i - row_begin) * in;
    switch (q.scale_kind) {
      case Fp8ScaleKind::kPerTensor:
      case Fp8ScaleKind::kPerChannel: {
        const float s = q.scales[q.scale_kind == Fp8ScaleKind::kPerTensor ? 0 : i];
        for (int64_t j = 0; j < in; ++j) dst[j] = Fp8E4M3ToFloat(src[j]) * s;
        break;
      }
      case Fp8ScaleKind::kBlock128: {
        const float* s = q.scales.data() + (i / kFp8BlockSize) * blocks_per_row;
        for (int64_t j = 0; j < in; ++j) dst[j] = Fp8E4M3ToFloat(src[j]) * s[j / kFp8BlockSize];
        break;
      }
    }
  }
}

Tensor Dequantize(const QuantizedTensor& q) {
  Tensor t;
  t.shape = q.shape;
  t.data.resize(static_cast<size_t>(q.rows() * q.cols()));
  DequantizeRows(q, 0, q.rows(), t.data.data());
  return t;
}

absl::Status QuantizeFp8PerChannel(const Tensor& w, const std::string& what, QuantizedTensor* out) {
  if (w.shape.size() != 2 || w.data.size() != static_cast<size_t>(w.numel())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": only a matrix can be quantized to FP8, got ", ShapeString(w.shape)));
  }
  const int64_t rows = w.shape[0], cols = w.shape[1];
  QuantizedTensor q;
  q.shape = w.shape;
  q.scale_kind = Fp8ScaleKind::kPerChannel;
  q.codes.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = w.data.data() + i * cols;
    float amax = 0;
    for (int64_t j = 0; j < cols; ++j) {
      if (!std::isfinite(src[j])) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": weight [", i, ", ", j, "] is ", src[j], "; FP8 quantization needs finite weights"));
      }
      amax = std::max(amax, std::fabs(src[j]));
    }
    const float scale = amax > 0 ? amax / kFp8E4M3Max : 1.0f;
    // amax / 448 underflows to 0 only for amax below 448 * 2^-149: treat the row as zeros.
    const float s = scale > 0 ? scale : 1.0f;
    q.scales[static_cast<size_t>(i)] = s;
    uint8_t* dst = q.codes.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) dst[j] = FloatToFp8E4M3(src[j] / s);
  }
  *out = std::move(q);
  return absl::OkStatus();
}

absl::Status ParseWeightQuantization(absl::string_view name, WeightQuantization* out) {
  if (name == "none") {
    *out = WeightQuantization::kNone;
  } else if (name == "fp8") {
    *out = WeightQuantization::kFp8;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization: expected none|fp8, got '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status QuantizeWeightsFp8(ModelWeights* w) {
  if (HasQuantizedWeights(*w)) return absl::OkStatus();
  for (const TensorSlot& slot : ListTensorSlots(w->config)) {
    QuantizedTensor* q = SlotQuantized(*w, slot);
    if (q == nullptr) continue;
    Tensor& t = SlotTensor(*w, slot);
    if (absl::Status s = QuantizeFp8PerChannel(t, absl::StrCat(w->source, ": ", SlotName(slot)), q);
        !s.ok()) {
      return s;
    }
    t = Tensor{};  // releases the fp32 copy
  }
  return absl::OkStatus();
}

}  // namespace banyan::model
