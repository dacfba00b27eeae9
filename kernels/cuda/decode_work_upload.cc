#include "kernels/cuda/decode_work_upload.h"

#include <array>

namespace banyan::kernels::cuda {
namespace {

std::array<const std::vector<int32_t>*, 10> Arrays(const DecodeWork& w) {
  return {&w.span_chunk,      &w.span_begin,      &w.span_end,     &w.item_row,
          &w.item_span_begin, &w.item_span_end,   &w.item_partial, &w.merge_row,
          &w.merge_partial_begin, &w.merge_count};
}

}  // namespace

std::vector<int32_t> PackDecodeWork(const DecodeWork& w) {
  std::vector<int32_t> flat;
  for (const std::vector<int32_t>* a : Arrays(w)) flat.insert(flat.end(), a->begin(), a->end());
  flat.push_back(0);
  return flat;
}

void PointDecodeTables(const DecodeWork& w, const int32_t* device_packed, PagedDecodeParams* p) {
  const int32_t* at = device_packed;
  const int32_t** tables[] = {&p->span_chunk,      &p->span_begin,      &p->span_end,
                              &p->item_row,        &p->item_span_begin, &p->item_span_end,
                              &p->item_partial,    &p->merge_row,       &p->merge_partial_begin,
                              &p->merge_count};
  const auto arrays = Arrays(w);
  for (size_t i = 0; i < arrays.size(); ++i) {
    *tables[i] = at;
    at += arrays[i]->size();
  }
  p->num_items = w.num_items();
  p->num_merge_rows = w.num_merge_rows();
}

}  // namespace banyan::kernels::cuda
