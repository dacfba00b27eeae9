// Which models keep their projections FP8 on the GPU (cuda::Fp8PlanFor) and what the device
// weights then take (DeviceWeights::Bytes): host-only, no device needed.
#include <random>

#include "engine/cuda/device_weights.h"
#include "gtest/gtest.h"
#include "model/dummy_weights.h"
#include "model/quantized.h"
#include "model/weights_layout.h"
#include "tests/engine/cuda/small_model.h"

namespace banyan::engine::cuda {
namespace {

model::ModelConfig Config() {
  model::ModelConfig c = testing::SmallModelConfig(128, 4, 2);  // dim 512, MLP 1536
  c.rope_style = model::RopeStyle::kHalf;
  return c;
}

model::ModelWeights Quantized(const model::ModelConfig& c) {
  model::ModelWeights w = model::MakeDummyWeights(c, 7);
  EXPECT_TRUE(model::QuantizeWeightsFp8(&w).ok());
  return w;
}

// Turns every projection's scales into 128 x 128 blocks (values irrelevant to the plan).
void AsBlocks(model::ModelWeights* w) {
  for (const model::TensorSlot& slot : model::ListTensorSlots(w->config)) {
    model::QuantizedTensor* q = model::SlotQuantized(*w, slot);
    if (q == nullptr || q->empty()) continue;
    q->scale_kind = model::Fp8ScaleKind::kBlock128;
    q->scales.assign((q->rows() + 127) / 128 * ((q->cols() + 127) / 128), 1.0f);
  }
}

TEST(Fp8Plan, UnquantizedModelsHaveNoPlanAndNoReason) {
  const Fp8Plan p = Fp8PlanFor(model::MakeDummyWeights(Config(), 7));
  EXPECT_FALSE(p.scaling.has_value());
  EXPECT_TRUE(p.reason.empty());
}

TEST(Fp8Plan, PerChannelProjectionsRunPerRowAndBlocksAsBlocks) {
  model::ModelWeights w = Quantized(Config());
  EXPECT_EQ(Fp8PlanFor(w).scaling, Fp8Scaling::kPerRow);
  AsBlocks(&w);
  EXPECT_EQ(Fp8PlanFor(w).scaling, Fp8Scaling::kBlock128);
  EXPECT_EQ(Fp8PlanForShape(Config()).scaling, Fp8Scaling::kPerRow);
}

TEST(Fp8Plan, ModelsTheFp8PathCannotTakeSayWhy) {
  {
    // One projection left dense (a checkpoint's ignore list): all or none.
    model::ModelWeights w = model::MakeDummyWeights(Config(), 7);
    ASSERT_TRUE(model::QuantizeWeightsFp8(&w).ok());
    for (const model::TensorSlot& slot : model::ListTensorSlots(w.config)) {
      if (slot.kind == model::WeightKind::kDown && slot.layer == 1) {
        model::QuantizedTensor* q = model::SlotQuantized(w, slot);
        model::SlotTensor(w, slot) = model::Dequantize(*q);
        *q = model::QuantizedTensor{};
      }
    }
    const Fp8Plan p = Fp8PlanFor(w);
    EXPECT_FALSE(p.scaling.has_value());
    EXPECT_NE(p.reason.find("layers.1"), std::string::npos) << p.reason;
  }
  {
    // Mixed scale kinds.
    model::ModelWeights w = Quantized(Config());
    AsBlocks(&w);
    model::QuantizedTensor* q = nullptr;
    for (const model::TensorSlot& slot : model::ListTensorSlots(w.config)) {
      if (slot.kind == model::WeightKind::kWk) q = model::SlotQuantized(w, slot);
    }
    ASSERT_NE(q, nullptr);
    q->scale_kind = model::Fp8ScaleKind::kPerChannel;
    q->scales.assign(q->rows(), 1.0f);
    const Fp8Plan p = Fp8PlanFor(w);
    EXPECT_FALSE(p.scaling.has_value());
    EXPECT_NE(p.reason.find("mix"), std::string::npos) << p.reason;
  }
  {
    // Blocks whose fused parts do not start on 128-row boundaries (2 KV heads of 96).
    model::ModelConfig c = testing::SmallModelConfig(96, 4, 2);
    c.hidden_dim = 1536;
    model::ModelWeights w = Quantized(c);
    EXPECT_EQ(Fp8PlanFor(w).scaling, Fp8Scaling::kPerRow);
    AsBlocks(&w);
    const Fp8Plan p = Fp8PlanFor(w);
    EXPECT_FALSE(p.scaling.has_value());
    EXPECT_NE(p.reason.find("128-row"), std::string::npos) << p.reason;
  }
  {
    // A width the FP8 tensor cores cannot take (head_dim 8, dim 40: K not a multiple of 16).
    model::ModelConfig c = testing::SmallModelConfig(8, 5, 5);
    const Fp8Plan p = Fp8PlanFor(Quantized(c));
    EXPECT_FALSE(p.scaling.has_value());
    EXPECT_NE(p.reason.find("multiple of 16"), std::string::npos) << p.reason;
    EXPECT_FALSE(Fp8PlanForShape(c).scaling.has_value());
  }
}

TEST(Fp8Plan, FourProjectionsTakeOneByteAWeightPlusTheirScales) {
  const model::ModelConfig c = Config();
  const int64_t d = c.head_dim();
  const int64_t proj = c.n_layers * ((int64_t{c.n_heads} + 2 * c.n_kv_heads) * d * c.dim +
                                     int64_t{c.n_heads} * d * c.dim +
                                     3 * int64_t{c.hidden_dim} * c.dim);
  const int64_t bf16 = DeviceWeights::Bytes(c, kernels::cuda::DType::kBf16);
  const int64_t fp8 = DeviceWeights::Bytes(c, kernels::cuda::DType::kBf16, Fp8Scaling::kPerRow);
  // Half the projection bytes saved, less the scales (one float per row) and alignment.
  EXPECT_LT(fp8, bf16 - proj + proj / 50);
  EXPECT_GT(fp8, bf16 - proj);
}

}  // namespace
}  // namespace banyan::engine::cuda
