// Uploading a DecodeWork for PagedDecodeAttention in one copy: its ten arrays back to back, and
// the kernel's table pointers set into a device copy of them. For tests and benchmarks that call
// the kernel directly (the backend stages its tables with the rest of a step's inputs).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_work.h"

namespace banyan::kernels::cuda {

// The arrays in PagedDecodeParams' order, then one 0 (never empty).
std::vector<int32_t> PackDecodeWork(const DecodeWork& w);

// Points p's tables (and item / merge-row counts) into `device_packed`, a device copy of
// PackDecodeWork(w).
void PointDecodeTables(const DecodeWork& w, const int32_t* device_packed, PagedDecodeParams* p);

}  // namespace banyan::kernels::cuda
