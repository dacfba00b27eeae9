// FP8 checkpoints (model/fp8_checkpoint.h): both layouts load into QuantizedTensor with the
// bytes and scales written, and every refusal names the field or the tensor.
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/dtype.h"
#include "model/model_io.h"
#include "model/quantized.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "tests/model/fp8_test_util.h"
#include "tests/testing/random.h"

namespace banyan::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::EntryNamed;
using testing::Fp8Checkpoint;
using testing::Fp8Layout;
using testing::MakeFp8Checkpoint;

const std::string kQ0 = "model.layers.0.self_attn.q_proj.weight";
const std::string kDown1 = "model.layers.1.mlp.down_proj.weight";

// dim 160 and MLP 288: projections of 2 x 2 and 3 x 2 blocks of 128, the last ones partial.
ModelConfig Fp8Config() {
  ModelConfig c = testing::SmallArchConfig("llama");
  c.dim = 160;
  c.n_heads = 5;
  c.n_kv_heads = 1;
  c.hidden_dim = 288;
  return c;
}

TEST(Fp8Load, BothLayoutsLoadTheBytesAndScalesWritten) {
  BANYAN_SEEDED_RNG(rng);
  for (Fp8Layout layout : {Fp8Layout::kCtPerTensor, Fp8Layout::kCtPerChannel, Fp8Layout::kFineGrained}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "layout " << static_cast<int>(layout) << " bf16 " << bf16);
      Fp8Checkpoint ck = MakeFp8Checkpoint(Fp8Config(), layout, bf16, rng);
      testing::TempDir dir;
      testing::WriteCheckpoint(dir.path(), ck.config, ck.entries);
      auto w = LoadModel(dir.path());
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_TRUE(HasQuantizedWeights(*w));
      for (const TensorSlot& slot : ListTensorSlots(w->config)) {
        SCOPED_TRACE(SlotName(slot));
        const Tensor& want = SlotTensor(ck.reference, slot);
        if (!IsProjection(slot.kind)) {
          EXPECT_EQ(SlotTensor(*w, slot).data, want.data);
          continue;
        }
        const QuantizedTensor& q = *SlotQuantized(*w, slot);
        EXPECT_TRUE(SlotTensor(*w, slot).data.empty());
        EXPECT_EQ(q.scale_kind, layout == Fp8Layout::kCtPerTensor    ? Fp8ScaleKind::kPerTensor
                                : layout == Fp8Layout::kCtPerChannel ? Fp8ScaleKind::kPerChannel
                                                                     : Fp8ScaleKind::kBlock128);
        const std::string name = HfTensorName(slot);
        EXPECT_EQ(std::string(q.codes.begin(), q.codes.end()), EntryNamed(ck.entries, name).bytes);
        // Dequantize gives the definition's values, bit for bit.
        EXPECT_EQ(Dequantize(q).data, want.data);
      }
    }
  }
}

TEST(Fp8Load, IgnoredModulesStayDenseAndScalarScalesLoad) {
  BANYAN_SEEDED_RNG(rng);
  Fp8Checkpoint ck = MakeFp8Checkpoint(Fp8Config(), Fp8Layout::kCtPerTensor, false, rng);
  // down_proj of every layer unquantized through a regex, q_proj of layer 0 by name.
  ck.config["quantization_config"]["ignore"] = {"lm_head", "re:.*mlp\\.down_proj$",
                                                "model.layers.0.self_attn.q_proj"};
  std::vector<testing::RawEntry> entries;
  for (testing::RawEntry& e : ck.entries) {
    if (e.name.find("down_proj.weight_scale") != std::string::npos ||
        e.name == kQ0 + "_scale") {
      continue;
    }
    if (e.name.find("down_proj.weight") != std::string::npos || e.name == kQ0) {
      for (const TensorSlot& slot : ListTensorSlots(ck.reference.config)) {
        if (HfTensorName(slot) == e.name) {
          entries.push_back({e.name, "F32", e.shape, testing::FloatBytes(SlotTensor(ck.reference, slot).data)});
        }
      }
      continue;
    }
    if (e.name.ends_with("_scale")) e.shape = {};  // a scalar per-tensor scale
    entries.push_back(e);
  }
  testing::TempDir dir;
  // The format named per group, as compressed-tensors writes it for mixed-precision models.
  ck.config["quantization_config"]["format"] = "mixed-precision";
  ck.config["quantization_config"]["config_groups"]["group_0"]["format"] = "naive-quantized";
  testing::WriteCheckpoint(dir.path(), ck.config, entries);
  auto w = LoadModel(dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->layers[0].fp8.wq.empty());
  EXPECT_EQ(w->layers[0].wq.data, ck.reference.layers[0].wq.data);
  EXPECT_TRUE(w->layers[1].fp8.w_down.empty());
  EXPECT_EQ(w->layers[1].w_down.data, ck.reference.layers[1].w_down.data);
  EXPECT_FALSE(w->layers[1].fp8.wq.empty());
  EXPECT_EQ(Dequantize(w->layers[1].fp8.wq).data, ck.reference.layers[1].wq.data);
}

// A sharded FP8 checkpoint: each weight's scale found through the index, in whichever shard
// holds it (here every scale in the shard after its weight's).
TEST(Fp8Load, ScalesAreFoundInOtherShards) {
  BANYAN_SEEDED_RNG(rng);
  Fp8Checkpoint ck = MakeFp8Checkpoint(Fp8Config(), Fp8Layout::kFineGrained, false, rng);
  testing::TempDir dir;
  std::vector<testing::RawEntry> shard[2];
  nlohmann::json index;
  for (const testing::RawEntry& e : ck.entries) {
    const int k = e.name.ends_with("_scale_inv") ? 1 : 0;
    shard[k].push_back(e);
    index["weight_map"][e.name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
  }
  for (int k = 0; k < 2; ++k) {
    testing::WriteBytes(dir.File("model-0000" + std::to_string(k + 1) + "-of-00002.safetensors"),
                        testing::SafetensorsBytes(shard[k]));
  }
  testing::WriteBytes(dir.File("model.safetensors.index.json"), index.dump());
  {
    std::ofstream out(dir.File("config.json"));
    out << ck.config.dump();
  }
  auto w = LoadModel(dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(Dequantize(w->layers[1].fp8.w_down).data, ck.reference.layers[1].w_down.data);
  // A scale the index does not list is missing, named.
  index["weight_map"].erase(kQ0 + "_scale_inv");
  testing::WriteBytes(dir.File("model.safetensors.index.json"), index.dump());
  w = LoadModel(dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("missing tensor " + kQ0 + "_scale_inv (not in the index's weight_map)"));
}

// WriteHfFolder writes FP8 weights as they are held: loading the written folder gives the same
// codes, scales and dense tensors, for each layout, with unquantized projections listed as such,
// and for --quantization fp8's result.
TEST(Fp8Load, WriterRoundTripsFp8Weights) {
  BANYAN_SEEDED_RNG(rng);
  std::vector<ModelWeights> models;
  for (Fp8Layout layout : {Fp8Layout::kCtPerTensor, Fp8Layout::kCtPerChannel, Fp8Layout::kFineGrained}) {
    Fp8Checkpoint ck = MakeFp8Checkpoint(Fp8Config(), layout, true, rng);
    testing::TempDir dir;
    testing::WriteCheckpoint(dir.path(), ck.config, ck.entries);
    auto w = LoadModel(dir.path());
    ASSERT_TRUE(w.ok()) << w.status();
    models.push_back(*std::move(w));
  }
  // One projection kept in fp32 (an ignored module).
  models[1].layers[1].wv = Dequantize(models[1].layers[1].fp8.wv);
  models[1].layers[1].fp8.wv = QuantizedTensor{};
  models.push_back(testing::MakeFp8Checkpoint(Fp8Config(), Fp8Layout::kCtPerTensor, false, rng).reference);
  ASSERT_TRUE(QuantizeWeightsFp8(&models.back()).ok());
  for (const ModelWeights& w : models) {
    SCOPED_TRACE(w.source);
    testing::TempDir out;
    ASSERT_TRUE(WriteHfFolder(w, out.path(), WeightDtype::kBF16).ok());
    auto back = LoadModel(out.path());
    ASSERT_TRUE(back.ok()) << back.status();
    for (const TensorSlot& slot : ListTensorSlots(w.config)) {
      SCOPED_TRACE(SlotName(slot));
      if (const QuantizedTensor* q = SlotQuantized(w, slot); q != nullptr && !q->empty()) {
        const QuantizedTensor& got = *SlotQuantized(*back, slot);
        EXPECT_EQ(got.scale_kind, q->scale_kind);
        EXPECT_EQ(got.codes, q->codes);
        EXPECT_EQ(got.scales, q->scales);
      } else {
        // Dense tensors went out as BF16: equal after the same narrowing.
        const Tensor& t = SlotTensor(w, slot);
        ASSERT_EQ(SlotTensor(*back, slot).data.size(), t.data.size());
        for (size_t i = 0; i < t.data.size(); ++i) {
          ASSERT_EQ(SlotTensor(*back, slot).data[i], Bf16ToFloat(FloatToBf16(t.data[i]))) << i;
        }
      }
    }
  }
}

// One broken checkpoint per case: the mutation, and what the error must say.
struct BadCase {
  const char* what;
  Fp8Layout layout;
  std::function<void(Fp8Checkpoint&)> mutate;
  std::vector<std::string> says;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

void SetScale(Fp8Checkpoint& ck, const std::string& name, float v) {
  testing::RawEntry& e = EntryNamed(ck.entries, name);
  ASSERT_EQ(e.dtype, "F32");
  std::memcpy(e.bytes.data(), &v, 4);
}

TEST(Fp8Load, RefusalsNameTheFieldOrTheTensor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto qc = [](Fp8Checkpoint& ck) -> nlohmann::ordered_json& { return ck.config["quantization_config"]; };
  auto group = [&](Fp8Checkpoint& ck) -> nlohmann::ordered_json& {
    return qc(ck)["config_groups"]["group_0"];
  };
  const auto unimpl = absl::StatusCode::kUnimplemented;
  const Fp8Layout ct = Fp8Layout::kCtPerChannel, fg = Fp8Layout::kFineGrained;
  const std::vector<BadCase> cases = {
      {"gptq", ct, [&](Fp8Checkpoint& ck) { qc(ck) = {{"quant_method", "gptq"}, {"bits", 4}}; },
       {"quantization_config.quant_method \"gptq\"", "not supported"}, unimpl},
      {"awq", ct, [&](Fp8Checkpoint& ck) { qc(ck) = {{"quant_method", "awq"}}; },
       {"quant_method \"awq\""}, unimpl},
      {"bitsandbytes", ct, [&](Fp8Checkpoint& ck) { qc(ck) = {{"quant_method", "bitsandbytes"}}; },
       {"quant_method \"bitsandbytes\""}, unimpl},
      {"num_bits", ct, [&](Fp8Checkpoint& ck) { group(ck)["weights"]["num_bits"] = 4; },
       {"config_groups.group_0.weights.num_bits = 4"}, unimpl},
      {"int", ct, [&](Fp8Checkpoint& ck) { group(ck)["weights"]["type"] = "int"; },
       {"config_groups.group_0.weights.type = \"int\""}, unimpl},
      {"group strategy", ct, [&](Fp8Checkpoint& ck) { group(ck)["weights"]["strategy"] = "group"; },
       {"weights.strategy = \"group\""}, unimpl},
      {"block strategy", ct, [&](Fp8Checkpoint& ck) { group(ck)["weights"]["strategy"] = "block"; },
       {"weights.strategy = \"block\""}, unimpl},
      {"static activations", ct,
       [&](Fp8Checkpoint& ck) { group(ck)["input_activations"]["dynamic"] = false; },
       {"input_activations.dynamic = false", "static activation scales"}, unimpl},
      {"int activations", ct,
       [&](Fp8Checkpoint& ck) { group(ck)["input_activations"]["type"] = "int"; },
       {"input_activations.type"}, unimpl},
      {"format", ct, [&](Fp8Checkpoint& ck) { qc(ck)["format"] = "pack-quantized"; },
       {"quantization_config.format = \"pack-quantized\""}, unimpl},
      {"group format", ct,
       [&](Fp8Checkpoint& ck) {
         qc(ck)["format"] = "mixed-precision";
         group(ck)["format"] = "int-quantized";
       },
       {"quantization_config.config_groups.group_0.format = \"int-quantized\""}, unimpl},
      {"mixed-precision without group formats", ct,
       [&](Fp8Checkpoint& ck) { qc(ck)["format"] = "mixed-precision"; },
       {"config_groups.group_0.format is missing"}},
      {"targets", ct, [&](Fp8Checkpoint& ck) { group(ck)["targets"] = {"re:.*q_proj"}; },
       {"group_0.targets"}, unimpl},
      {"kv cache", ct,
       [&](Fp8Checkpoint& ck) { qc(ck)["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}}; },
       {"kv_cache_scheme", "FP8 KV cache"}, unimpl},
      {"block size", fg, [&](Fp8Checkpoint& ck) { qc(ck)["weight_block_size"] = {64, 64}; },
       {"quantization_config.weight_block_size = [64,64]"}, unimpl},
      {"static scheme", fg, [&](Fp8Checkpoint& ck) { qc(ck)["activation_scheme"] = "static"; },
       {"activation_scheme = \"static\""}, unimpl},
      {"missing scale", ct,
       [&](Fp8Checkpoint& ck) {
         std::erase_if(ck.entries, [](const testing::RawEntry& e) { return e.name == kQ0 + "_scale"; });
       },
       {"missing tensor " + kQ0 + "_scale", "the scale of FP8 weight " + kQ0}},
      {"missing scale_inv", fg,
       [&](Fp8Checkpoint& ck) {
         std::erase_if(ck.entries, [](const testing::RawEntry& e) { return e.name == kDown1 + "_scale_inv"; });
       },
       {"missing tensor " + kDown1 + "_scale_inv"}},
      {"scale shape", ct, [&](Fp8Checkpoint& ck) { EntryNamed(ck.entries, kQ0 + "_scale").shape = {1, 160}; },
       {"scale tensor " + kQ0 + "_scale has shape [1, 160]", "[160, 1]"}},
      {"scale_inv shape", fg,
       [&](Fp8Checkpoint& ck) { EntryNamed(ck.entries, kDown1 + "_scale_inv").shape = {3, 2}; },
       {"scale tensor " + kDown1 + "_scale_inv has shape [3, 2]", "[2, 3]"}},
      {"scale dtype", ct,
       [&](Fp8Checkpoint& ck) {
         testing::RawEntry& e = EntryNamed(ck.entries, kQ0 + "_scale");
         e.dtype = "F16";
         e.bytes.resize(e.bytes.size() / 2);
       },
       {kQ0 + "_scale is F16; expected F32 or BF16"}},
      {"nan scale", ct, [&](Fp8Checkpoint& ck) { SetScale(ck, kQ0 + "_scale", nan); },
       {kQ0 + "_scale holds nan at index 0", "finite and positive"}},
      {"inf scale", fg, [&](Fp8Checkpoint& ck) { SetScale(ck, kDown1 + "_scale_inv", inf); },
       {kDown1 + "_scale_inv holds inf"}},
      {"zero scale", ct, [&](Fp8Checkpoint& ck) { SetScale(ck, kQ0 + "_scale", 0.0f); },
       {kQ0 + "_scale holds 0"}},
      {"negative scale", fg, [&](Fp8Checkpoint& ck) { SetScale(ck, kDown1 + "_scale_inv", -0.5f); },
       {kDown1 + "_scale_inv holds -0.5"}},
      {"e5m2 weight", ct, [&](Fp8Checkpoint& ck) { EntryNamed(ck.entries, kQ0).dtype = "F8_E5M2"; },
       {kQ0 + " is F8_E5M2", "must be F8_E4M3"}},
      {"bf16 weight where quantized", fg,
       [&](Fp8Checkpoint& ck) {
         testing::RawEntry& e = EntryNamed(ck.entries, kDown1);
         e.dtype = "BF16";
         e.bytes += e.bytes;
       },
       {kDown1 + " is BF16 but the quantization_config", "expected F8_E4M3",
        "modules_to_not_convert"}},
      {"no quantization_config", ct, [&](Fp8Checkpoint& ck) { ck.config.erase("quantization_config"); },
       {kQ0 + " is FP8 (F8_E4M3) but config.json has no quantization_config"}},
      {"fp8 in ignore", ct,
       [&](Fp8Checkpoint& ck) { qc(ck)["ignore"] = {"lm_head", "model.layers.0.self_attn.q_proj"}; },
       {kQ0 + " is FP8 (F8_E4M3) but its module is left unquantized", "(ignore)"}},
      {"fp8 in modules_to_not_convert", fg,
       [&](Fp8Checkpoint& ck) { qc(ck)["modules_to_not_convert"] = {"mlp.down_proj"}; },
       {"down_proj.weight is FP8 (F8_E4M3) but its module is left unquantized"}},
      {"input_scale", ct,
       [&](Fp8Checkpoint& ck) {
         ck.entries.push_back({"model.layers.0.self_attn.q_proj.input_scale", "F32", {1},
                               testing::FloatBytes({0.5f})});
       },
       {"model.layers.0.self_attn.q_proj.input_scale is a static activation scale"}, unimpl},
      {"kv scale", ct,
       [&](Fp8Checkpoint& ck) {
         ck.entries.push_back({"model.layers.0.self_attn.k_scale", "F32", {}, testing::FloatBytes({1.0f})});
       },
       {"k_scale is an FP8 KV-cache scale"}, unimpl},
      {"nan code", fg, [&](Fp8Checkpoint& ck) { EntryNamed(ck.entries, kDown1).bytes[200] = '\x7f'; },
       {kDown1 + ": FP8 value 200 (row 0) is NaN"}},
      {"fp8 lm_head", ct,
       [&](Fp8Checkpoint& ck) {
         testing::RawEntry& e = EntryNamed(ck.entries, "lm_head.weight");
         e.dtype = "F8_E4M3";
         e.bytes.resize(e.bytes.size() / 4);
       },
       {"lm_head.weight is FP8 (F8_E4M3) but only the projections of the blocks may be FP8"}},
  };
  BANYAN_SEEDED_RNG(rng);
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.what);
    Fp8Checkpoint ck = MakeFp8Checkpoint(Fp8Config(), bc.layout, false, rng);
    testing::TempDir dir;
    testing::WriteCheckpoint(dir.path(), ck.config, ck.entries);
    ASSERT_TRUE(LoadModel(dir.path()).ok()) << "the unbroken checkpoint must load";
    bc.mutate(ck);
    testing::WriteCheckpoint(dir.path(), ck.config, ck.entries);
    auto w = LoadModel(dir.path());
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), bc.code) << w.status();
    for (const std::string& s : bc.says) {
      EXPECT_THAT(std::string(w.status().message()), HasSubstr(s));
    }
  }
}

}  // namespace
}  // namespace banyan::model
