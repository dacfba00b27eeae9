#include <cmath>

#include "model/dummy_weights.h"
#include "model/model_io.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "gtest/gtest.h"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

TEST(DummyWeights, DeterministicForASeedAndValid) {
  for (const char* name : {"tiny-d64-gqa4", "tiny-d128-mha", "tiny-d256-hd128"}) {
    absl::StatusOr<ModelConfig> c = NamedShapeConfig(name);
    ASSERT_TRUE(c.ok()) << c.status();
    const ModelWeights a = MakeDummyWeights(*c, 42);
    const ModelWeights b = MakeDummyWeights(*c, 42);
    const ModelWeights d = MakeDummyWeights(*c, 43);
    ASSERT_TRUE(ValidateWeights(a).ok()) << ValidateWeights(a);
    testing::ExpectSameWeights(a, b);
    EXPECT_NE(a.layers[0].wq.data, d.layers[0].wq.data);
    EXPECT_NE(a.tok_embeddings.data, d.tok_embeddings.data);
    // Different tensors of one model are not copies of each other.
    EXPECT_NE(a.layers[0].w_gate.data, a.layers[0].w_up.data);
  }
}

TEST(DummyWeights, Statistics) {
  absl::StatusOr<ModelConfig> c = NamedShapeConfig("small-d512-gqa");
  ASSERT_TRUE(c.ok());
  const ModelWeights w = MakeDummyWeights(*c, 7);
  ASSERT_TRUE(ValidateWeights(w).ok());
  auto moments = [](const Tensor& t) {
    double s = 0, s2 = 0;
    for (float x : t.data) {
      s += x;
      s2 += double{x} * x;
    }
    const double n = static_cast<double>(t.data.size());
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  auto [m, sd] = moments(w.layers[1].w_down);  // [512, 1376]: std 1/sqrt(1376)
  EXPECT_NEAR(m, 0.0, 1e-3);
  EXPECT_NEAR(sd, 1.0 / std::sqrt(1376.0), 0.02 / std::sqrt(1376.0));
  auto [nm, nsd] = moments(w.layers[1].attn_norm);
  EXPECT_NEAR(nm, 1.0, 0.02);
  EXPECT_NEAR(nsd, 0.05, 0.01);
  for (float x : w.final_norm.data) EXPECT_GT(x, 0.5f);
  EXPECT_TRUE(w.lm_head.data.size() == w.tok_embeddings.data.size());
}

TEST(NamedShapes, RealModelSizes) {
  absl::StatusOr<ModelConfig> c = NamedShapeConfig("llama-2-7b-shape");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dim, 4096);
  EXPECT_EQ(c->hidden_dim, 11008);
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->n_kv_heads, 32);
  EXPECT_EQ(c->max_seq_len, 4096);
  c = NamedShapeConfig("llama-2-13b-shape");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dim, 5120);
  EXPECT_EQ(c->hidden_dim, 13824);
  EXPECT_EQ(c->n_layers, 40);
  EXPECT_EQ(c->n_heads, 40);
  c = NamedShapeConfig("llama-3-8b-shape");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->hidden_dim, 14336);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->max_seq_len, 8192);
  for (const std::string& name : NamedShapes()) {
    absl::StatusOr<ModelConfig> k = NamedShapeConfig(name);
    ASSERT_TRUE(k.ok());
    EXPECT_TRUE(ValidateConfig(*k, name).ok()) << name;
  }
  const absl::Status s = NamedShapeConfig("llama-9-shape").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("llama-2-7b-shape"), absl::string_view::npos);
}

TEST(DummyWeights, WritesAndReloadsAsHf) {
  absl::StatusOr<ModelConfig> c = NamedShapeConfig("tiny-d64-gqa4");
  const ModelWeights w = MakeDummyWeights(*c, 3);
  testing::TempDir dir;
  ASSERT_TRUE(WriteHfFolder(w, dir.path()).ok());
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
  testing::ExpectSameWeights(*h, w);  // kHalf already: written as is
}

}  // namespace
}  // namespace banyan::model
