#include "tests/model/test_util.h"

#include <algorithm>
#include <cmath>

#include "model/dtype.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "nlohmann/json.hpp"

namespace banyan::model::testing {

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  ModelConfig untied = a.config;
  untied.tie_embeddings = false;  // list lm_head too; compare it via output_matrix()
  for (const TensorSlot& slot : ListTensorSlots(untied)) {
    if (slot.kind == WeightKind::kLmHead) {
      ExpectSameTensor(a.output_matrix(), b.output_matrix(), "output matrix");
    } else {
      ExpectSameTensor(SlotTensor(a, slot), SlotTensor(b, slot), SlotName(slot));
    }
  }
}

void GgufBuilder::StrArray(const std::string& key, const std::vector<std::string>& v) {
  Key(key, 9);
  AppendPod(kv_, uint32_t{8});
  AppendPod(kv_, static_cast<uint64_t>(v.size()));
  for (const std::string& s : v) String(kv_, s);
  ++n_kv_;
}

void GgufBuilder::F32Array(const std::string& key, const std::vector<float>& v) {
  Key(key, 9);
  AppendPod(kv_, uint32_t{6});
  AppendPod(kv_, static_cast<uint64_t>(v.size()));
  for (float x : v) AppendPod(kv_, x);
  ++n_kv_;
}

void GgufBuilder::I32Array(const std::string& key, const std::vector<int32_t>& v) {
  Key(key, 9);
  AppendPod(kv_, uint32_t{5});
  AppendPod(kv_, static_cast<uint64_t>(v.size()));
  for (int32_t x : v) AppendPod(kv_, x);
  ++n_kv_;
}

void GgufBuilder::AddTensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                            const std::string& data) {
  tensors_.push_back({name, ne, type, data});
}

std::string GgufBuilder::Build(uint32_t alignment) const {
  std::string s = "GGUF";
  AppendPod(s, version_);
  AppendPod(s, static_cast<uint64_t>(tensors_.size()));
  AppendPod(s, n_kv_);
  s += kv_;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const PendingTensor& t : tensors_) {
    String(s, t.name);
    AppendPod(s, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) AppendPod(s, d);
    AppendPod(s, t.type);
    AppendPod(s, offset);
    offsets.push_back(offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  s.resize((s.size() + alignment - 1) / alignment * alignment, '\0');
  const size_t data_start = s.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    s.resize(data_start + offsets[i], '\0');
    s += tensors_[i].data;
  }
  return s;
}

namespace {

std::string GgufName(const TensorSlot& s) {
  const std::string blk = "blk." + std::to_string(s.layer) + ".";
  switch (s.kind) {
    case WeightKind::kTokEmbd:
      return "token_embd.weight";
    case WeightKind::kFinalNorm:
      return "output_norm.weight";
    case WeightKind::kLmHead:
      return "output.weight";
    case WeightKind::kAttnNorm:
      return blk + "attn_norm.weight";
    case WeightKind::kWq:
      return blk + "attn_q.weight";
    case WeightKind::kWk:
      return blk + "attn_k.weight";
    case WeightKind::kWv:
      return blk + "attn_v.weight";
    case WeightKind::kWo:
      return blk + "attn_output.weight";
    case WeightKind::kFfnNorm:
      return blk + "ffn_norm.weight";
    case WeightKind::kGate:
      return blk + "ffn_gate.weight";
    case WeightKind::kDown:
      return blk + "ffn_down.weight";
    case WeightKind::kUp:
      return blk + "ffn_up.weight";
    case WeightKind::kBq:
      return blk + "attn_q.bias";
    case WeightKind::kBk:
      return blk + "attn_k.bias";
    case WeightKind::kBv:
      return blk + "attn_v.bias";
    case WeightKind::kQNorm:
      return blk + "attn_q_norm.weight";
    case WeightKind::kKNorm:
      return blk + "attn_k_norm.weight";
  }
  return "?";
}

}  // namespace

std::string EncodeQ8_0(const float* x, size_t n) {
  std::string out;
  for (size_t b = 0; b < n; b += 32) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    const uint16_t dh = FloatToHalf(d);
    AppendPod(out, dh);
    for (size_t i = 0; i < 32; ++i) {
      const float q = d == 0 ? 0.0f : std::nearbyint(x[b + i] / d);
      AppendPod(out, static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
  return out;
}

namespace {

// Q8_0 applies to matrices whose rows split into 32-value blocks; other tensors stay F32, as
// llama.cpp's quantizer leaves them.
uint32_t TypeFor(const Tensor& t, uint32_t type) {
  if (type == kGgmlQ8_0 && (t.shape.size() != 2 || t.shape.back() % 32 != 0)) return kGgmlF32;
  return type;
}

std::string Encode(const Tensor& t, uint32_t type) {
  if (type == kGgmlQ8_0) return EncodeQ8_0(t.data.data(), t.data.size());
  WeightDtype d = type == kGgmlF16    ? WeightDtype::kF16
                  : type == kGgmlBF16 ? WeightDtype::kBF16
                                      : WeightDtype::kF32;
  std::string out(t.data.size() * DtypeSize(d), '\0');
  ConvertFromFloat(d, t.data.data(), t.data.size(), out.data());
  return out;
}

}  // namespace

std::string GgufFromWeights(const ModelWeights& w, uint32_t type,
                            const std::string& override_type_of, uint32_t override_type,
                            uint32_t version, const std::vector<float>* rope_freqs,
                            const std::string& chat_template) {
  const ModelConfig& c = w.config;
  GgufBuilder b(version);
  const std::string a = c.arch;
  b.Str("general.architecture", a);
  b.Str("general.name", "synthetic");
  b.U32(a + ".context_length", static_cast<uint32_t>(c.max_seq_len));
  b.U32(a + ".embedding_length", static_cast<uint32_t>(c.dim));
  b.U32(a + ".feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  b.U32(a + ".block_count", static_cast<uint32_t>(c.n_layers));
  b.U32(a + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  b.U32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  if (c.head_size > 0) {
    b.U32(a + ".attention.key_length", static_cast<uint32_t>(c.head_size));
    b.U32(a + ".attention.value_length", static_cast<uint32_t>(c.head_size));
  }
  b.F32(a + ".rope.freq_base", c.rope_theta);
  b.F32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  b.Str("tokenizer.ggml.model", "llama");
  if (!chat_template.empty()) b.Str("tokenizer.chat_template", chat_template);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < c.vocab_size; ++i) {
    std::string token = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "t";
    if (i >= 3) token += std::to_string(i);
    tokens.push_back(token);
    scores.push_back(-static_cast<float>(i));
    types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);
  }
  b.StrArray("tokenizer.ggml.tokens", tokens);
  b.F32Array("tokenizer.ggml.scores", scores);
  b.I32Array("tokenizer.ggml.token_type", types);
  b.U32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_id));
  b.U32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_id));
  if (rope_freqs != nullptr) {
    b.AddTensor("rope_freqs.weight", {rope_freqs->size()}, kGgmlF32, FloatBytes(*rope_freqs));
  }
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    const Tensor& t = SlotTensor(w, slot);
    const std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    const std::string name = GgufName(slot);
    if (name == override_type_of) {
      b.AddTensor(name, ne, override_type, std::string(t.data.size(), '\x11'));
    } else {
      b.AddTensor(name, ne, TypeFor(t, type), Encode(t, TypeFor(t, type)));
    }
  }
  return b.Build();
}

std::string SafetensorsBytes(const std::vector<RawEntry>& entries) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const RawEntry& e : entries) {
    h[e.name] = {{"dtype", e.dtype},
                 {"shape", e.shape},
                 {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = h.dump();
  std::string s;
  AppendPod(s, static_cast<uint64_t>(text.size()));
  s += text;
  for (const RawEntry& e : entries) s += e.bytes;
  return s;
}

std::vector<RawEntry> HfEntries(const ModelWeights& w) {
  std::vector<RawEntry> out;
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const Tensor& t = SlotTensor(w, slot);
    out.push_back({HfTensorName(slot), "F32", t.shape, FloatBytes(t.data)});
  }
  return out;
}

std::string HfConfigJson(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = c.arch;
  if (c.head_size > 0) j["head_dim"] = c.head_size;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["bos_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  if (!c.stop_ids.empty()) j["eos_token_id"] = c.stop_ids;
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_pos}};
  }
  return j.dump(2);
}

}  // namespace banyan::model::testing
