// The FP8 GEMV (kernels/cuda/fp8_gemv.cuh) at decode shapes in several tilings, alone and
// between the small kernels of a decode step, launched plainly or early (programmatic dependent
// launch: a block loads its first weights before it waits). Needs only the CUDA toolkit:
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. bench/fp8_gemv_bench.cu -o fp8_gemv_bench
//   ./fp8_gemv_bench [--rows 1] [--layers 32] [--reps 15] [--hidden 4096] [--inter 14336]
//                    [--kv-dim 1024]
//
// A "step" is --layers layers of four GEMVs (QKV, O, gate/up, down at the Llama 3 8B shapes by
// default), each with its own weights (so nothing stays in the L2 across layers). "with gaps"
// puts between them one-block kernels that spin as long as the step's other kernels take at
// one row on an H100 (the norms, RoPE, attention and SwiGLU of
// results/fp8/h100-2026-12-06-8b-fp8-b1-step-profile.md), which read no memory: what a GEMV
// launched early can overlap. Prints ms per step and the weights' read rate, the median of
// --reps steps, and the rate of a plain streaming read of the same bytes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/fp8_gemv.cuh"

namespace {

namespace kc = banyan::kernels::cuda;
namespace g8 = banyan::kernels::cuda::fp8_gemv;

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,               \
                   cudaGetErrorString(e_));                                        \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

__global__ void Spin(int64_t ns) {
  kc::LaunchDependents();
  kc::GridDependencyWait();
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<int64_t>(now - start) < ns);
}

__global__ void FillBytes(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    // E4M3 codes of magnitude below 1 (exponent field < 7), either sign: no NaN, no overflow.
    p[i] = static_cast<uint8_t>((x & 0x80u) | ((x >> 8) % 0x38u));
  }
}

__global__ void StreamRead(const uint4* p, int64_t n, uint32_t* sink) {
  uint32_t s = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    s ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (s == 0x9e3779b9u) *sink = s;
}

struct Gemv {
  int64_t N, K;
  uint8_t* w;
  float* scales;
};

using KernelFn = void (*)(const g8::Args, __nv_bfloat16*);

struct Variant {
  const char* name;
  KernelFn fn;
  int threads;
};

template <int W, int U>
Variant Make(const char* name) {
  return Variant{name, g8::Kernel<__nv_bfloat16, W, U>, W * 32};
}

// A launch on s, with programmatic dependent launch allowed where `early`.
template <typename... Kernel, typename... Args>
void LaunchOn(cudaStream_t s, bool early, dim3 grid, int threads, void (*kernel)(Kernel...),
              Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = early ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

void Launch(KernelFn fn, int threads, bool early, const Gemv& g, const uint8_t* a,
            const float* a_scales, int M, __nv_bfloat16* out, cudaStream_t s) {
  const g8::Args args{g.w, g.scales, 0, a, a_scales, M, g.N, g.K, 0.0f};
  LaunchOn(s, early, dim3(static_cast<unsigned>((g.N + g8::kRows - 1) / g8::kRows)), threads, fn,
           args, out);
}

void LaunchSpin(int64_t ns, bool early, cudaStream_t s) {
  LaunchOn(s, early, dim3(1), 128, Spin, ns);
}

int64_t Arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int M = static_cast<int>(Arg(argc, argv, "--rows", 1));
  const int layers = static_cast<int>(Arg(argc, argv, "--layers", 32));
  const int reps = static_cast<int>(Arg(argc, argv, "--reps", 15));
  const int64_t H = Arg(argc, argv, "--hidden", 4096), I = Arg(argc, argv, "--inter", 14336),
                KV = Arg(argc, argv, "--kv-dim", 1024);
  if (M < 1 || M > 8 || layers < 1 || reps < 1) {
    std::fprintf(stderr, "rows 1..8, layers and reps at least 1\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs), rows %d, %d layers, hidden %lld, intermediate %lld\n",
              prop.name, prop.multiProcessorCount, M, layers, static_cast<long long>(H),
              static_cast<long long>(I));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Shapes of one layer: QKV, O, gate/up, down.
  const int64_t shape[4][2] = {{H + 2 * KV, H}, {H, H}, {2 * I, H}, {H, I}};
  // Spins after each GEMV (ns): RoPE + attention phase 2 + merge; the norm; SwiGLU; the norm.
  const int64_t gaps[4][3] = {{5000, 17000, 5000}, {8000, 0, 0}, {12000, 0, 0}, {8000, 0, 0}};
  std::vector<Gemv> gemvs;
  int64_t bytes = 0, max_n = 0, max_k = 0;
  for (int l = 0; l < layers; ++l) {
    for (const auto& sh : shape) {
      Gemv g{sh[0], sh[1], nullptr, nullptr};
      CHECK(cudaMalloc(&g.w, g.N * g.K));
      FillBytes<<<1024, 256, 0, s>>>(g.w, g.N * g.K, static_cast<uint32_t>(gemvs.size() * 7919));
      std::vector<float> ones(g.N, 1.0f / 64);
      CHECK(cudaMalloc(&g.scales, g.N * sizeof(float)));
      CHECK(cudaMemcpy(g.scales, ones.data(), g.N * sizeof(float), cudaMemcpyHostToDevice));
      bytes += g.N * g.K;
      max_n = std::max(max_n, g.N);
      max_k = std::max(max_k, g.K);
      gemvs.push_back(g);
    }
  }
  uint8_t* a;
  float* a_scales;
  __nv_bfloat16* out;
  uint32_t* sink;
  CHECK(cudaMalloc(&a, M * max_k));
  FillBytes<<<64, 256, 0, s>>>(a, M * max_k, 12345);
  std::vector<float> ascale(M, 1.0f / 32);
  CHECK(cudaMalloc(&a_scales, M * sizeof(float)));
  CHECK(cudaMemcpy(a_scales, ascale.data(), M * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&out, M * max_n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  CHECK(cudaStreamSynchronize(s));
  std::printf("weights per step: %.2f GB\n", bytes / 1e9);

  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto median_ms = [&](auto&& step) {
    step();  // warm-up
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
      CHECK(cudaEventRecord(e0, s));
      step();
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };

  // The read ceiling: one streaming read of each weight matrix.
  const float read_ms = median_ms([&] {
    for (const Gemv& g : gemvs) {
      StreamRead<<<prop.multiProcessorCount * 8, 512, 0, s>>>(
          reinterpret_cast<const uint4*>(g.w), g.N * g.K / 16, sink);
    }
  });
  std::printf("streaming read of the weights: %.3f ms (%.2f TB/s)\n\n", read_ms,
              bytes / (read_ms * 1e9));
  int64_t gap_ns = 0;
  for (const auto& gp : gaps) gap_ns += gp[0] + gp[1] + gp[2];
  std::printf("gaps per step (no memory traffic): %.3f ms\n\n", gap_ns * layers / 1e6);

  const Variant variants[] = {Make<4, 8>("4 warps x 8"), Make<4, 4>("4 warps x 4"),
                              Make<8, 4>("8 warps x 4"), Make<8, 8>("8 warps x 8"),
                              Make<4, 16>("4 warps x 16")};
  std::printf("| kernel | launch | GEMVs alone ms | TB/s | with gaps ms | "
              "with gaps - gaps ms |\n|---|---|---|---|---|---|\n");
  for (const Variant& v : variants) {
    for (const bool early : {false, true}) {
      const float alone = median_ms([&] {
        for (const Gemv& g : gemvs) Launch(v.fn, v.threads, early, g, a, a_scales, M, out, s);
      });
      const float gapped = median_ms([&] {
        for (size_t i = 0; i < gemvs.size(); ++i) {
          Launch(v.fn, v.threads, early, gemvs[i], a, a_scales, M, out, s);
          for (int64_t ns : gaps[i % 4]) {
            if (ns > 0) LaunchSpin(ns, early, s);
          }
        }
      });
      CHECK(cudaGetLastError());
      std::printf("| %s | %s | %.3f | %.2f | %.3f | %.3f |\n", v.name, early ? "early" : "plain",
                  alone, bytes / (alone * 1e9), gapped, gapped - gap_ns * layers / 1e6);
    }
  }
  CHECK(cudaStreamSynchronize(s));
  return 0;
}
