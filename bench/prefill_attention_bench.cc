// prefill_attention_bench: the prefill attention kernels alone (kernels/cuda/prefill/attention.h)
// on one prompt of L new tokens over the paged KV store, against the floor of their FLOPs at
// this GPU's dense bf16 rate.
//
//   prefill_attention_bench [--lengths 2048,8192,16384,32768] [--step-tokens 8192]
//                           [--q-heads 32] [--kv-heads 8] [--head-dim 128] [--chunk-size 64]
//                           [--reps 10] [--kv-fp8]
//
// The prompt is prefilled in steps of --step-tokens new tokens (banyand's --prefill-budget; 0:
// the whole prompt in one step), each step's tokens attending causally to the prompt up to
// themselves, as the served path runs it. Each kernel (tiles of 64 rows on mma.sync; of 128 on
// wgmma where the device runs it) runs every step of the prompt `reps` times after a warm-up;
// the time is the median over reps of the sum over steps. FLOPs: 2 * head_dim * L * (L + 1) per
// query head (QK^T and PV over the causal pairs), the count bench/prefill_ceiling.cc uses; the
// floor is those FLOPs at the rate of a square 8192 cuBLAS GEMM measured in the same run
// (bench/gemm_ceiling.h). Random bf16 queries and keys (N(0, 1)); one layer's KV, bf16 or, with
// --kv-fp8, an FP8 cache (kernels/kv_fp8.h) of about N(0, 1) values.
// Output: one Markdown table with, per length, the relative norm of the difference between the
// two kernels' outputs (each is checked against the CPU reference by gpu_kernels_test).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/gemm_ceiling.h"
#include "bench/tpp/bench_fill.h"
#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/prefill/attention_work.h"
#include "kernels/kv_fp8.h"

namespace banyan {
namespace {

namespace kc = kernels::cuda;

#define CHECK_CUDA(x)                                                              \
  do {                                                                             \
    const cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

struct Options {
  std::vector<int> lengths = {2048, 8192, 16384, 32768};
  int step_tokens = 8192, q_heads = 32, kv_heads = 8, head_dim = 128, chunk_size = 64, reps = 10;
  bool kv_fp8 = false;
};

int IntArg(const char* name, const char* v) {
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < 0) {
    std::fprintf(stderr, "%s: not a count: %s\n", name, v);
    std::exit(2);
  }
  return x;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--kv-fp8") {
      o.kv_fp8 = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--lengths") {
      o.lengths.clear();
      for (const auto part : absl::StrSplit(v, ',')) o.lengths.push_back(IntArg("--lengths", std::string(part).c_str()));
    } else if (a == "--step-tokens") {
      o.step_tokens = IntArg("--step-tokens", v);
    } else if (a == "--q-heads") {
      o.q_heads = IntArg("--q-heads", v);
    } else if (a == "--kv-heads") {
      o.kv_heads = IntArg("--kv-heads", v);
    } else if (a == "--head-dim") {
      o.head_dim = IntArg("--head-dim", v);
    } else if (a == "--chunk-size") {
      o.chunk_size = IntArg("--chunk-size", v);
    } else if (a == "--reps") {
      o.reps = std::max(1, IntArg("--reps", v));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// One step's work list, uploaded: the prompt's spans (whole chunks, in order) and the step's
// tokens [pos0, pos0 + num_q).
struct StepWork {
  std::vector<int32_t*> owned;
  kc::PrefillParams p;
  int32_t* Up(const std::vector<int32_t>& v) {
    int32_t* d = nullptr;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(v.size(), 1) * sizeof(int32_t)));
    if (!v.empty()) CHECK_CUDA(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    owned.push_back(d);
    return d;
  }
  StepWork(const Options& o, const kc::KvViewDev& kv, int len, int pos0, int num_q, int rows,
           const void* q, void* out) {
    std::vector<int32_t> chunk, begin, end;
    for (int c = 0; c * o.chunk_size < len; ++c) {
      chunk.push_back(c);
      begin.push_back(0);
      end.push_back(std::min(o.chunk_size, len - c * o.chunk_size));
    }
    const std::vector<kc::PrefillSeq> seqs = {kc::PrefillSeq{chunk, begin, end, pos0, num_q, 0}};
    kc::PrefillWork w;
    kc::BuildPrefillWork(seqs, o.q_heads / o.kv_heads, rows, &w);
    p.q = q;
    p.out = out;
    p.kv = kv;
    p.span_chunk = Up(w.span_chunk);
    p.span_begin = Up(w.span_begin);
    p.span_end = Up(w.span_end);
    p.span_pos = Up(w.span_pos);
    p.seq_span_begin = Up(w.seq_span_begin);
    p.seq_span_end = Up(w.seq_span_end);
    p.seq_pos0 = Up(w.seq_pos0);
    p.seq_num_q = Up(w.seq_num_q);
    p.seq_q_row = Up(w.seq_q_row);
    p.tile_seq = Up(w.tile_seq);
    p.tile_m0 = Up(w.tile_m0);
    p.token_seq = Up(w.token_seq);
    p.num_tiles = w.num_tiles();
    p.block_m = w.block_m;
    p.num_tokens = w.num_tokens;
    p.q_row_begin = 0;
    p.num_q_heads = o.q_heads;
    p.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
  }
  ~StepWork() {
    for (int32_t* d : owned) cudaFree(d);
  }
};

float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  if (o.kv_heads <= 0 || o.q_heads % o.kv_heads != 0) {
    std::fprintf(stderr, "--q-heads must be a multiple of --kv-heads\n");
    return 2;
  }
  auto dense = bench::MeasureDenseGemmFlops();
  if (!dense.ok()) {
    std::fprintf(stderr, "dense GEMM rate: %s\n", std::string(dense.status().message()).c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int max_len = *std::max_element(o.lengths.begin(), o.lengths.end());
  const int64_t chunks = (max_len + o.chunk_size - 1) / o.chunk_size;
  kc::KvViewDev kv;
  kv.chunk_size = o.chunk_size;
  kv.num_kv_heads = o.kv_heads;
  kv.head_dim = o.head_dim;
  kv.v_offset = int64_t{o.kv_heads} * o.chunk_size * o.head_dim;
  kv.chunk_stride = 2 * kv.v_offset;
  if (o.kv_fp8) {
    const kernels::KvFp8Layout l = kernels::KvFp8LayoutOf(o.kv_heads, o.chunk_size, o.head_dim);
    kv.v_offset = l.v_offset;
    kv.chunk_stride = l.chunk_stride;
    kv.scale_offset = l.scale_offset;
  }
  const size_t kv_elems = static_cast<size_t>(chunks * kv.chunk_stride);
  const size_t q_elems = static_cast<size_t>(max_len) * o.q_heads * o.head_dim;
  void *kv_base = nullptr, *q = nullptr, *out64 = nullptr, *out128 = nullptr;
  CHECK_CUDA(cudaMalloc(&kv_base, kv_elems * (o.kv_fp8 ? 1 : 2)));
  CHECK_CUDA(cudaMalloc(&q, q_elems * 2));
  CHECK_CUDA(cudaMalloc(&out64, q_elems * 2));
  CHECK_CUDA(cudaMalloc(&out128, q_elems * 2));
  if (o.kv_fp8) {
    CHECK_CUDA(bench::FillRandomKvFp8(kv_base, chunks, kv.chunk_stride, kv.scale_offset, 1, nullptr));
  } else {
    CHECK_CUDA(bench::FillRandomBf16(kv_base, kv_elems, 1.0f, 1, nullptr));
  }
  CHECK_CUDA(bench::FillRandomBf16(q, q_elems, 1.0f, 2, nullptr));
  kv.base = kv_base;
  const int wide = kc::PrefillTileRows(kv);

  std::printf("prefill attention alone, %s, %d q / %d kv heads, head_dim %d, chunk %d, steps of %d "
              "tokens, bf16, %s cache; dense GEMM rate %.0f TFLOP/s (cuBLAS, 8192^3)\n\n",
              prop.name, o.q_heads, o.kv_heads, o.head_dim, o.chunk_size, o.step_tokens,
              o.kv_fp8 ? "FP8" : "bf16", *dense / 1e12);
  std::printf("| tokens | floor ms | mma.sync ms | TFLOP/s | of floor | wgmma ms | TFLOP/s | of floor "
              "| wgmma / mma.sync | outputs differ by |\n|---|---|---|---|---|---|---|---|---|---|\n");
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (const int len : o.lengths) {
    const int step = o.step_tokens > 0 ? o.step_tokens : len;
    const double flops = 2.0 * o.head_dim * double(len) * (len + 1) * o.q_heads;
    const double floor_ms = flops / *dense * 1e3;
    double ms[2] = {0, 0};
    for (int k = 0; k < (wide == kc::kPrefillBlockM ? 1 : 2); ++k) {
      const int rows = k == 0 ? kc::kPrefillBlockM : wide;
      void* out = k == 0 ? out64 : out128;
      std::vector<StepWork*> steps;
      for (int pos0 = 0; pos0 < len; pos0 += step) {
        const int n = std::min(step, len - pos0);
        const size_t row_elems = size_t{1} * o.q_heads * o.head_dim;
        steps.push_back(new StepWork(o, kv, pos0 + n, pos0, n, rows,
                                     static_cast<const uint16_t*>(q) + pos0 * row_elems,
                                     static_cast<uint16_t*>(out) + pos0 * row_elems));
      }
      std::vector<float> times;
      for (int r = -1; r < o.reps; ++r) {
        CHECK_CUDA(cudaEventRecord(e0));
        for (StepWork* s : steps) {
          const absl::Status st = kc::PrefillAttention(kc::DType::kBf16, s->p, nullptr);
          if (!st.ok()) {
            std::fprintf(stderr, "PrefillAttention: %s\n", std::string(st.message()).c_str());
            return 1;
          }
        }
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 0) times.push_back(t);
      }
      std::sort(times.begin(), times.end());
      ms[k] = times[times.size() / 2];
      for (StepWork* s : steps) delete s;
    }
    double diff = 0;
    if (ms[1] > 0) {
      const size_t n = size_t{1} * len * o.q_heads * o.head_dim;
      std::vector<uint16_t> a(n), b(n);
      CHECK_CUDA(cudaMemcpy(a.data(), out64, n * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(b.data(), out128, n * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (size_t i = 0; i < n; ++i) {
        const double x = Bf16ToFloat(a[i]), y = Bf16ToFloat(b[i]);
        num += (x - y) * (x - y);
        den += x * x;
      }
      diff = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    }
    auto tflops = [&](double t) { return t > 0 ? flops / (t * 1e-3) / 1e12 : 0.0; };
    std::printf("| %d | %.2f | %.2f | %.0f | %.2f |", len, floor_ms, ms[0], tflops(ms[0]),
                floor_ms / ms[0]);
    if (ms[1] > 0) {
      std::printf(" %.2f | %.0f | %.2f | %.2fx | %.1e |\n", ms[1], tflops(ms[1]), floor_ms / ms[1],
                  ms[0] / ms[1], diff);
    } else {
      std::printf(" - | - | - | - | - |\n");
    }
  }
  return 0;
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) { return banyan::Main(argc, argv); }
