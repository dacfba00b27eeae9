// TPP phase 2 for head dims without a compiled family (tpp_d<HEAD_DIM>_*.cu): any multiple of 8
// up to kMaxGenericHeadDim, e.g. the bundled model's 8. One warp per (phase-2 item, q head), four
// warps per CTA over the q heads (grid: items x ceil(q heads / 4)), GenericAttendWarp over the
// item's spans. Plans for such head dims have no phase-1 items (TppWorkPlan::Build reads every
// row's segments in phase 2), so a final item writes the output and any other one its partial
// state, which TppMergeKernel<0, ..> finishes.
#pragma once

#include <cstdint>

#include "kernels/cuda/prefill/generic_attention.cuh"
#include "kernels/cuda/tpp/phase2.cuh"

namespace banyan::kernels::cuda::tpp {

inline constexpr int kTppGenericWarps = 4;  // q heads per CTA

template <typename DType, bool KV8 = false>
__global__ void __launch_bounds__(kTppGenericWarps * 32)
    TppPhase2GenericKernel(const __grid_constant__ TppParams p) {
  LaunchDependents();  // the merge kernel, where it follows with PDL
  __shared__ float q_s[kTppGenericWarps][kMaxGenericHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int item = blockIdx.x, qh = blockIdx.y * kTppGenericWarps + warp;
  const int hq = p.num_q_heads, d = p.kv.head_dim;
  if (qh >= hq) return;
  const TppTables& t = p.t;
  const int row = t.p2_row[item];
  const int state = t.p2_state[item];
  LoadQueryWarp(static_cast<const DType*>(p.q) + (static_cast<int64_t>(row) * hq + qh) * d, d,
                p.scale_log2, q_s[warp]);
  float o[kMaxGenericHeadDim / 32], m, l;
  GenericAttendWarp<DType, KV8>(q_s[warp], p.kv, qh / p.group, t.span_chunk, t.span_begin, t.span_end,
                           t.p2_span_lo[item], t.p2_span_hi[item], INT64_MAX, o, m, l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no context: zeros, an empty state
#pragma unroll
  for (int i = 0; i < kMaxGenericHeadDim / 32; ++i) {
    const int x = lane + 32 * i;
    if (x >= d) continue;
    if (state < 0) {
      static_cast<DType*>(p.out)[(static_cast<int64_t>(row) * hq + qh) * d + x] =
          FromFloat<DType>(o[i] * inv);
    } else {
      p.partial_o[(static_cast<int64_t>(state) * hq + qh) * d + x] = o[i] * inv;
    }
  }
  if (state >= 0 && lane == 0) {
    p.partial_lse[static_cast<int64_t>(state) * hq + qh] = l > 0.0f ? m + log2f(l) : kNegInf;
  }
}

}  // namespace banyan::kernels::cuda::tpp
