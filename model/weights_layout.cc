#include "model/weights_layout.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "model/rope.h"

namespace banyan::model {

// Limits for ValidateConfig. With them the largest product (n_layers * hidden_dim * dim) stays
// below 2^48 elements, so size arithmetic in int64 cannot overflow.
constexpr int kMaxDim = 1 << 16;
constexpr int kMaxHiddenDim = 1 << 20;
constexpr int kMaxLayers = 1 << 10;
constexpr int kMaxVocab = 1 << 22;
constexpr int kMaxSeqLen = 1 << 24;

std::vector<TensorSlot> ListTensorSlots(const ModelConfig& cfg) {
  const int64_t dim = cfg.dim, hidden = cfg.hidden_dim, vocab = cfg.vocab_size;
  const int64_t q_rows = int64_t{cfg.n_heads} * cfg.head_dim();
  const int64_t kv_rows = int64_t{cfg.n_kv_heads} * cfg.head_dim();
  std::vector<TensorSlot> slots;
  slots.reserve(static_cast<size_t>(cfg.n_layers) * 9 + 3);
  slots.push_back({WeightKind::kTokEmbd, -1, {vocab, dim}});
  for (int l = 0; l < cfg.n_layers; ++l) {
    slots.push_back({WeightKind::kAttnNorm, l, {dim}});
    slots.push_back({WeightKind::kWq, l, {q_rows, dim}});
    slots.push_back({WeightKind::kWk, l, {kv_rows, dim}});
    slots.push_back({WeightKind::kWv, l, {kv_rows, dim}});
    slots.push_back({WeightKind::kWo, l, {dim, q_rows}});
    slots.push_back({WeightKind::kFfnNorm, l, {dim}});
    slots.push_back({WeightKind::kGate, l, {hidden, dim}});
    slots.push_back({WeightKind::kDown, l, {dim, hidden}});
    slots.push_back({WeightKind::kUp, l, {hidden, dim}});
    if (cfg.qkv_bias) {
      slots.push_back({WeightKind::kBq, l, {q_rows}});
      slots.push_back({WeightKind::kBk, l, {kv_rows}});
      slots.push_back({WeightKind::kBv, l, {kv_rows}});
    }
    if (cfg.qk_norm) {
      slots.push_back({WeightKind::kQNorm, l, {cfg.head_dim()}});
      slots.push_back({WeightKind::kKNorm, l, {cfg.head_dim()}});
    }
  }
  slots.push_back({WeightKind::kFinalNorm, -1, {dim}});
  if (!cfg.tie_embeddings) slots.push_back({WeightKind::kLmHead, -1, {vocab, dim}});
  return slots;
}

const Tensor& SlotTensor(const ModelWeights& w, const TensorSlot& slot) {
  switch (slot.kind) {
    case WeightKind::kTokEmbd:
      return w.tok_embeddings;
    case WeightKind::kFinalNorm:
      return w.final_norm;
    case WeightKind::kLmHead:
      return w.lm_head;
    default:
      break;
  }
  BANYAN_CHECK(slot.layer >= 0 && static_cast<size_t>(slot.layer) < w.layers.size())
      << "layer " << slot.layer << " of " << w.layers.size();
  const LayerWeights& l = w.layers[slot.layer];
  switch (slot.kind) {
    case WeightKind::kAttnNorm:
      return l.attn_norm;
    case WeightKind::kWq:
      return l.wq;
    case WeightKind::kWk:
      return l.wk;
    case WeightKind::kWv:
      return l.wv;
    case WeightKind::kWo:
      return l.wo;
    case WeightKind::kFfnNorm:
      return l.ffn_norm;
    case WeightKind::kGate:
      return l.w_gate;
    case WeightKind::kDown:
      return l.w_down;
    case WeightKind::kUp:
      return l.w_up;
    case WeightKind::kBq:
      return l.bq;
    case WeightKind::kBk:
      return l.bk;
    case WeightKind::kBv:
      return l.bv;
    case WeightKind::kQNorm:
      return l.q_norm;
    case WeightKind::kKNorm:
      return l.k_norm;
    default:
      break;
  }
  BANYAN_CHECK(false) << "unreachable weight kind";
  return l.wq;
}

Tensor& SlotTensor(ModelWeights& w, const TensorSlot& slot) {
  return const_cast<Tensor&>(SlotTensor(static_cast<const ModelWeights&>(w), slot));
}

bool IsProjection(WeightKind kind) {
  switch (kind) {
    case WeightKind::kWq:
    case WeightKind::kWk:
    case WeightKind::kWv:
    case WeightKind::kWo:
    case WeightKind::kGate:
    case WeightKind::kDown:
    case WeightKind::kUp:
      return true;
    default:
      return false;
  }
}

const QuantizedTensor* SlotQuantized(const ModelWeights& w, const TensorSlot& slot) {
  if (!IsProjection(slot.kind)) return nullptr;
  BANYAN_CHECK(slot.layer >= 0 && static_cast<size_t>(slot.layer) < w.layers.size())
      << "layer " << slot.layer << " of " << w.layers.size();
  const LayerWeights::Fp8& q = w.layers[slot.layer].fp8;
  switch (slot.kind) {
    case WeightKind::kWq:
      return &q.wq;
    case WeightKind::kWk:
      return &q.wk;
    case WeightKind::kWv:
      return &q.wv;
    case WeightKind::kWo:
      return &q.wo;
    case WeightKind::kGate:
      return &q.w_gate;
    case WeightKind::kDown:
      return &q.w_down;
    case WeightKind::kUp:
      return &q.w_up;
    default:
      return nullptr;
  }
}

QuantizedTensor* SlotQuantized(ModelWeights& w, const TensorSlot& slot) {
  return const_cast<QuantizedTensor*>(SlotQuantized(static_cast<const ModelWeights&>(w), slot));
}

bool HasQuantizedWeights(const ModelWeights& w) {
  for (const LayerWeights& l : w.layers) {
    for (const QuantizedTensor* q :
         {&l.fp8.wq, &l.fp8.wk, &l.fp8.wv, &l.fp8.wo, &l.fp8.w_gate, &l.fp8.w_down, &l.fp8.w_up}) {
      if (!q->empty()) return true;
    }
  }
  return false;
}

std::string SlotName(const TensorSlot& slot) {
  const char* name = "?";
  switch (slot.kind) {
    case WeightKind::kTokEmbd:
      return "tok_embeddings";
    case WeightKind::kFinalNorm:
      return "final_norm";
    case WeightKind::kLmHead:
      return "lm_head";
    case WeightKind::kAttnNorm:
      name = "attn_norm";
      break;
    case WeightKind::kWq:
      name = "wq";
      break;
    case WeightKind::kWk:
      name = "wk";
      break;
    case WeightKind::kWv:
      name = "wv";
      break;
    case WeightKind::kWo:
      name = "wo";
      break;
    case WeightKind::kFfnNorm:
      name = "ffn_norm";
      break;
    case WeightKind::kGate:
      name = "w_gate";
      break;
    case WeightKind::kDown:
      name = "w_down";
      break;
    case WeightKind::kUp:
      name = "w_up";
      break;
    case WeightKind::kBq:
      name = "bq";
      break;
    case WeightKind::kBk:
      name = "bk";
      break;
    case WeightKind::kBv:
      name = "bv";
      break;
    case WeightKind::kQNorm:
      name = "q_norm";
      break;
    case WeightKind::kKNorm:
      name = "k_norm";
      break;
  }
  return absl::StrCat("layers.", slot.layer, ".", name);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsBehaviourTensor(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return ends_with(".bias") || ends_with("q_norm.weight") || ends_with("k_norm.weight");
}

namespace {

absl::Status CheckRange(const std::string& source, const char* field, int64_t v, int64_t lo,
                        int64_t hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(source, ": invalid config: ", field, " = ", v,
                                                 " (must be in [", lo, ", ", hi, "])"));
}

}  // namespace

absl::Status ValidateConfig(const ModelConfig& c, const std::string& source) {
  struct Field {
    const char* name;
    int64_t value, lo, hi;
  };
  const Field fields[] = {
      {"dim", c.dim, 1, kMaxDim},
      {"hidden_dim", c.hidden_dim, 1, kMaxHiddenDim},
      {"n_layers", c.n_layers, 1, kMaxLayers},
      {"n_heads", c.n_heads, 1, kMaxDim},
      {"n_kv_heads", c.n_kv_heads, 1, kMaxDim},
      {"vocab_size", c.vocab_size, 1, kMaxVocab},
      {"max_seq_len", c.max_seq_len, 1, kMaxSeqLen},
      {"bos_id", c.bos_id, -1, int64_t{c.vocab_size} - 1},
      {"eos_id", c.eos_id, -1, int64_t{c.vocab_size} - 1},
      {"head_size", c.head_size, 0, 4096},
  };
  for (const Field& f : fields) {
    if (absl::Status s = CheckRange(source, f.name, f.value, f.lo, f.hi); !s.ok()) return s;
  }
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid config: ", parts...));
  };
  if (c.head_size == 0 && c.dim % c.n_heads != 0) {
    return bad("dim ", c.dim, " is not divisible by n_heads ", c.n_heads);
  }
  if (int64_t{c.n_heads} * c.head_dim() > kMaxDim) {
    return bad("n_heads * head_dim = ", int64_t{c.n_heads} * c.head_dim(), " exceeds ", kMaxDim);
  }
  for (int id : c.stop_ids) {
    if (id < 0 || id >= c.vocab_size) return bad("stop id ", id, " outside the vocabulary");
  }
  if (c.head_dim() % 2 != 0) return bad("head_dim ", c.head_dim(), " is odd; RoPE needs pairs");
  if (c.n_heads % c.n_kv_heads != 0) {
    return bad("n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads);
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0)) {
    return bad("rope_theta ", c.rope_theta, " must be positive");
  }
  if (!(std::isfinite(c.norm_eps) && c.norm_eps > 0)) {
    return bad("norm_eps ", c.norm_eps, " must be positive");
  }
  return ValidateRopeScaling(c, source);
}

absl::Status ValidateWeights(const ModelWeights& w) {
  if (absl::Status s = ValidateConfig(w.config, w.source); !s.ok()) return s;
  if (w.layers.size() != static_cast<size_t>(w.config.n_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(w.source, ": has ", w.layers.size(),
                                                   " layers, config says ", w.config.n_layers));
  }
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const Tensor& t = SlotTensor(w, slot);
    if (const QuantizedTensor* q = SlotQuantized(w, slot); q != nullptr && !q->empty()) {
      if (!t.shape.empty() || !t.data.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            w.source, ": tensor ", SlotName(slot), " is held both in FP8 and as fp32"));
      }
      if (q->shape != slot.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(w.source, ": tensor shape mismatch for ", SlotName(slot), ": expected ",
                         ShapeString(slot.shape), ", got ", ShapeString(q->shape)));
      }
      if (absl::Status s = CheckQuantized(*q, absl::StrCat(w.source, ": ", SlotName(slot)));
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (t.shape != slot.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(w.source, ": tensor shape mismatch for ", SlotName(slot), ": expected ",
                       ShapeString(slot.shape), ", got ", ShapeString(t.shape)));
    }
    if (t.data.size() != static_cast<size_t>(t.numel())) {
      return absl::InvalidArgumentError(absl::StrCat(w.source, ": tensor ", SlotName(slot), " has ",
                                                     t.data.size(), " values for shape ",
                                                     ShapeString(t.shape)));
    }
  }
  if (w.config.tie_embeddings && (!w.lm_head.data.empty() || !w.lm_head.shape.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(w.source, ": lm_head must be empty when tie_embeddings is set"));
  }
  return absl::OkStatus();
}

}  // namespace banyan::model
