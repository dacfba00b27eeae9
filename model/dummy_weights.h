// Synthetic ("dummy") weights for benchmarks and tests, for any LLaMA shape.
//
// Values are deterministic in (config, seed) and independent of the host's thread count:
// each tensor, and each 1M-element chunk of it, draws from its own splitmix64 stream. Element
// e of the tensor with index k in ListTensorSlots(cfg) is counter-based, so a device-side
// generator can reproduce it: with s0 = Mix(Mix(seed, k + 1), e / 2^20 + 1) and
// r = SplitMix64 output for state s0 + (e % 2^20 + 1) * 0x9e3779b97f4a7c15, value =
// offset + scale * (sum of r's four 16-bit fields + 2 - 2^17) * sqrt(3) / 2^16
// (see dummy_weights.cc for Mix).
// Distribution: matrices ~ N(0, 1 / in_features) (so every projection roughly preserves the
// activation scale, and logits come out O(1)), norm weights ~ 1 + N(0, 0.05^2). "Normal" is the
// Irwin-Hall sum of four uniforms, rescaled to unit variance: cheap, bounded by +-3.46 sigma.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/model.h"

namespace banyan::model {

// Shapes by name: "llama-2-7b-shape", "llama-2-13b-shape", "llama-3-8b-shape",
// "llama-3-70b-shape" (real model sizes; 70B: dim 8192, 80 layers, 64 query / 8 KV heads, MLP
// 28672, with Llama 3 8B's vocabulary, RoPE theta, eps, BOS and EOS) and small test shapes "tiny-d64-gqa4" (dim 64, 8 heads, 2 kv heads, 2 layers),
// "tiny-d128-mha" (dim 128, 4 heads of 32), "tiny-d256-hd128" (dim 256, 2 heads of 128, 1 kv
// head), "small-d512-gqa" (dim 512, 8 heads of 64, 2 kv heads, 4 layers, vocab 32000).
// rope_style kHalf, untied. NotFound lists the known names.
absl::StatusOr<ModelConfig> NamedShapeConfig(absl::string_view name);

// The names NamedShapeConfig accepts.
std::vector<std::string> NamedShapes();

// Allocates and fills every tensor of `cfg` (which must pass ValidateConfig; aborts otherwise).
// source is "dummy:<seed>". Uses all hardware threads. With kFp8 the seven projections are
// generated one at a time and kept only as QuantizeFp8PerChannel of the same values (the values
// are those of kNone, then quantized), so the host never holds the fp32 projections at once.
ModelWeights MakeDummyWeights(const ModelConfig& cfg, uint64_t seed,
                              WeightQuantization quant = WeightQuantization::kNone);

}  // namespace banyan::model
