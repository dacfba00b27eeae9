#include "model/dummy_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "model/weights_layout.h"

namespace banyan::model {
namespace {

struct NamedShape {
  const char* name;
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
  float rope_theta, norm_eps;
  int bos_id, eos_id;
};

constexpr NamedShape kShapes[] = {
    {"llama-2-7b-shape", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f, 1e-5f, 1, 2},
    {"llama-2-13b-shape", 5120, 13824, 40, 40, 40, 32000, 4096, 10000.0f, 1e-5f, 1, 2},
    {"llama-3-8b-shape", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, 1e-5f, 128000, 128001},
    {"llama-3-70b-shape", 8192, 28672, 80, 64, 8, 128256, 8192, 500000.0f, 1e-5f, 128000, 128001},
    {"tiny-d64-gqa4", 64, 176, 2, 8, 2, 512, 512, 10000.0f, 1e-5f, 1, 2},
    {"tiny-d128-mha", 128, 352, 2, 4, 4, 1000, 1024, 10000.0f, 1e-5f, 1, 2},
    {"tiny-d256-hd128", 256, 704, 2, 2, 1, 512, 1024, 10000.0f, 1e-5f, 1, 2},
    {"small-d512-gqa", 512, 1376, 4, 8, 2, 32000, 2048, 10000.0f, 1e-5f, 1, 2},
};

constexpr size_t kChunk = size_t{1} << 20;  // elements per independent random stream

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xd1b54a32d192ed03ull);
  return SplitMix64(s);
}

// Approximately N(0, 1): four 16-bit uniforms from one draw, Irwin-Hall, unit variance.
float ApproxNormal(uint64_t& state) {
  const uint64_t r = SplitMix64(state);
  const float sum =
      static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) +
      2.0f;  // + 4 * 0.5 centres each 16-bit value in its bucket
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (sum - 2.0f * 65536.0f) * kScale;
}

// Runs fn(i) for i in [0, n) over the hardware threads.
void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

}  // namespace

absl::StatusOr<ModelConfig> NamedShapeConfig(absl::string_view name) {
  for (const NamedShape& s : kShapes) {
    if (name != s.name) continue;
    ModelConfig c;
    c.dim = s.dim;
    c.hidden_dim = s.hidden_dim;
    c.n_layers = s.n_layers;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.vocab_size = s.vocab_size;
    c.max_seq_len = s.max_seq_len;
    c.rope_theta = s.rope_theta;
    c.norm_eps = s.norm_eps;
    c.bos_id = s.bos_id;
    c.eos_id = s.eos_id;
    c.tie_embeddings = false;
    c.rope_style = RopeStyle::kHalf;
    return c;
  }
  return absl::NotFoundError(absl::StrCat("unknown model shape \"", name,
                                          "\"; known: ", absl::StrJoin(NamedShapes(), ", ")));
}

std::vector<std::string> NamedShapes() {
  std::vector<std::string> names;
  for (const NamedShape& s : kShapes) names.emplace_back(s.name);
  return names;
}

namespace {

// Allocates and fills the tensors of slots[i] for i in `which`, in parallel.
void FillSlots(ModelWeights& w, const std::vector<TensorSlot>& slots, uint64_t seed,
               const std::vector<size_t>& which) {
  // Allocation touches every page, so it is spread over threads too.
  ParallelFor(which.size(), [&](size_t k) {
    Tensor& t = SlotTensor(w, slots[which[k]]);
    t.shape = slots[which[k]].shape;
    t.data.resize(static_cast<size_t>(t.numel()));
  });

  struct Job {
    size_t slot;
    size_t begin, end;  // element range
  };
  std::vector<Job> jobs;
  for (size_t i : which) {
    const size_t n = SlotTensor(w, slots[i]).data.size();
    for (size_t b = 0; b < n; b += kChunk) jobs.push_back({i, b, std::min(n, b + kChunk)});
  }
  ParallelFor(jobs.size(), [&](size_t j) {
    const Job& job = jobs[j];
    const TensorSlot& slot = slots[job.slot];
    Tensor& t = SlotTensor(w, slot);
    // Stream id from (seed, slot index, chunk index): independent of scheduling.
    uint64_t state = Mix(Mix(seed, job.slot + 1), job.begin / kChunk + 1);
    const bool is_norm = t.shape.size() == 1;
    const float scale = is_norm ? 0.05f : 1.0f / std::sqrt(static_cast<float>(t.shape.back()));
    const float offset = is_norm ? 1.0f : 0.0f;
    for (size_t e = job.begin; e < job.end; ++e) t.data[e] = offset + scale * ApproxNormal(state);
  });
}

}  // namespace

ModelWeights MakeDummyWeights(const ModelConfig& cfg, uint64_t seed, WeightQuantization quant) {
  const absl::Status valid = ValidateConfig(cfg, "MakeDummyWeights");
  BANYAN_CHECK(valid.ok()) << valid.ToString();
  ModelWeights w;
  w.config = cfg;
  w.source = absl::StrCat("dummy:", seed);
  w.layers.resize(static_cast<size_t>(cfg.n_layers));
  const std::vector<TensorSlot> slots = ListTensorSlots(cfg);
  std::vector<size_t> dense, projections;
  for (size_t i = 0; i < slots.size(); ++i) {
    (quant == WeightQuantization::kFp8 && IsProjection(slots[i].kind) ? projections : dense)
        .push_back(i);
  }
  FillSlots(w, slots, seed, dense);
  // FP8: one projection at a time in fp32, quantized and freed before the next.
  for (size_t i : projections) {
    FillSlots(w, slots, seed, {i});
    Tensor& t = SlotTensor(w, slots[i]);
    const absl::Status s = QuantizeFp8PerChannel(t, SlotName(slots[i]), SlotQuantized(w, slots[i]));
    BANYAN_CHECK(s.ok()) << s.ToString();  // dummy values are finite by construction
    t = Tensor{};
  }
  return w;
}

}  // namespace banyan::model
