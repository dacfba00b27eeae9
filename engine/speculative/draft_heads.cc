#include "engine/speculative/draft_heads.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json_limits.h"
#include "model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace banyan::engine {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("draft heads ", path, ": ", what));
}

// y[out] = W[out, in] x[in] + b[out]
void Affine(const model::Tensor& w, const model::Tensor& b, const float* x, float* y) {
  const int64_t out = w.shape[0], in = w.shape[1];
  for (int64_t r = 0; r < out; ++r) {
    const float* row = w.data.data() + r * in;
    double acc = 0;
    for (int64_t c = 0; c < in; ++c) acc += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(acc) + b.data[r];
  }
}

// Indices of the k largest values (ties: lower index first).
// The k largest values' ids, largest first, lower id first on ties; NaN never ranks.
std::vector<int32_t> TopK(std::span<const float> v, int k) {
  k = std::min<int>(k, static_cast<int>(v.size()));
  auto before = [&](int32_t a, int32_t b) {
    const float x = std::isnan(v[a]) ? -INFINITY : v[a], y = std::isnan(v[b]) ? -INFINITY : v[b];
    return x > y || (x == y && a < b);
  };
  std::vector<int32_t> top;  // kept sorted by `before`; k is small
  top.reserve(static_cast<size_t>(k) + 1);
  for (int32_t i = 0; i < static_cast<int32_t>(v.size()); ++i) {
    if (static_cast<int>(top.size()) == k && !before(i, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), i, before), i);
    if (static_cast<int>(top.size()) > k) top.pop_back();
  }
  return top;
}

}  // namespace

absl::StatusOr<DraftHeads> DraftHeads::Load(const std::string& config_path,
                                            const model::ModelWeights& base) {
  absl::StatusOr<json> parsed = ReadJsonFile(config_path);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat("draft heads: ", parsed.status().message()));
  }
  const json& c = *parsed;
  if (!c.is_object()) return Bad(config_path, "not a JSON object");
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
  static std::atomic<uint64_t> next_id{1};
  heads.id_ = next_id.fetch_add(1);
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
  const model::ModelConfig& m = base.config;
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
  absl::StatusOr<std::unique_ptr<model::SafetensorsFile>> file = model::SafetensorsFile::Open(tensors_path);
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
    model::Tensor* dst[] = {&h.fc1_w, &h.fc1_b, &h.fc2_w, &h.fc2_b};
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
  const model::Tensor& out = base_->output_matrix();
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
  if (length < 0 || length > num_heads()) {
    return absl::InvalidArgumentError("draft heads: chain longer than the heads");
  }
  // A chain is the tree with one child per node: its nodes are in chain order.
  std::vector<Tree> trees;
  const std::vector<int32_t> ones(static_cast<size_t>(length), 1);
  if (absl::Status st = TreeBatch(h, roots, ones, &trees); !st.ok()) return st;
  out->assign(roots.size() * static_cast<size_t>(length), -1);
  for (size_t s = 0; s < trees.size(); ++s) {
    for (int i = 0; i < length; ++i) (*out)[s * length + i] = trees[s].token[i + 1];
  }
  return absl::OkStatus();
}

absl::Status DraftHeads::TreeBatch(std::span<const float> h, std::span<const int32_t> roots,
                                   std::span<const int32_t> branching,
                                   std::vector<Tree>* out) const {
  const int64_t S = static_cast<int64_t>(roots.size());
  const int64_t dim = dim_, hidden = mlp_hidden_, vocab = base_->config.vocab_size;
  if (static_cast<int64_t>(h.size()) != S * dim) {
    return absl::InvalidArgumentError("draft heads: hidden states must be [samples x dim]");
  }
  for (int32_t r : roots) {
    if (r < 0 || r >= vocab) return absl::InvalidArgumentError("draft heads: root outside vocab");
  }
  for (int32_t b : branching) {
    if (b < 1) return absl::InvalidArgumentError("branching factors must be >= 1");
  }
  out->assign(static_cast<size_t>(S), Tree{});
  for (int64_t s = 0; s < S; ++s) (*out)[s] = Tree{{roots[s]}, {-1}, {0}};
  const int levels = std::min<int>(static_cast<int>(branching.size()), num_heads());
  // The nodes whose children the next head drafts: (sample, node).
  std::vector<std::pair<int32_t, int32_t>> level, next;
  for (int64_t s = 0; s < S; ++s) level.emplace_back(static_cast<int32_t>(s), 0);
  constexpr int64_t kBlock = 256;  // rows per GEMM block (bounds the logits buffer)
  std::vector<float> u, a, z, logits;
  std::vector<int32_t> path;
  const float* emb = base_->tok_embeddings.data.data();
  const model::Tensor& lm = base_->output_matrix();
  for (int d = 0; d < levels; ++d) {
    const Head& hd = heads_[d];
    const int64_t in = hd.input_size;
    next.clear();
    for (int64_t r0 = 0; r0 < static_cast<int64_t>(level.size()); r0 += kBlock) {
      const int64_t R = std::min<int64_t>(kBlock, static_cast<int64_t>(level.size()) - r0);
      // u = [h, E[root], ..., E[node]] per row (Medusa: h only).
      u.resize(static_cast<size_t>(R * in));
      z.resize(static_cast<size_t>(R * dim));
      a.resize(static_cast<size_t>(R * hidden));
      logits.resize(static_cast<size_t>(R * vocab));
      for (int64_t r = 0; r < R; ++r) {
        const auto [s, node] = level[r0 + r];
        const Tree& t = (*out)[s];
        const float* hs = h.data() + s * dim;
        float* row = u.data() + r * in;
        std::copy_n(hs, dim, row);
        if (kind_ == DraftHeadKind::kHydra) {
          path.clear();
          for (int32_t n = node; n >= 0; n = t.parent[n]) path.push_back(t.token[n]);
          for (size_t j = 0; j < path.size(); ++j) {
            std::copy_n(emb + static_cast<int64_t>(path[path.size() - 1 - j]) * dim, dim,
                        row + static_cast<int64_t>(j + 1) * dim);
          }
        }
        std::copy_n(hd.fc1_b.data.data(), hidden, a.data() + r * hidden);
        for (int64_t x = 0; x < dim; ++x) z[r * dim + x] = hd.fc2_b.data[x] + hs[x];
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R),
                  static_cast<int>(hidden), static_cast<int>(in), 1.0f, u.data(),
                  static_cast<int>(in), hd.fc1_w.data.data(), static_cast<int>(in), 1.0f, a.data(),
                  static_cast<int>(hidden));
      for (float& x : a) x = x / (1.0f + std::exp(-x));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R),
                  static_cast<int>(dim), static_cast<int>(hidden), 1.0f, a.data(),
                  static_cast<int>(hidden), hd.fc2_w.data.data(), static_cast<int>(hidden), 1.0f,
                  z.data(), static_cast<int>(dim));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R),
                  static_cast<int>(vocab), static_cast<int>(dim), 1.0f, z.data(),
                  static_cast<int>(dim), lm.data.data(), static_cast<int>(dim), 0.0f,
                  logits.data(), static_cast<int>(vocab));
      for (int64_t r = 0; r < R; ++r) {
        const auto [s, node] = level[r0 + r];
        Tree& t = (*out)[s];
        const float* l = logits.data() + r * vocab;
        for (int32_t tok : TopK(std::span<const float>(l, static_cast<size_t>(vocab)),
                                branching[d])) {
          t.token.push_back(tok);
          t.parent.push_back(node);
          t.depth.push_back(d + 1);
          next.emplace_back(s, static_cast<int32_t>(t.token.size()) - 1);
        }
      }
    }
    std::swap(level, next);
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
