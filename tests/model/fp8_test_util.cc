#include "tests/model/fp8_test_util.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "model/dummy_weights.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"

namespace banyan::model::testing {

double Fp8E4M3Definition(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? mant * std::pow(2.0, -9)
                              : (1.0 + mant / 8.0) * std::pow(2.0, exp - 7);
  return sign ? -mag : mag;
}

uint8_t NearestFp8E4M3(double x) {
  int best = -1;
  double best_dist = 0;
  for (int c = 0; c < 256; ++c) {
    const double v = Fp8E4M3Definition(static_cast<uint8_t>(c));
    if (std::isnan(v) || (c == 0x80)) continue;  // -0: reached below through the sign
    const double dist = std::fabs(v - x);
    if (best < 0 || dist < best_dist || (dist == best_dist && (c & 1) == 0)) {
      best = c;
      best_dist = dist;
    }
  }
  uint8_t code = static_cast<uint8_t>(best);
  if (code == 0 && std::signbit(x)) code = 0x80;
  return code;
}

namespace {

// A random value with 8 significant bits (exact in BF16), within [lo, 2 lo).
float Bf16Exact(double lo, std::mt19937_64& rng) {
  const double v = lo * (1.0 + static_cast<double>(rng() % 128) / 128.0);
  uint32_t bits;
  const float f = static_cast<float>(v);
  std::memcpy(&bits, &f, 4);
  bits &= 0xffff0000u;  // truncate to BF16: still in [lo / (1 + 2^-7), 2 lo)
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// A random finite code of magnitude below 4 (exponent field 0..8).
uint8_t RandomCode(std::mt19937_64& rng) {
  const uint64_t r = rng();
  return static_cast<uint8_t>(((r & 1) << 7) | (((r >> 1) % 9) << 3) | ((r >> 5) & 7));
}

}  // namespace

std::string Bf16Bytes(const std::vector<float>& v) {
  std::string out;
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t h = static_cast<uint16_t>(bits >> 16);
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

Fp8Checkpoint MakeFp8Checkpoint(const ModelConfig& c, Fp8Layout layout, bool bf16_scales,
                                std::mt19937_64& rng) {
  Fp8Checkpoint ck;
  ck.reference = MakeDummyWeights(c, rng() | 1);
  ck.config = nlohmann::ordered_json::parse(HfConfigJson(c));
  if (layout == Fp8Layout::kFineGrained) {
    ck.config["quantization_config"] = {{"quant_method", "fp8"},
                                        {"activation_scheme", "dynamic"},
                                        {"fmt", "e4m3"},
                                        {"weight_block_size", {128, 128}}};
  } else {
    ck.config["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"quantization_status", "compressed"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 8},
              {"type", "float"},
              {"strategy", layout == Fp8Layout::kCtPerTensor ? "tensor" : "channel"},
              {"symmetric", true},
              {"dynamic", false}}},
            {"input_activations",
             {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
        {"ignore", {"lm_head"}}};
  }
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    Tensor& ref = SlotTensor(ck.reference, slot);
    const std::string name = HfTensorName(slot);
    if (!IsProjection(slot.kind)) {
      ck.entries.push_back({name, "F32", ref.shape, FloatBytes(ref.data)});
      continue;
    }
    const int64_t out = slot.shape[0], in = slot.shape[1];
    const double base = 0.5 / std::sqrt(static_cast<double>(in));
    std::vector<int64_t> scale_shape;
    int64_t blocks_per_row = 1;
    switch (layout) {
      case Fp8Layout::kCtPerTensor:
        scale_shape = {1};
        break;
      case Fp8Layout::kCtPerChannel:
        scale_shape = {out, 1};
        break;
      case Fp8Layout::kFineGrained:
        blocks_per_row = (in + 127) / 128;
        scale_shape = {(out + 127) / 128, blocks_per_row};
        break;
    }
    int64_t n_scales = 1;
    for (int64_t s : scale_shape) n_scales *= s;
    std::vector<float> scales(static_cast<size_t>(n_scales));
    for (float& s : scales) s = Bf16Exact(base, rng);
    std::string codes(static_cast<size_t>(out * in), '\0');
    for (int64_t i = 0; i < out; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        const uint8_t code = RandomCode(rng);
        codes[static_cast<size_t>(i * in + j)] = static_cast<char>(code);
        const double scale = layout == Fp8Layout::kCtPerTensor    ? scales[0]
                             : layout == Fp8Layout::kCtPerChannel ? scales[i]
                                : scales[(i / 128) * blocks_per_row + j / 128];
        ref.data[static_cast<size_t>(i * in + j)] =
            static_cast<float>(Fp8E4M3Definition(code) * scale);
      }
    }
    const std::string scale_name =
        name + (layout == Fp8Layout::kFineGrained ? "_scale_inv" : "_scale");
    ck.entries.push_back({name, "F8_E4M3", slot.shape, codes});
    ck.entries.push_back({scale_name, bf16_scales ? "BF16" : "F32", scale_shape,
                          bf16_scales ? Bf16Bytes(scales) : FloatBytes(scales)});
  }
  return ck;
}

void WriteCheckpoint(const std::string& dir, const nlohmann::ordered_json& config,
                     const std::vector<RawEntry>& entries) {
  {
    std::ofstream out(dir + "/config.json", std::ios::trunc);
    out << config.dump(2);
  }
  WriteBytes(dir + "/model.safetensors", SafetensorsBytes(entries));
}

RawEntry& EntryNamed(std::vector<RawEntry>& entries, const std::string& name) {
  for (RawEntry& e : entries) {
    if (e.name == name) return e;
  }
  ADD_FAILURE() << "no entry " << name;
  std::abort();
}

}  // namespace banyan::model::testing
