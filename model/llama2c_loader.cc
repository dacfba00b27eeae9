#include "model/llama2c_loader.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/mapped_file.h"
#include "model/weights_layout.h"

namespace banyan::model {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);
// llama2.c's versioned exports (version >= 1) start with this magic ("ak42").
constexpr uint32_t kVersionedMagic = 0x616b3432;

// Copies `count` consecutive fp32 values from r into t (shape given), advancing r.
absl::Status ReadInto(ByteReader& r, Tensor& t, std::vector<int64_t> shape,
                      const std::string& what) {
  t.shape = std::move(shape);
  const size_t n = static_cast<size_t>(t.numel());
  absl::StatusOr<absl::string_view> bytes = r.Bytes(n * sizeof(float), what);
  if (!bytes.ok()) return bytes.status();
  t.data.resize(n);
  std::memcpy(t.data.data(), bytes->data(), n * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadLlama2c(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const MappedFile& f = **file;
  if (f.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": truncated llama2.c checkpoint: file has ",
                                            f.size(), " bytes, the header alone needs ",
                                            kHeaderBytes));
  }
  int32_t h[7];
  std::memcpy(h, f.data(), kHeaderBytes);
  if (static_cast<uint32_t>(h[0]) == kVersionedMagic) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": llama2.c versioned export (magic 'ak42', version ", h[1],
                     ") is not supported; export with --version 0 (legacy format)"));
  }

  ModelWeights w;
  w.source = path;
  ModelConfig& c = w.config;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tie_embeddings = h[5] > 0;
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
  c.max_seq_len = h[6];
  c.rope_style = RopeStyle::kInterleaved;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  c.bos_id = 1;
  c.eos_id = 2;
  if (absl::Status s = ValidateConfig(c, path); !s.ok()) return s;

  // Sizes in floats; ValidateConfig's limits keep these far below int64 overflow.
  const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, vocab = c.vocab_size;
  const int64_t head_dim = c.head_dim(), kv_dim = int64_t{c.n_kv_heads} * head_dim;
  const int64_t freq_floats = int64_t{c.max_seq_len} * head_dim;  // real + imag halves
  const int64_t floats = vocab * dim +
                         layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) +
                         dim + freq_floats + (c.tie_embeddings ? 0 : vocab * dim);
  const int64_t expected_bytes = static_cast<int64_t>(kHeaderBytes) + floats * 4;
  if (static_cast<int64_t>(f.size()) != expected_bytes) {
    return absl::DataLossError(absl::StrCat(
        path, ": llama2.c file size mismatch: ",
        static_cast<int64_t>(f.size()) < expected_bytes ? "truncated" : "trailing bytes",
        ": expected ", expected_bytes, " bytes for header (dim=", c.dim,
        ", hidden_dim=", c.hidden_dim, ", n_layers=", c.n_layers, ", n_heads=", c.n_heads,
        ", n_kv_heads=", c.n_kv_heads, ", vocab_size=", h[5], ", seq_len=", c.max_seq_len,
        "), file has ", f.size()));
  }

  ByteReader r(f.data(), f.size(), path);
  if (absl::Status s = r.Skip(kHeaderBytes, "header"); !s.ok()) return s;
  w.layers.resize(static_cast<size_t>(layers));

  if (absl::Status s = ReadInto(r, w.tok_embeddings, {vocab, dim}, "token_embedding_table");
      !s.ok()) {
    return s;
  }
  // Per-layer arrays are stored kind-major: all layers' rms_att, then all layers' wq, ...
  struct Array {
    const char* name;
    Tensor LayerWeights::*member;
    std::vector<int64_t> shape;
  };
  const Array arrays[] = {
      {"rms_att_weight", &LayerWeights::attn_norm, {dim}},
      {"wq", &LayerWeights::wq, {dim, dim}},
      {"wk", &LayerWeights::wk, {kv_dim, dim}},
      {"wv", &LayerWeights::wv, {kv_dim, dim}},
      {"wo", &LayerWeights::wo, {dim, dim}},
      {"rms_ffn_weight", &LayerWeights::ffn_norm, {dim}},
      {"w1", &LayerWeights::w_gate, {hidden, dim}},
      {"w2", &LayerWeights::w_down, {dim, hidden}},
      {"w3", &LayerWeights::w_up, {hidden, dim}},
  };
  for (const Array& a : arrays) {
    for (int64_t l = 0; l < layers; ++l) {
      if (absl::Status s =
              ReadInto(r, w.layers[l].*a.member, a.shape, absl::StrCat(a.name, "[", l, "]"));
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s = ReadInto(r, w.final_norm, {dim}, "rms_final_weight"); !s.ok()) return s;
  if (absl::Status s = r.Skip(static_cast<size_t>(freq_floats) * 4, "freq_cis"); !s.ok()) {
    return s;
  }
  if (!c.tie_embeddings) {
    if (absl::Status s = ReadInto(r, w.lm_head, {vocab, dim}, "wcls"); !s.ok()) return s;
  }
  if (absl::Status s = ValidateWeights(w); !s.ok()) return s;
  return w;
}

}  // namespace banyan::model
