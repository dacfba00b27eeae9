#include "model/gguf_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/dtype.h"
#include "model/gguf_quant.h"
#include "model/mapped_file.h"
#include "model/model_log.h"
#include "model/weights_layout.h"
#include "text/tokenizer/hf_json_reader.h"

namespace banyan::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;                  // GGML_MAX_DIMS
constexpr uint64_t kMaxDimExtent = uint64_t{1} << 40;
constexpr uint64_t kMaxNumel = uint64_t{1} << 48;

// GGUF metadata value types.
enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Scalars fill the matching field; arrays fill `strs` or `nums` (nested
// arrays are parsed for bounds and dropped).
struct GgufValue {
  uint32_t type = 0;
  uint32_t elem_type = 0;  // arrays only
  bool is_int = false;
  int64_t ival = 0;   // integer scalars (and bool), when they fit
  uint64_t uval = 0;  // unsigned scalars
  double fval = 0;    // any numeric scalar
  std::string str;
  std::vector<std::string> strs;
  std::vector<double> nums;
  uint64_t arr_len = 0;
};

struct GgufTensorInfo {
  std::vector<int64_t> ne;  // ggml order: innermost first
  uint32_t type = 0;
  uint64_t offset = 0;  // relative to the data section
};

struct GgufFile {
  std::unique_ptr<MappedFile> file;
  uint32_t version = 0;
  std::map<std::string, GgufValue> kv;
  std::map<std::string, GgufTensorInfo> tensors;
  size_t data_start = 0;  // absolute byte offset of the tensor data section
};

absl::StatusOr<std::string> ReadString(ByteReader& r, absl::string_view what) {
  absl::StatusOr<uint64_t> len = r.Read<uint64_t>(what);
  if (!len.ok()) return len.status();
  absl::StatusOr<absl::string_view> bytes = r.Bytes(*len, what);
  if (!bytes.ok()) return bytes.status();
  return std::string(*bytes);
}

size_t ScalarSize(uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

// Reads a numeric scalar of type t into v.
absl::Status ReadScalar(ByteReader& r, uint32_t t, const std::string& key, GgufValue& v) {
  const size_t n = ScalarSize(t);
  if (absl::Status s = r.Require(n, key); !s.ok()) return s;
  const uint8_t* p = r.cursor();
  auto load = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  v.is_int = true;
  switch (t) {
    case kU8:
      v.uval = load(uint8_t{});
      v.ival = static_cast<int64_t>(v.uval);
      break;
    case kBool:
      v.uval = load(uint8_t{}) != 0;
      v.ival = static_cast<int64_t>(v.uval);
      break;
    case kU16:
      v.uval = load(uint16_t{});
      v.ival = static_cast<int64_t>(v.uval);
      break;
    case kU32:
      v.uval = load(uint32_t{});
      v.ival = static_cast<int64_t>(v.uval);
      break;
    case kU64:
      v.uval = load(uint64_t{});
      v.ival = static_cast<int64_t>(v.uval);
      v.is_int = v.uval <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      break;
    case kI8:
      v.ival = load(int8_t{});
      break;
    case kI16:
      v.ival = load(int16_t{});
      break;
    case kI32:
      v.ival = load(int32_t{});
      break;
    case kI64:
      v.ival = load(int64_t{});
      break;
    case kF32:
      v.fval = load(float{});
      v.is_int = false;
      break;
    case kF64:
      v.fval = load(double{});
      v.is_int = false;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(r.source(), ": metadata ", key, " has unknown value type ", t));
  }
  if (v.is_int && t != kU64) v.fval = static_cast<double>(v.ival);
  if (t == kU64) v.fval = static_cast<double>(v.uval);
  return r.Skip(n, key);
}

absl::Status ReadValue(ByteReader& r, uint32_t t, const std::string& key, GgufValue& v, int depth) {
  v.type = t;
  if (t == kString) {
    absl::StatusOr<std::string> s = ReadString(r, key);
    if (!s.ok()) return s.status();
    v.str = *std::move(s);
    return absl::OkStatus();
  }
  if (t != kArray) return ReadScalar(r, t, key, v);
  if (depth > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.source(), ": metadata ", key, " nests arrays too deeply"));
  }
  absl::StatusOr<uint32_t> et = r.Read<uint32_t>(key);
  if (!et.ok()) return et.status();
  absl::StatusOr<uint64_t> len = r.Read<uint64_t>(key);
  if (!len.ok()) return len.status();
  v.elem_type = *et;
  v.arr_len = *len;
  // Every element takes at least its minimum encoded size (8 bytes for a string's length,
  // 12 for a nested array's header), so a longer array is corrupt; checking first keeps a bad
  // length from triggering a huge allocation.
  uint64_t min_elem = std::max<uint64_t>(ScalarSize(*et), 1);
  if (*et == kString) min_elem = 8;
  if (*et == kArray) min_elem = 12;
  if (*len > r.remaining() / min_elem) {
    return absl::DataLossError(absl::StrCat(r.source(), ": truncated or corrupt: metadata array ",
                                            key, " claims ", *len, " elements but only ",
                                            r.remaining(), " bytes remain"));
  }
  if (*et == kString) {
    v.strs.reserve(std::min<uint64_t>(*len, 1 << 20));
    for (uint64_t i = 0; i < *len; ++i) {
      absl::StatusOr<std::string> s = ReadString(r, key);
      if (!s.ok()) return s.status();
      v.strs.push_back(*std::move(s));
    }
  } else if (*et == kArray) {
    for (uint64_t i = 0; i < *len; ++i) {
      GgufValue inner;  // each element is itself (elem type, length, items)
      if (absl::Status s = ReadValue(r, kArray, key, inner, depth + 1); !s.ok()) return s;
    }
  } else {
    if (ScalarSize(*et) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(r.source(), ": metadata array ", key, " has unknown element type ", *et));
    }
    v.nums.reserve(std::min<uint64_t>(*len, 1 << 20));
    for (uint64_t i = 0; i < *len; ++i) {
      GgufValue e;
      if (absl::Status s = ReadScalar(r, *et, key, e); !s.ok()) return s;
      v.nums.push_back(e.fval);
    }
  }
  return absl::OkStatus();
}

// Parses the header, metadata and tensor infos; checks every tensor lies inside the file.
absl::StatusOr<GgufFile> ParseGguf(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  GgufFile g;
  g.file = *std::move(mapped);
  ByteReader r(g.file->data(), g.file->size(), path);

  absl::StatusOr<uint32_t> magic = r.Read<uint32_t>("GGUF magic");
  if (!magic.ok()) return magic.status();
  if (*magic != kGgufMagic) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a GGUF file: bad magic 0x",
                                                   absl::Hex(*magic, absl::kZeroPad8),
                                                   " (expected \"GGUF\")"));
  }
  absl::StatusOr<uint32_t> version = r.Read<uint32_t>("GGUF version");
  if (!version.ok()) return version.status();
  if (*version != 2 && *version != 3) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": GGUF version ", *version, " is not supported (need 2 or 3)"));
  }
  g.version = *version;
  absl::StatusOr<uint64_t> n_tensors = r.Read<uint64_t>("tensor count");
  if (!n_tensors.ok()) return n_tensors.status();
  absl::StatusOr<uint64_t> n_kv = r.Read<uint64_t>("metadata count");
  if (!n_kv.ok()) return n_kv.status();

  for (uint64_t i = 0; i < *n_kv; ++i) {
    absl::StatusOr<std::string> key = ReadString(r, absl::StrCat("metadata key #", i));
    if (!key.ok()) return key.status();
    absl::StatusOr<uint32_t> type = r.Read<uint32_t>(*key);
    if (!type.ok()) return type.status();
    GgufValue v;
    if (absl::Status s = ReadValue(r, *type, *key, v, 0); !s.ok()) return s;
    if (!g.kv.emplace(*key, std::move(v)).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": duplicate metadata key ", *key));
    }
  }

  for (uint64_t i = 0; i < *n_tensors; ++i) {
    absl::StatusOr<std::string> name = ReadString(r, absl::StrCat("tensor name #", i));
    if (!name.ok()) return name.status();
    absl::StatusOr<uint32_t> n_dims = r.Read<uint32_t>(*name);
    if (!n_dims.ok()) return n_dims.status();
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", *name, " has ", *n_dims, " dims (must be 1..4)"));
    }
    GgufTensorInfo info;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      absl::StatusOr<uint64_t> ne = r.Read<uint64_t>(*name);
      if (!ne.ok()) return ne.status();
      if (*ne == 0 || *ne > kMaxDimExtent || numel * *ne > kMaxNumel) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor ", *name, " has an invalid extent ", *ne, " in dim ", d));
      }
      numel *= *ne;
      info.ne.push_back(static_cast<int64_t>(*ne));
    }
    absl::StatusOr<uint32_t> type = r.Read<uint32_t>(*name);
    if (!type.ok()) return type.status();
    absl::StatusOr<uint64_t> offset = r.Read<uint64_t>(*name);
    if (!offset.ok()) return offset.status();
    info.type = *type;
    info.offset = *offset;
    if (!g.tensors.emplace(*name, std::move(info)).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": duplicate tensor ", *name));
    }
  }

  uint64_t alignment = 32;
  if (auto it = g.kv.find("general.alignment"); it != g.kv.end()) {
    const GgufValue& a = it->second;
    if (!a.is_int || a.ival <= 0 || a.ival > (1 << 20) || (a.ival & (a.ival - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": general.alignment must be a power of two up to 2^20, got ", a.fval));
    }
    alignment = static_cast<uint64_t>(a.ival);
  }
  g.data_start = (r.offset() + alignment - 1) / alignment * alignment;
  return g;
}

std::string TensorName(const TensorSlot& s) {
  switch (s.kind) {
    case WeightKind::kTokEmbd:
      return "token_embd.weight";
    case WeightKind::kFinalNorm:
      return "output_norm.weight";
    case WeightKind::kLmHead:
      return "output.weight";
    case WeightKind::kAttnNorm:
      return absl::StrCat("blk.", s.layer, ".attn_norm.weight");
    case WeightKind::kWq:
      return absl::StrCat("blk.", s.layer, ".attn_q.weight");
    case WeightKind::kWk:
      return absl::StrCat("blk.", s.layer, ".attn_k.weight");
    case WeightKind::kWv:
      return absl::StrCat("blk.", s.layer, ".attn_v.weight");
    case WeightKind::kWo:
      return absl::StrCat("blk.", s.layer, ".attn_output.weight");
    case WeightKind::kFfnNorm:
      return absl::StrCat("blk.", s.layer, ".ffn_norm.weight");
    case WeightKind::kGate:
      return absl::StrCat("blk.", s.layer, ".ffn_gate.weight");
    case WeightKind::kDown:
      return absl::StrCat("blk.", s.layer, ".ffn_down.weight");
    case WeightKind::kUp:
      return absl::StrCat("blk.", s.layer, ".ffn_up.weight");
    case WeightKind::kBq:
      return absl::StrCat("blk.", s.layer, ".attn_q.bias");
    case WeightKind::kBk:
      return absl::StrCat("blk.", s.layer, ".attn_k.bias");
    case WeightKind::kBv:
      return absl::StrCat("blk.", s.layer, ".attn_v.bias");
    case WeightKind::kQNorm:
      return absl::StrCat("blk.", s.layer, ".attn_q_norm.weight");
    case WeightKind::kKNorm:
      return absl::StrCat("blk.", s.layer, ".attn_k_norm.weight");
  }
  return "?";
}

// Typed metadata access with messages naming the file and the key.
class Meta {
 public:
  explicit Meta(const GgufFile& g) : g_(g) {}

  const GgufValue* Find(const std::string& key) const {
    auto it = g_.kv.find(key);
    return it == g_.kv.end() ? nullptr : &it->second;
  }

  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> def) const {
    const GgufValue* v = Find(key);
    if (v == nullptr) {
      if (def.has_value()) return *def;
      return Missing(key);
    }
    if (!v->is_int) return WrongType(key, "an integer");
    return v->ival;
  }

  absl::StatusOr<double> Float(const std::string& key, std::optional<double> def) const {
    const GgufValue* v = Find(key);
    if (v == nullptr) {
      if (def.has_value()) return *def;
      return Missing(key);
    }
    if (v->type == kString || v->type == kArray) return WrongType(key, "a number");
    return v->fval;
  }

  absl::StatusOr<std::string> String(const std::string& key, std::optional<std::string> def) const {
    const GgufValue* v = Find(key);
    if (v == nullptr) {
      if (def.has_value()) return *def;
      return Missing(key);
    }
    if (v->type != kString) return WrongType(key, "a string");
    return v->str;
  }

  // A ModelConfig int field: an integer that fits in int.
  absl::Status IntField(const std::string& key, std::optional<int64_t> def, int* out) const {
    absl::StatusOr<int64_t> v = Int(key, def);
    if (!v.ok()) return v.status();
    if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(g_.file->path(), ": metadata ", key, " = ", *v, " is out of range"));
    }
    *out = static_cast<int>(*v);
    return absl::OkStatus();
  }

  absl::Status Missing(const std::string& key) const {
    return absl::InvalidArgumentError(
        absl::StrCat(g_.file->path(), ": missing metadata key ", key));
  }
  absl::Status WrongType(const std::string& key, const char* want) const {
    return absl::InvalidArgumentError(
        absl::StrCat(g_.file->path(), ": metadata ", key, " must be ", want));
  }

 private:
  const GgufFile& g_;
};

absl::StatusOr<ModelConfig> ReadConfig(const GgufFile& g) {
  const std::string& path = g.file->path();
  const Meta m(g);
  absl::StatusOr<std::string> arch = m.String("general.architecture", std::nullopt);
  if (!arch.ok()) return arch.status();
  if (*arch != "llama" && *arch != "qwen2" && *arch != "qwen3") {
    return absl::UnimplementedError(absl::StrCat(path, ": general.architecture \"", *arch,
                                                 "\" is not supported (need llama, qwen2 or qwen3)"));
  }
  const std::string& a = *arch;  // the metadata key prefix
  auto key = [&](const char* rest) { return absl::StrCat(a, ".", rest); };
  ModelConfig c;
  c.arch = a;
  // llama.cpp permutes Llama's Wq / Wk into the interleaved order; Qwen's stay rotate-half
  // (llama.cpp runs them with NEOX-style RoPE).
  c.rope_style = a == "llama" ? RopeStyle::kInterleaved : RopeStyle::kHalf;
  c.qkv_bias = a == "qwen2";
  c.qk_norm = a == "qwen3";
  const struct {
    std::string key;
    std::optional<int64_t> def;
    int* out;
  } ints[] = {
      {key("embedding_length"), std::nullopt, &c.dim},
      {key("feed_forward_length"), std::nullopt, &c.hidden_dim},
      {key("block_count"), std::nullopt, &c.n_layers},
      {key("attention.head_count"), std::nullopt, &c.n_heads},
      {key("context_length"), std::nullopt, &c.max_seq_len},
      {"tokenizer.ggml.bos_token_id", 1, &c.bos_id},
      {"tokenizer.ggml.eos_token_id", 2, &c.eos_id},
  };
  for (const auto& f : ints) {
    if (absl::Status s = m.IntField(f.key, f.def, f.out); !s.ok()) return s;
  }
  if (absl::Status s = m.IntField(key("attention.head_count_kv"), c.n_heads, &c.n_kv_heads);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<double> theta = m.Float(key("rope.freq_base"), 10000.0);
  if (!theta.ok()) return theta.status();
  absl::StatusOr<double> eps = m.Float(key("attention.layer_norm_rms_epsilon"), std::nullopt);
  if (!eps.ok()) return eps.status();
  c.rope_theta = static_cast<float>(*theta);
  c.norm_eps = static_cast<float>(*eps);
  // End-of-turn / end-of-message ids stop generation too (Llama 3 instruct's <|eot_id|>).
  for (const char* k : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    absl::StatusOr<int64_t> id = m.Int(k, -1);
    if (!id.ok()) return id.status();
    if (*id >= 0 && *id <= std::numeric_limits<int>::max() && *id != c.eos_id) {
      if (c.stop_ids.empty() && c.eos_id >= 0) c.stop_ids.push_back(c.eos_id);
      c.stop_ids.push_back(static_cast<int>(*id));
    }
  }

  // Vocabulary size: explicit key, else the token list, else the embedding's row count.
  int64_t vocab = 0;
  if (const GgufValue* v = m.Find(key("vocab_size"))) {
    vocab = v->is_int ? v->ival : -1;
  } else if (const GgufValue* t = m.Find("tokenizer.ggml.tokens")) {
    vocab = static_cast<int64_t>(t->arr_len);
  } else if (auto it = g.tensors.find("token_embd.weight");
             it != g.tensors.end() && it->second.ne.size() == 2) {
    vocab = it->second.ne[1];
  }
  if (vocab <= 0 || vocab > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot determine the vocabulary size (",
                                                   key("vocab_size"),
                                                   ", tokenizer.ggml.tokens or token_embd.weight)"));
  }
  c.vocab_size = static_cast<int>(vocab);
  // Stop ids past the vocabulary (padding ids such as 0xffffffff) are dropped.
  std::erase_if(c.stop_ids, [&](int id) { return id >= c.vocab_size; });
  c.tie_embeddings = g.tensors.count("output.weight") == 0;

  // head_dim from attention.key_length when it differs from dim / heads (Qwen 3).
  absl::StatusOr<int64_t> key_len = m.Int(key("attention.key_length"), 0);
  if (!key_len.ok()) return key_len.status();
  absl::StatusOr<int64_t> value_len = m.Int(key("attention.value_length"), *key_len);
  if (!value_len.ok()) return value_len.status();
  if (*value_len != *key_len) {
    return absl::UnimplementedError(absl::StrCat(path, ": ", key("attention.value_length"), " ",
                                                 *value_len, " != key_length ", *key_len,
                                                 " is not implemented"));
  }
  if (*key_len < 0 || *key_len > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key("attention.key_length"), " = ", *key_len, " is out of range"));
  }
  if (*key_len > 0 && (c.n_heads <= 0 || c.dim % c.n_heads != 0 || *key_len != c.dim / c.n_heads)) {
    c.head_size = static_cast<int>(*key_len);
  }

  absl::StatusOr<std::string> scaling = m.String(key("rope.scaling.type"), "none");
  if (!scaling.ok()) return scaling.status();
  if (*scaling != "none") {
    return absl::UnimplementedError(absl::StrCat(path, ": ", key("rope.scaling.type"), " \"",
                                                 *scaling, "\" is not implemented"));
  }
  absl::StatusOr<int64_t> experts = m.Int(key("expert_count"), 0);
  if (!experts.ok()) return experts.status();
  if (*experts > 0) {
    return absl::UnimplementedError(absl::StrCat(path, ": mixture-of-experts (", key("expert_count"),
                                                 " = ", *experts, ") is not implemented"));
  }
  absl::StatusOr<int64_t> window = m.Int(key("attention.sliding_window"), 0);
  if (!window.ok()) return window.status();
  if (*window > 0 && *window < c.max_seq_len) {
    ModelLog().warn("{}: {} {} is smaller than the context {}: sliding-window attention is not "
                    "implemented, so the context is limited to {} tokens",
                    path, key("attention.sliding_window"), *window, c.max_seq_len, *window);
    c.max_seq_len = static_cast<int>(*window);
  }
  if (absl::Status s = ValidateConfig(c, path); !s.ok()) return s;
  absl::StatusOr<int64_t> rot = m.Int(key("rope.dimension_count"), c.head_dim());
  if (!rot.ok()) return rot.status();
  if (*rot != c.head_dim()) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": partial rotary embedding (", key("rope.dimension_count"), " = ", *rot,
                     ", head_dim = ", c.head_dim(), ") is not implemented"));
  }
  return c;
}

// tokenizer.ggml.* of a "gpt2" (byte-level BPE) vocabulary, as a BpeSpec; see gguf_loader.h.
absl::Status ReadBpeVocab(const GgufFile& g, const ModelConfig& c, text::BpeSpec* out) {
  const std::string& path = g.file->path();
  const Meta m(g);
  text::BpeSpec spec;
  const GgufValue* tokens = m.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) return m.Missing("tokenizer.ggml.tokens");
  if (tokens->type != kArray || tokens->elem_type != kString) {
    return m.WrongType("tokenizer.ggml.tokens", "an array of strings");
  }
  const size_t n = tokens->strs.size();
  const GgufValue* merges = m.Find("tokenizer.ggml.merges");
  if (merges == nullptr) return m.Missing("tokenizer.ggml.merges");
  if (merges->type != kArray || merges->elem_type != kString) {
    return m.WrongType("tokenizer.ggml.merges", "an array of strings");
  }
  const GgufValue* types = m.Find("tokenizer.ggml.token_type");
  if (types != nullptr && (types->type != kArray || types->nums.size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": metadata tokenizer.ggml.token_type must be a ", n,
        "-element numeric array like the tokens"));
  }
  for (size_t i = 0; i < n; ++i) {
    const double t = types == nullptr ? 1 : types->nums[i];
    const int32_t id = static_cast<int32_t>(i);
    if (t == 3 || t == 4) {  // control and user-defined: added tokens, matched before BPE
      spec.added_tokens.push_back({.id = id, .content = tokens->strs[i], .special = t == 3});
    } else {
      spec.vocab.emplace_back(tokens->strs[i], id);
    }
  }
  for (const std::string& merge : merges->strs) {
    const size_t space = merge.find(' ');
    if (space == std::string::npos || merge.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tokenizer.ggml.merges entry '", merge, "' is not two pieces and a space"));
    }
    spec.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
  }
  absl::StatusOr<std::string> pre = m.String("tokenizer.ggml.pre", "default");
  if (!pre.ok()) return pre.status();
  if (absl::Status s = text::ApplyGgufPreTokenizer(*pre, &spec); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  spec.ignore_merges = *pre == "llama-bpe" || *pre == "llama3";
  spec.decoder.byte_level = true;
  auto id = [&](const char* key, int64_t def) -> absl::StatusOr<int32_t> {
    absl::StatusOr<int64_t> x = m.Int(key, def);
    if (!x.ok()) return x.status();
    return (*x >= 0 && *x < static_cast<int64_t>(n)) ? static_cast<int32_t>(*x) : -1;
  };
  absl::StatusOr<int32_t> bos = id("tokenizer.ggml.bos_token_id", c.bos_id);
  absl::StatusOr<int32_t> eos = id("tokenizer.ggml.eos_token_id", c.eos_id);
  absl::StatusOr<int32_t> unk = id("tokenizer.ggml.unknown_token_id", -1);
  absl::StatusOr<int64_t> add_bos = m.Int("tokenizer.ggml.add_bos_token", spec.ignore_merges);
  absl::StatusOr<int64_t> add_eos = m.Int("tokenizer.ggml.add_eos_token", 0);
  for (const absl::Status& s : {bos.status(), eos.status(), unk.status(), add_bos.status(),
                                add_eos.status()}) {
    if (!s.ok()) return s;
  }
  spec.bos_id = *bos;
  spec.eos_id = *eos;
  if (*unk >= 0) spec.unk_token = tokens->strs[*unk];
  if (*add_bos != 0 && *bos >= 0) spec.prefix_ids = {*bos};
  if (*add_eos != 0 && *eos >= 0) spec.suffix_ids = {*eos};
  spec.source = absl::StrCat(path, " (GGUF metadata, pre-tokenizer \"", *pre, "\")");
  *out = std::move(spec);
  return absl::OkStatus();
}

absl::Status ReadVocab(const GgufFile& g, const ModelConfig& c, text::SpmVocab* out) {
  const std::string& path = g.file->path();
  const Meta m(g);
  absl::StatusOr<std::string> model = m.String("tokenizer.ggml.model", std::nullopt);
  if (!model.ok()) return model.status();
  if (*model != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        path, ": tokenizer.ggml.model \"", *model,
        "\" is not supported (\"llama\": SentencePiece, \"gpt2\": byte-level BPE)"));
  }
  const GgufValue* tokens = m.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) return m.Missing("tokenizer.ggml.tokens");
  if (tokens->type != kArray || tokens->elem_type != kString) {
    return m.WrongType("tokenizer.ggml.tokens", "an array of strings");
  }
  const size_t n = tokens->strs.size();
  text::SpmVocab v;
  v.model_type = text::SpmModelType::kBpe;
  v.pieces = tokens->strs;
  v.scores.assign(n, 0.0f);
  v.types.assign(n, text::PieceType::kNormal);
  for (const bool is_scores : {true, false}) {
    const char* key = is_scores ? "tokenizer.ggml.scores" : "tokenizer.ggml.token_type";
    const GgufValue* a = m.Find(key);
    if (a == nullptr) continue;
    if (a->type != kArray || a->nums.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": metadata ", key, " must be a ", n,
                                                     "-element numeric array like the tokens"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (is_scores) {
        v.scores[i] = static_cast<float>(a->nums[i]);
        continue;
      }
      const double t = a->nums[i];
      if (t == 0) continue;  // llama.cpp's "undefined" type
      if (!(t >= 1 && t <= 6) || t != std::floor(t)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tokenizer.ggml.token_type[", i, "] = ", t, " is not 0..6"));
      }
      v.types[i] = static_cast<text::PieceType>(static_cast<int>(t));
      if (v.types[i] == text::PieceType::kByte) v.byte_fallback = true;
    }
  }
  auto id = [&](const char* key, int def, int* out_id) -> absl::Status {
    absl::StatusOr<int64_t> x = m.Int(key, def);
    if (!x.ok()) return x.status();
    *out_id = (*x >= 0 && *x < static_cast<int64_t>(n)) ? static_cast<int>(*x) : -1;
    return absl::OkStatus();
  };
  for (auto [key, def, dst] : {std::tuple{"tokenizer.ggml.unknown_token_id", 0, &v.unk_id},
                               std::tuple{"tokenizer.ggml.bos_token_id", c.bos_id, &v.bos_id},
                               std::tuple{"tokenizer.ggml.eos_token_id", c.eos_id, &v.eos_id},
                               std::tuple{"tokenizer.ggml.padding_token_id", -1, &v.pad_id}}) {
    if (absl::Status s = id(key, def, dst); !s.ok()) return s;
  }
  for (auto [key, def, dst] :
       {std::tuple{"tokenizer.ggml.add_space_prefix", true, &v.add_dummy_prefix},
        std::tuple{"tokenizer.ggml.remove_extra_whitespaces", false,
                   &v.remove_extra_whitespaces}}) {
    absl::StatusOr<int64_t> x = m.Int(key, def ? 1 : 0);
    if (!x.ok()) return x.status();
    *dst = *x != 0;
  }
  *out = std::move(v);
  return absl::OkStatus();
}

// Reads tensor `name` (shape `want`, row-major) into `t` as fp32: F32/F16/BF16 widened, the
// block-quantized types dequantized. Adds the bytes read to *quant_bytes when quantized.
absl::Status ReadTensor(const GgufFile& g, const std::string& name, const std::vector<int64_t>& want,
                        Tensor* t, int64_t* quant_bytes) {
  const std::string& path = g.file->path();
  auto it = g.tensors.find(name);
  if (it == g.tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor ", name));
  }
  const GgufTensorInfo& info = it->second;
  const std::vector<int64_t> shape(info.ne.rbegin(), info.ne.rend());
  if (shape != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor shape mismatch for ", name, ": expected ", ShapeString(want),
        " (row-major), got ", ShapeString(shape), " (ggml ne ", ShapeString(info.ne), ")"));
  }
  t->shape = shape;
  const int64_t numel = t->numel();
  uint64_t bytes = 0;
  if (absl::Status s = GgmlTensorBytes(info.type, info.ne[0], numel / info.ne[0], name, &bytes);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  const size_t file_size = g.file->size();
  // Overflow-safe form of data_start + offset + bytes <= file_size.
  if (g.data_start > file_size || info.offset > file_size - g.data_start ||
      bytes > file_size - g.data_start - info.offset) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: tensor ", name, " occupies bytes [", g.data_start + info.offset, ", ",
        g.data_start + info.offset + bytes, ") but the file has ", file_size, " bytes"));
  }
  const uint8_t* src = g.file->data() + g.data_start + info.offset;
  t->data.resize(static_cast<size_t>(numel));
  switch (info.type) {
    case kGgmlTypeF32:
      ConvertToFloat(WeightDtype::kF32, src, t->data.size(), t->data.data());
      break;
    case kGgmlTypeF16:
      ConvertToFloat(WeightDtype::kF16, src, t->data.size(), t->data.data());
      break;
    case kGgmlTypeBF16:
      ConvertToFloat(WeightDtype::kBF16, src, t->data.size(), t->data.data());
      break;
    default:
      Dequantize(info.type, src, numel, t->data.data());
      *quant_bytes += static_cast<int64_t>(bytes);
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadGguf(const std::string& path, text::SpmVocab* vocab_out,
                                      text::BpeSpec* bpe_out, std::string* chat_template_out) {
  absl::StatusOr<GgufFile> parsed = ParseGguf(path);
  if (!parsed.ok()) return parsed.status();
  const GgufFile& g = *parsed;
  absl::StatusOr<ModelConfig> cfg = ReadConfig(g);
  if (!cfg.ok()) return cfg.status();

  ModelWeights w;
  w.source = path;
  w.config = *cfg;
  w.layers.resize(static_cast<size_t>(w.config.n_layers));
  std::set<std::string> used;
  int64_t quant_bytes = 0, quant_values = 0;
  int quant_tensors = 0;
  // Llama 3.1's RoPE scaling, precomputed by llama.cpp's converter as per-frequency divisors.
  if (g.tensors.count("rope_freqs.weight") > 0) {
    Tensor freqs;
    const int64_t before = quant_bytes;
    if (absl::Status s = ReadTensor(g, "rope_freqs.weight", {w.config.head_dim() / 2}, &freqs,
                                    &quant_bytes);
        !s.ok()) {
      return s;
    }
    if (quant_bytes != before) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": rope_freqs.weight must be a float tensor"));
    }
    w.config.rope_scaling.freq_divisors = freqs.data;
    if (absl::Status s = ValidateConfig(w.config, path); !s.ok()) return s;
    used.insert("rope_freqs.weight");
  }
  for (const TensorSlot& slot : ListTensorSlots(w.config)) {
    const std::string name = TensorName(slot);
    const int64_t before = quant_bytes;
    if (absl::Status s = ReadTensor(g, name, slot.shape, &SlotTensor(w, slot), &quant_bytes);
        !s.ok()) {
      return s;
    }
    if (quant_bytes != before) {
      ++quant_tensors;
      quant_values += SlotTensor(w, slot).numel();
    }
    used.insert(name);
  }
  if (quant_tensors > 0) {
    const double mib = 1.0 / (1 << 20);
    ModelLog().info(
        "[mem] {}: dequantized {} quantized tensors at load: {:.1f} MiB in the file -> {:.1f} MiB "
        "as f32 on the host ({:.1f} MiB as bf16 on a GPU)",
        path, quant_tensors, static_cast<double>(quant_bytes) * mib,
        static_cast<double>(quant_values) * 4 * mib, static_cast<double>(quant_values) * 2 * mib);
  }
  for (const auto& [name, info] : g.tensors) {
    if (used.count(name) > 0) continue;
    if (IsBehaviourTensor(name)) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": tensor ", name, " is not implemented for general.architecture ",
          w.config.arch, " (biases / q-k norms are read for qwen2 / qwen3 only)"));
    }
    ModelLog().warn("{}: ignoring unused tensor {}", path, name);
  }
  if (absl::Status s = ValidateWeights(w); !s.ok()) return s;
  if (chat_template_out != nullptr) {
    absl::StatusOr<std::string> t = Meta(g).String("tokenizer.chat_template", std::string());
    if (!t.ok()) return t.status();
    *chat_template_out = *std::move(t);
  }
  if (vocab_out != nullptr || bpe_out != nullptr) {
    const Meta m(g);
    absl::StatusOr<std::string> model = m.String("tokenizer.ggml.model", std::nullopt);
    if (!model.ok()) return model.status();
    if (*model == "gpt2" && bpe_out != nullptr) {
      if (absl::Status s = ReadBpeVocab(g, w.config, bpe_out); !s.ok()) return s;
    } else if (vocab_out != nullptr) {
      if (absl::Status s = ReadVocab(g, w.config, vocab_out); !s.ok()) return s;
    }
  }
  return w;
}

}  // namespace banyan::model
