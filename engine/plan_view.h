// The one conversion from the kvcache AttentionPlan (vectors) to the kernels' PlanView (raw
// int32 pointers). Kernels depend on nothing above them and kvcache on nothing at all, so the
// conversion lives here, header-only, for the backends and the kernel tests.
#pragma once

#include "kernels/paged_views.h"
#include "kvcache/attention_plan.h"

namespace banyan::engine {

inline kernels::PlanView ViewOf(const kvcache::AttentionPlan& p) {
  kernels::PlanView v;
  v.num_rows = p.num_rows();
  v.num_segments = p.num_segments();
  v.num_partials = p.num_partials;
  v.span_chunk = p.span_chunk.data();
  v.span_begin = p.span_begin.data();
  v.span_end = p.span_end.data();
  v.seg_row_begin = p.seg_row_begin.data();
  v.seg_row_end = p.seg_row_end.data();
  v.seg_span_begin = p.seg_span_begin.data();
  v.seg_span_end = p.seg_span_end.data();
  v.seg_partial_offset = p.seg_partial_offset.data();
  v.row_span_begin = p.row_span_begin.data();
  v.row_span_end = p.row_span_end.data();
  v.row_seg_begin = p.row_seg_begin.data();
  v.row_seg_end = p.row_seg_end.data();
  v.row_seg_ids = p.row_seg_ids.data();
  return v;
}

}  // namespace banyan::engine
