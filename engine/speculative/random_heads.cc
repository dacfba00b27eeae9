#include "engine/speculative/random_heads.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace banyan::engine {

namespace {

void FillUniform(std::mt19937& rng, float scale, model::Tensor* t) {
  t->data.resize(static_cast<size_t>(t->numel()));
  for (float& x : t->data) x = scale * (static_cast<float>(rng() >> 8) * 0x1p-23f - 1.0f);
}

}  // namespace

// A random Hydra head set for `base` in `dir`: config.json and heads.safetensors (docs/hydra.md,
// "File format"; the tensors through the model writer's WriteSafetensors). Matrices have
// variance 1 / fan-in, biases are small. Returns the config's path.
absl::StatusOr<std::string> WriteRandomHydraHeads(const model::ModelWeights& base, const std::string& dir,
                                                  int num_heads, int mlp_hidden, uint32_t seed) {
  const model::ModelConfig& c = base.config;
  std::mt19937 rng(seed);
  std::vector<model::Tensor> tensors(4 * static_cast<size_t>(num_heads));
  std::vector<model::SafetensorsItem> items;
  nlohmann::ordered_json heads = nlohmann::ordered_json::array();
  for (int i = 0; i < num_heads; ++i) {
    const int input_size = (i + 2) * c.dim;
    const std::string p = absl::StrCat("heads.", i, ".");
    const struct {
      std::string name;
      std::vector<int64_t> shape;
      float scale;
    } specs[] = {{p + "fc1.weight", {mlp_hidden, input_size}, std::sqrt(3.0f / input_size)},
                 {p + "fc1.bias", {mlp_hidden}, 0.1f},
                 {p + "fc2.weight", {c.dim, mlp_hidden}, std::sqrt(3.0f / mlp_hidden)},
                 {p + "fc2.bias", {c.dim}, 0.1f}};
    nlohmann::ordered_json shapes;
    nlohmann::ordered_json inputs = {"hidden"};
    for (int k = 0; k <= i; ++k) inputs.push_back(absl::StrCat("embed(x[t+", k + 1, "])"));
    for (int k = 0; k < 4; ++k) {
      model::Tensor& t = tensors[4 * static_cast<size_t>(i) + k];
      t.shape = specs[k].shape;
      FillUniform(rng, specs[k].scale, &t);
      items.push_back({specs[k].name, &t, nullptr});
      shapes[specs[k].name] = specs[k].shape;
    }
    heads.push_back({{"index", i},
                     {"predicts", absl::StrCat("x[t+", i + 2, "]")},
                     {"inputs", inputs},
                     {"input_size", input_size},
                     {"tensors", shapes}});
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (absl::Status s =
          model::WriteSafetensors(dir + "/heads.safetensors", items, model::WeightDtype::kF32);
      !s.ok()) {
    return s;
  }
  const nlohmann::ordered_json config = {
      {"format", "banyan-draft-heads"},
      {"format_version", 1},
      {"kind", "hydra"},
      {"tensors_file", "heads.safetensors"},
      {"dtype", "F32"},
      {"base_model",
       {{"dim", c.dim},
        {"hidden_dim", c.hidden_dim},
        {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"vocab_size", c.vocab_size},
        {"max_seq_len", c.max_seq_len},
        {"tie_embeddings", c.tie_embeddings},
        {"head_dim", c.head_dim()},
        {"norm_eps", c.norm_eps},
        {"rope_theta", c.rope_theta},
        {"rope_style", c.rope_style == model::RopeStyle::kInterleaved ? "interleaved" : "half"},
        {"bos_id", c.bos_id},
        {"eos_id", c.eos_id},
        {"file", base.source}}},
      {"num_heads", num_heads},
      {"dim", c.dim},
      {"mlp_hidden", mlp_hidden},
      {"activation", "silu"},
      {"hidden_state", "final_norm_output"},
      {"embedding", "base_tok_embeddings"},
      {"output_projection", "base_lm_head"},
      {"residual", "hidden"},
      {"heads", heads},
      {"training", {{"command", "random weights (WriteRandomHydraHeads)"}, {"seed", seed}}}};
  const std::string path = dir + "/config.json";
  std::ofstream out(path, std::ios::trunc);
  out << config.dump(2) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return path;
}

}  // namespace banyan::engine
