// Hopper warpgroup MMA (wgmma, sm_90a only) primitives for the TPP phase-1 kernel: shared-memory
// matrix descriptors for 128-byte-swizzled tiles, m64n64k16 with fp32 accumulation (A from
// shared memory or from registers), and the fences that order the asynchronous MMAs.
//
// Shared-memory tile layout (what the descriptors describe): a matrix of R rows x 64 elements
// (128 bytes per row), 1024-byte aligned, in 8-row groups of 1024 bytes; in row r the 16-byte
// vector c sits at vector c ^ (r & 7). A 128-element row (head_dim 128) is two such tiles
// ("halves") one after the other. The same bytes serve K (B operand, K-major: N = token rows,
// K = head_dim) and V (B operand, transposed / N-major: K = token rows, N = head_dim).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace banyan::kernels::cuda::tpp {

// Byte offset of 16-byte vector c (0..7) of row r inside a 128B-swizzled tile.
__device__ __forceinline__ uint32_t Sw128(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// Descriptor of a 128B-swizzled operand starting at shared address `addr`. Its low 14 bits are
// addr / 16, so adding offset / 16 to the descriptor moves the start by `offset` bytes (shared
// addresses stay below 2^18: no carry out of the field). Both byte offsets
// are 1024: the stride between 8-row groups. The other field (the stride between 64-element
// column blocks) is never used, because every operand here is at most 64 elements wide along
// its contiguous dimension; setting both keeps the descriptor right whichever field the
// hardware reads for a given major-ness.
__device__ __forceinline__ uint64_t SwizzledDesc(uint32_t addr) {
  constexpr uint64_t kOffset = 1024 >> 4;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (kOffset << 16) | (kOffset << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (cp.async, st.shared) become visible to wgmma (async
// proxy) after this fence and a barrier.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator reads or writes across a wgmma wait or fence.
__device__ __forceinline__ void FenceRegs(float (&d)[8][4]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

#define BANYAN_WGMMA_D32                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define BANYAN_WGMMA_D32_OPERANDS(d)                                                            \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
      "+f"(d[7][2]), "+f"(d[7][3])

// Accumulator layout of the m64n64 MMAs below (per warp w of the warpgroup, lane l):
// d[i][0..1] = row 16w + l/4, columns 8i + 2(l%4) + 0..1; d[i][2..3] = row 16w + l/4 + 8, same
// columns (the mma.sync m16n8 layout, repeated over i).

// d[64 x 64] (+)= A[64 x 16] B[16 x 64], A in registers (the mma.sync m16k16 A fragment of each
// warp's 16 rows), B K-major in shared memory.
template <typename T>
__device__ __forceinline__ void WgmmaRS(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b_desc,
                                        int accumulate);
template <>
__device__ __forceinline__ void WgmmaRS<__nv_bfloat16>(float (&d)[8][4], const uint32_t (&a)[4],
                                                       uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " BANYAN_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : BANYAN_WGMMA_D32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}
template <>
__device__ __forceinline__ void WgmmaRS<__half>(float (&d)[8][4], const uint32_t (&a)[4],
                                                uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " BANYAN_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : BANYAN_WGMMA_D32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

// d[64 x 64] += A[64 x 16] B[16 x 64], A in registers (the mma.sync m16k16 A fragment of each
// warp's 16 rows), B N-major (transposed) in shared memory.
template <typename T>
__device__ __forceinline__ void WgmmaRSTransB(float (&d)[8][4], const uint32_t (&a)[4],
                                              uint64_t b_desc);
template <>
__device__ __forceinline__ void WgmmaRSTransB<__nv_bfloat16>(float (&d)[8][4],
                                                             const uint32_t (&a)[4],
                                                             uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " BANYAN_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : BANYAN_WGMMA_D32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}
template <>
__device__ __forceinline__ void WgmmaRSTransB<__half>(float (&d)[8][4], const uint32_t (&a)[4],
                                                      uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " BANYAN_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : BANYAN_WGMMA_D32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

#undef BANYAN_WGMMA_D32
#undef BANYAN_WGMMA_D32_OPERANDS

// Resizes this warpgroup's register allocation (every thread of the warpgroup executes it).
template <int REGS, bool INC>
__device__ __forceinline__ void SetMaxRegs() {
  if constexpr (INC) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
  }
}

// Barrier `id` (1..15; 0 is __syncthreads') among `threads` threads (a multiple of 32): one
// warpgroup syncing without the others.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Shared-memory mbarriers (sm_90), for the warp-specialised kernel: a producer warp fills
// pipeline stages, the consumer warpgroups wait on a stage's "full" barrier and release it
// through its "empty" barrier. Phases alternate; waits name the parity of the phase awaited.
__device__ __forceinline__ void MbarInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void MbarWait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(SmemAddr(bar))
      : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed.
__device__ __forceinline__ void CpAsyncMbarArrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(SmemAddr(bar))
               : "memory");
}

}  // namespace banyan::kernels::cuda::tpp
