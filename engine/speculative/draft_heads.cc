#include "engine/speculative/draft_heads.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace banyan::engine {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("draft heads ", path, ": ", what));
}

// y[out] = W[out, in] x[in] + b[out]
void Affine(const Tensor& w, const Tensor& b, const float* x, float* y) {
  const int64_t out = w.shape[0], in = w.shape[1];
  for (int64_t r = 0; r < out; ++r) {
    const float* row = w.data.data() + r * in;
    double acc = 0;
    for (int64_t c = 0; c < in; ++c) acc += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(acc) + b.data[r];
  }
}

// Indices of the k largest values (ties: lower index first).
std::vector<int32_t> TopK(const std::vector<float>& v, int k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

}  // namespace

absl::StatusOr<DraftHeads> DraftHeads::Load(const std::string& config_path,
                                            const ModelWeights& base) {
  std::ifstream in(config_path);
  if (!in) return absl::NotFoundError(absl::StrCat("draft heads: cannot read ", config_path));
  std::stringstream text;
  text << in.rdbuf();
  json c = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object()) return Bad(config_path, "not a JSON object");
  auto str = [&](const char* key) -> std::string {
    return c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : "";
  };
  if (str("format") != "banyan-draft-heads") {
    return Bad(config_path, "format is not \"banyan-draft-heads\"");
  }
  if (!c.contains("format_version") || c["format_version"] != 1) {
    return Bad(config_path, "format_version must be 1 (this build reads version 1 only)");
  }
  DraftHeads heads(base);
  const std::string kind = str("kind");
  if (kind == "hydra") {
    heads.kind_ = DraftHeadKind::kHydra;
  } else if (kind == "medusa") {
    heads.kind_ = DraftHeadKind::kMedusa;
  } else {
    return Bad(config_path, absl::StrCat("kind '", kind, "' is not hydra or medusa"));
  }
  if (str("dtype") != "F32") return Bad(config_path, "dtype must be F32");
  if (str("activation") != "silu") return Bad(config_path, "activation must be silu");

  // The base model the heads were trained on must have the loaded model's shape.
  const ModelConfig& m = base.config;
  if (!c.contains("base_model") || !c["base_model"].is_object()) {
    return Bad(config_path, "base_model is missing");
  }
  const json& bm = c["base_model"];
  const std::pair<const char*, int64_t> fields[] = {
      {"dim", m.dim},           {"hidden_dim", m.hidden_dim}, {"n_layers", m.n_layers},
      {"n_heads", m.n_heads},   {"n_kv_heads", m.n_kv_heads}, {"vocab_size", m.vocab_size}};
  for (const auto& [key, want] : fields) {
    if (!bm.contains(key) || !bm[key].is_number_integer()) {
      return Bad(config_path, absl::StrCat("base_model.", key, " is missing"));
    }
    if (bm[key].get<int64_t>() != want) {
      return Bad(config_path,
                 absl::StrCat("the heads were trained for base_model.", key, " = ",
                              bm[key].get<int64_t>(), "; the loaded model has ", want));
    }
  }
  if (!bm.contains("tie_embeddings") || bm["tie_embeddings"] != m.tie_embeddings) {
    return Bad(config_path, "base_model.tie_embeddings differs from the loaded model's");
  }
  if (!c.contains("dim") || c["dim"] != m.dim) return Bad(config_path, "dim must equal base dim");
  if (!c.contains("mlp_hidden") || !c["mlp_hidden"].is_number_integer() ||
      c["mlp_hidden"].get<int64_t>() < 1) {
    return Bad(config_path, "mlp_hidden must be a positive integer");
  }
  heads.dim_ = m.dim;
  heads.mlp_hidden_ = c["mlp_hidden"].get<int>();
  if (!c.contains("num_heads") || !c["num_heads"].is_number_integer() ||
      c["num_heads"].get<int64_t>() < 1 || c["num_heads"].get<int64_t>() > 16) {
    return Bad(config_path, "num_heads must be 1..16");
  }
  const int n = c["num_heads"].get<int>();
  if (!c.contains("heads") || !c["heads"].is_array() || static_cast<int>(c["heads"].size()) != n) {
    return Bad(config_path, "heads must list num_heads entries");
  }

  const std::string tensors = str("tensors_file");
  if (tensors.empty() || tensors.find('/') != std::string::npos) {
    return Bad(config_path, "tensors_file must name a file beside the config");
  }
  const std::string tensors_path =
      (std::filesystem::path(config_path).parent_path() / tensors).string();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(tensors_path);
  if (!file.ok()) return file.status();
  for (int i = 0; i < n; ++i) {
    Head h;
    h.input_size = heads.kind_ == DraftHeadKind::kHydra ? (i + 2) * m.dim : m.dim;
    const json& e = c["heads"][i];
    if (!e.is_object() || e.value("index", -1) != i || e.value("input_size", -1) != h.input_size) {
      return Bad(config_path, absl::StrCat("heads[", i, "]: index or input_size is not ", i,
                                           " / ", h.input_size, " for a ", kind, " head"));
    }
    const std::string p = absl::StrCat("heads.", i, ".");
    const std::pair<std::string, std::vector<int64_t>> want[] = {
        {p + "fc1.weight", {heads.mlp_hidden_, h.input_size}},
        {p + "fc1.bias", {heads.mlp_hidden_}},
        {p + "fc2.weight", {m.dim, heads.mlp_hidden_}},
        {p + "fc2.bias", {m.dim}}};
    Tensor* dst[] = {&h.fc1_w, &h.fc1_b, &h.fc2_w, &h.fc2_b};
    for (int k = 0; k < 4; ++k) {
      const auto& [name, shape] = want[k];
      auto it = (*file)->entries().find(name);
      if (it == (*file)->entries().end()) {
        return Bad(tensors_path, absl::StrCat("tensor ", name, " is missing"));
      }
      if (it->second.dtype != "F32" || it->second.shape != shape) {
        return Bad(tensors_path, absl::StrCat("tensor ", name, " is not F32 of the shape the "
                                              "config and base model ask for"));
      }
      if (absl::Status s = (*file)->ReadTensor(name, dst[k]); !s.ok()) return s;
    }
    heads.heads_.push_back(std::move(h));
  }
  return heads;
}

absl::Status DraftHeads::HeadLogits(int i, std::span<const float> h,
                                    std::span<const int32_t> path,
                                    std::vector<float>* logits) const {
  if (i < 0 || i >= num_heads()) return absl::InvalidArgumentError("no such draft head");
  if (static_cast<int>(h.size()) != dim_ || static_cast<int>(path.size()) != i + 1) {
    return absl::InvalidArgumentError("draft head: h must have dim entries and path i + 1");
  }
  const Head& hd = heads_[i];
  std::vector<float> u(h.begin(), h.end());
  if (kind_ == DraftHeadKind::kHydra) {
    for (int32_t tok : path) {
      if (tok < 0 || tok >= base_->config.vocab_size) {
        return absl::InvalidArgumentError("draft head: a path token is outside the vocabulary");
      }
      const float* row = base_->tok_embeddings.data.data() + static_cast<int64_t>(tok) * dim_;
      u.insert(u.end(), row, row + dim_);
    }
  }
  std::vector<float> a(mlp_hidden_), z(dim_);
  Affine(hd.fc1_w, hd.fc1_b, u.data(), a.data());
  for (float& x : a) x = x / (1.0f + std::exp(-x));
  Affine(hd.fc2_w, hd.fc2_b, a.data(), z.data());
  for (int d = 0; d < dim_; ++d) z[d] += h[d];
  const Tensor& out = base_->output_matrix();
  const int64_t vocab = base_->config.vocab_size;
  logits->assign(vocab, 0.0f);
  for (int64_t v = 0; v < vocab; ++v) {
    const float* row = out.data.data() + v * dim_;
    double acc = 0;
    for (int d = 0; d < dim_; ++d) acc += static_cast<double>(row[d]) * z[d];
    (*logits)[v] = static_cast<float>(acc);
  }
  return absl::OkStatus();
}

absl::Status DraftHeads::ChainBatch(std::span<const float> h, std::span<const int32_t> roots,
                                    int length, std::vector<int32_t>* out) const {
  const int64_t S = static_cast<int64_t>(roots.size());
  const int64_t dim = dim_, hidden = mlp_hidden_, vocab = base_->config.vocab_size;
  if (length < 0 || length > num_heads()) {
    return absl::InvalidArgumentError("draft heads: chain longer than the heads");
  }
  if (static_cast<int64_t>(h.size()) != S * dim) {
    return absl::InvalidArgumentError("draft heads: hidden states must be [samples x dim]");
  }
  for (int32_t r : roots) {
    if (r < 0 || r >= vocab) return absl::InvalidArgumentError("draft heads: root outside vocab");
  }
  out->assign(static_cast<size_t>(S * length), -1);
  if (S == 0 || length == 0) return absl::OkStatus();
  std::vector<int32_t> last(roots.begin(), roots.end());
  std::vector<float> u, a(static_cast<size_t>(S * hidden)), z(static_cast<size_t>(S * dim));
  std::vector<float> logits(static_cast<size_t>(S * vocab));
  const float* emb = base_->tok_embeddings.data.data();
  const Tensor& lm = base_->output_matrix();
  for (int i = 0; i < length; ++i) {
    const Head& hd = heads_[i];
    const int64_t in = hd.input_size;
    // u = [h, E[x(t+1)], ..., E[x(t+1+i)]] per sample (Medusa: h only).
    u.resize(static_cast<size_t>(S * in));
    for (int64_t s = 0; s < S; ++s) {
      float* row = u.data() + s * in;
      std::copy_n(h.data() + s * dim, dim, row);
      if (kind_ == DraftHeadKind::kHydra) {
        for (int j = 0; j <= i; ++j) {
          const int32_t tok = j == 0 ? roots[s] : (*out)[s * length + j - 1];
          std::copy_n(emb + static_cast<int64_t>(tok) * dim, dim, row + (j + 1) * dim);
        }
      }
    }
    for (int64_t s = 0; s < S; ++s) std::copy_n(hd.fc1_b.data.data(), hidden, a.data() + s * hidden);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(S),
                static_cast<int>(hidden), static_cast<int>(in), 1.0f, u.data(),
                static_cast<int>(in), hd.fc1_w.data.data(), static_cast<int>(in), 1.0f, a.data(),
                static_cast<int>(hidden));
    for (float& x : a) x = x / (1.0f + std::exp(-x));
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t d = 0; d < dim; ++d) z[s * dim + d] = hd.fc2_b.data[d] + h[s * dim + d];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(S),
                static_cast<int>(dim), static_cast<int>(hidden), 1.0f, a.data(),
                static_cast<int>(hidden), hd.fc2_w.data.data(), static_cast<int>(hidden), 1.0f,
                z.data(), static_cast<int>(dim));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(S),
                static_cast<int>(vocab), static_cast<int>(dim), 1.0f, z.data(),
                static_cast<int>(dim), lm.data.data(), static_cast<int>(dim), 0.0f, logits.data(),
                static_cast<int>(vocab));
    for (int64_t s = 0; s < S; ++s) {
      const float* l = logits.data() + s * vocab;
      (*out)[s * length + i] = static_cast<int32_t>(std::max_element(l, l + vocab) - l);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> DraftHeads::Chain(std::span<const float> h,
                                                       int32_t root) const {
  std::vector<int32_t> path = {root}, chain;
  std::vector<float> logits;
  for (int i = 0; i < num_heads(); ++i) {
    if (absl::Status s = HeadLogits(i, h, path, &logits); !s.ok()) return s;
    const int32_t tok = TopK(logits, 1)[0];
    chain.push_back(tok);
    path.push_back(tok);
  }
  return chain;
}

absl::StatusOr<DraftHeads::Tree> DraftHeads::BuildTree(std::span<const float> h, int32_t root,
                                                       std::span<const int32_t> branching) const {
  Tree t;
  t.token = {root};
  t.parent = {-1};
  t.depth = {0};
  std::vector<float> logits;
  size_t level_begin = 0;
  const int levels = std::min<int>(static_cast<int>(branching.size()), num_heads());
  for (int d = 0; d < levels; ++d) {
    if (branching[d] < 1) return absl::InvalidArgumentError("branching factors must be >= 1");
    const size_t level_end = t.token.size();
    for (size_t node = level_begin; node < level_end; ++node) {
      std::vector<int32_t> path;  // root .. node
      for (int32_t p = static_cast<int32_t>(node); p >= 0; p = t.parent[p]) {
        path.push_back(t.token[p]);
      }
      std::reverse(path.begin(), path.end());
      if (absl::Status s = HeadLogits(d, h, path, &logits); !s.ok()) return s;
      for (int32_t tok : TopK(logits, branching[d])) {
        t.token.push_back(tok);
        t.parent.push_back(static_cast<int32_t>(node));
        t.depth.push_back(d + 1);
      }
    }
    level_begin = level_end;
  }
  return t;
}

absl::StatusOr<std::vector<int32_t>> DraftHeads::ParseBranching(const std::string& text) {
  std::vector<int32_t> b;
  int64_t nodes = 0, level = 1;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t x;
    if (!absl::SimpleAtoi(part, &x) || x < 1 || x > 16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected branching factors in [1, 16] separated by commas, got '", text, "'"));
    }
    b.push_back(x);
    level *= x;
    nodes += level;
  }
  if (b.size() > 8 || nodes > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "at most 8 levels and 256 candidates per tree, got '", text, "' (", nodes, ")"));
  }
  return b;
}

}  // namespace banyan::engine
