#include "tests/engine/model/test_util.h"

#include "engine/model/dtype.h"
#include "engine/model/safetensors_loader.h"
#include "engine/model/weights_layout.h"
#include "nlohmann/json.hpp"

namespace banyan::engine::testing {

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
  }
  return "?";
}

std::string Encode(const Tensor& t, uint32_t type) {
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
                            uint32_t version, const std::string& chat_template) {
  const ModelConfig& c = w.config;
  GgufBuilder b(version);
  b.Str("general.architecture", "llama");
  b.Str("general.name", "synthetic");
  b.U32("llama.context_length", static_cast<uint32_t>(c.max_seq_len));
  b.U32("llama.embedding_length", static_cast<uint32_t>(c.dim));
  b.U32("llama.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  b.U32("llama.block_count", static_cast<uint32_t>(c.n_layers));
  b.U32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  b.U32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  b.F32("llama.rope.freq_base", c.rope_theta);
  b.F32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
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
  for (const TensorSlot& slot : ListTensorSlots(c)) {
    const Tensor& t = SlotTensor(w, slot);
    const std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    const std::string name = GgufName(slot);
    if (name == override_type_of) {
      b.AddTensor(name, ne, override_type, std::string(t.data.size(), '\x11'));
    } else {
      b.AddTensor(name, ne, type, Encode(t, type));
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
  j["model_type"] = "llama";
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
  j["rope_scaling"] = nullptr;
  return j.dump(2);
}

}  // namespace banyan::engine::testing
