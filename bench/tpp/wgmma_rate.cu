// wgmma_rate: the issue rate of Hopper's warpgroup MMAs on resident shared-memory tiles, by
// shape (m64nNk16, N = 64 / 128 / 256), A operand (registers "RS" or shared memory "SS") and
// warpgroups per SM. Nothing but MMAs runs: each warpgroup issues batches of 16 MMAs into one
// accumulator (commit, wait), so the figures are what the tensor cores sustain for that shape
// with no loads, softmax or barriers in the way. Phase 1 (kernels/cuda/tpp/phase1_wgmma.cuh)
// issues m64n64k16 RS MMAs; this program says how far that shape alone can go.
//
// Output: one markdown table; TFLOP/s counts 2 * 64 * N * 16 per MMA. "flop/clk/SM" divides by
// the SM count and the clock the CTAs measured (clock64 against the global timer), so it is
// independent of the clock the power limit allows; Hopper's dense bf16 peak is 4,096.
//
// Build: bench/tpp/CMakeLists.txt (sm_90a). Run: wgmma_rate [--ms 200]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                                               \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kMmasPerBatch = 16;

#define WR_D32                                                                 \
  "{"                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
  "%31"                                                                        \
  "}"
#define WR_D64                                                                       \
  "{"                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
  "}"
#define WR_D128                                                                            \
  "{"                                                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "       \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "       \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "       \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "       \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "       \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, " \
  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "    \
  "%125, %126, %127"                                                                       \
  "}"

#define F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define F16(i) F4(i), F4(i + 4), F4(i + 8), F4(i + 12)
#define F32(i) F16(i), F16(i + 16)
#define F64(i) F32(i), F32(i + 32)
#define F128(i) F64(i), F64(i + 64)

// Shared-memory operand descriptor: 128-byte swizzle, 1,024 bytes between 8-row groups (the
// layout of kernels/cuda/tpp/wgmma.cuh).
__device__ __forceinline__ uint64_t Desc(const void* p) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  constexpr uint64_t kOffset = 1024 >> 4;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (kOffset << 16) | (kOffset << 32) |
         (uint64_t{1} << 62);
}

// One m64nNk16 bf16 MMA with fp32 accumulation; A from registers (RS) or shared memory (SS).
// D_REGS / D_OPS: the accumulator operand list and its constraints; A_RS / A_SS: the A and B
// operands' placeholders, numbered after the accumulators.
template <int N, bool RS>
struct Mma;
#define BANYAN_RATE_MMA(N, D_REGS, D_OPS, A_RS, A_SS)                                           \
  template <>                                                                                 \
  struct Mma<N, true> {                                                                       \
    __device__ static void Run(float* d, const uint32_t* a, uint64_t, uint64_t b) {           \
      asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " D_REGS ", " A_RS \
                   ", 1, 1, 1, 0;\n"                                                          \
                   : D_OPS                                                                    \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                     \
    }                                                                                         \
  };                                                                                          \
  template <>                                                                                 \
  struct Mma<N, false> {                                                                      \
    __device__ static void Run(float* d, const uint32_t*, uint64_t a, uint64_t b) {           \
      asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " D_REGS ", " A_SS \
                   ", 1, 1, 1, 0, 0;\n"                                                       \
                   : D_OPS                                                                    \
                   : "l"(a), "l"(b));                                                         \
    }                                                                                         \
  };
BANYAN_RATE_MMA(64, WR_D32, F32(0), "{%32, %33, %34, %35}, %36", "%32, %33")
BANYAN_RATE_MMA(128, WR_D64, F64(0), "{%64, %65, %66, %67}, %68", "%64, %65")
BANYAN_RATE_MMA(256, WR_D128, F128(0), "{%128, %129, %130, %131}, %132", "%128, %129")
#undef BANYAN_RATE_MMA

// Shared memory: A (64 rows x 64 elements, 8 KB) then B (N rows x 64 elements), 1,024-aligned.
template <int N>
constexpr int SmemBytes() {
  return 64 * 128 + N * 128 + 1024;
}

// Four warpgroups at most; three where the N = 256 accumulators (128 registers) need more than a
// 512-thread CTA can have.
template <int N>
constexpr int MaxThreads() {
  return N == 256 ? 384 : 512;
}

template <int N, bool RS>
__global__ void __launch_bounds__(MaxThreads<N>()) RateKernel(int batches, float* sink,
                                                  unsigned long long* ticks) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  // Random bf16 in [-1, 1): toggling bits cost the power that real data costs.
  uint32_t state = 0x9E3779B9u * (threadIdx.x + 1) + blockIdx.x;
  auto* words = reinterpret_cast<uint32_t*>(smem);
  for (int i = threadIdx.x; i < (64 * 128 + N * 128) / 4; i += blockDim.x) {
    uint32_t w = 0;
    for (int h = 0; h < 2; ++h) {
      state = state * 1664525u + 1013904223u;
      const float f = static_cast<float>(static_cast<int>(state >> 9) - (1 << 22)) / (1 << 22);
      w |= static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16(f))) << (16 * h);
    }
    words[i] = w;
  }
  uint32_t a_regs[4];
  for (int i = 0; i < 4; ++i) a_regs[i] = words[(threadIdx.x * 4 + i) % 2048];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const uint64_t a_desc = Desc(smem);
  const uint64_t b_desc = Desc(smem + 64 * 128);

  unsigned long long t0 = 0, c0 = 0;
  if (threadIdx.x == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    c0 = clock64();
  }
  for (int b = 0; b < batches; ++b) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int k = 0; k < kMmasPerBatch; ++k) {
      // The four k16 steps of a 64-element row: +32 bytes, +2 in the descriptor.
      const uint64_t step = static_cast<uint64_t>(2 * (k % 4));
      Mma<N, RS>::Run(d, a_regs, a_desc + step, b_desc + step);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    const unsigned long long c1 = clock64();
    ticks[2 * blockIdx.x] = c1 - c0;
    ticks[2 * blockIdx.x + 1] = t1 - t0;
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += d[i];
  if (s == 12345.0f) sink[blockIdx.x] = s;  // never true for this data; keeps the MMAs live
}

struct Result {
  bool ok = false;
  double tflops = 0, mhz = 0, per_clk_sm = 0;
};

template <int N, bool RS>
Result Measure(int warpgroups, int sms, double target_ms) {
  auto kernel = RateKernel<N, RS>;
  const int smem = SmemBytes<N>();
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int blocks_per_sm = 0;
  Result r;
  if (warpgroups * 128 > MaxThreads<N>()) return r;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel,
                                                           warpgroups * 128, smem));
  if (blocks_per_sm < 1) return r;
  float* sink;
  unsigned long long* ticks;
  CHECK_CUDA(cudaMalloc(&sink, sms * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&ticks, 2 * sms * sizeof(unsigned long long)));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  auto run = [&](int batches) {
    CHECK_CUDA(cudaEventRecord(e0));
    kernel<<<sms, warpgroups * 128, smem>>>(batches, sink, ticks);
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaGetLastError());
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms);
  };
  // Calibrate the batch count for about target_ms, then time three runs and keep the best.
  int batches = 256;
  const double probe = run(batches);
  batches = std::max(256, static_cast<int>(batches * target_ms / std::max(probe, 1e-3)));
  double best = 1e30;
  for (int i = 0; i < 3; ++i) best = std::min(best, run(batches));
  std::vector<unsigned long long> h(2 * sms);
  CHECK_CUDA(cudaMemcpy(h.data(), ticks, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  double clk = 0, ns = 0;
  for (int i = 0; i < sms; ++i) {
    clk += static_cast<double>(h[2 * i]);
    ns += static_cast<double>(h[2 * i + 1]);
  }
  const double flops = 2.0 * 64 * N * 16 * kMmasPerBatch * static_cast<double>(batches) *
                       warpgroups * sms;
  r.ok = true;
  r.tflops = flops / (best * 1e-3) / 1e12;
  r.mhz = clk / ns * 1e3;
  r.per_clk_sm = flops / (best * 1e-3) / (r.mhz * 1e6) / sms;
  CHECK_CUDA(cudaFree(sink));
  CHECK_CUDA(cudaFree(ticks));
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return r;
}

template <int N, bool RS>
void Row(int warpgroups, int sms, double target_ms) {
  const Result r = Measure<N, RS>(warpgroups, sms, target_ms);
  if (!r.ok) {
    std::printf("| m64n%dk16 | %s | %d | does not fit | | |\n", N, RS ? "RS" : "SS", warpgroups);
    return;
  }
  std::printf("| m64n%dk16 | %s | %d | %.0f | %.0f | %.0f (%.0f %%) |\n", N, RS ? "RS" : "SS",
              warpgroups, r.tflops, r.mhz, r.per_clk_sm, 100.0 * r.per_clk_sm / 4096.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  double target_ms = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      target_ms = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: wgmma_rate [--ms MILLISECONDS_PER_RUN]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    std::fprintf(stderr, "wgmma_rate needs compute capability 9.x (found %d.%d)\n", prop.major,
                 prop.minor);
    return 1;
  }
  std::printf("device: %s, %d SMs; one CTA per SM, %d MMAs per commit\n\n", prop.name,
              prop.multiProcessorCount, kMmasPerBatch);
  std::printf("| shape | A | warpgroups / SM | TFLOP/s | SM MHz | flop/clk/SM (of 4,096) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const int sms = prop.multiProcessorCount;
  for (int wg : {1, 2, 3, 4}) {
    Row<64, true>(wg, sms, target_ms);
    Row<64, false>(wg, sms, target_ms);
    Row<128, true>(wg, sms, target_ms);
    Row<128, false>(wg, sms, target_ms);
    Row<256, true>(wg, sms, target_ms);
    Row<256, false>(wg, sms, target_ms);
  }
  return 0;
}
