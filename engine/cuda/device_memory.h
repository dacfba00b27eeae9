// Owning handles for device and pinned host memory, and a staging area that packs the int32
// arrays of one step into a single host-to-device copy.
//
// Growth reallocates and loses the contents (a pinned buffer can keep a prefix); callers grow a
// buffer only when no work in flight uses it (the backend synchronizes at the end of every step).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace banyan::engine::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Ensures at least `bytes` of capacity; `what` names the buffer in the error.
  absl::Status Reserve(int64_t bytes, const char* what) {
    if (bytes <= capacity_) return absl::OkStatus();
    Release();
    const int64_t want = (bytes + (int64_t{1} << 20) - 1) & ~((int64_t{1} << 20) - 1);
    const cudaError_t err = cudaMalloc(&ptr_, static_cast<size_t>(want));
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();  // clear the sticky-free allocation error
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return absl::ResourceExhaustedError(absl::StrCat(
          "GPU out of memory allocating ", want >> 20, " MiB for ", what, " (", free_b >> 20,
          " MiB free of ", total_b >> 20, " MiB)"));
    }
    capacity_ = want;
    return absl::OkStatus();
  }
  void Release() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t capacity() const { return capacity_; }

 private:
  void* ptr_ = nullptr;
  int64_t capacity_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // At least `bytes`; a larger buffer, when one is needed, keeps the first `keep` bytes.
  absl::Status Reserve(int64_t bytes, const char* what, int64_t keep = 0) {
    if (bytes <= capacity_) return absl::OkStatus();
    const int64_t want = std::max<int64_t>(bytes + bytes / 2, 4096);
    void* grown = nullptr;
    const cudaError_t err = cudaMallocHost(&grown, static_cast<size_t>(want));
    if (err != cudaSuccess) return kernels::cuda::CudaStatus(err, what);
    if (keep > 0 && ptr_ != nullptr) {
      std::memcpy(grown, ptr_, static_cast<size_t>(std::min(keep, capacity_)));
    }
    Release();
    ptr_ = grown;
    capacity_ = want;
    return absl::OkStatus();
  }
  void Release() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  int64_t capacity_ = 0;
};

// Packs int32 arrays on the host, uploads them with one copy, and hands out device pointers.
class StagedInts {
 public:
  void Clear() { host_.clear(); }
  // Appends `v`; returns its element offset. Offsets are 4-element aligned.
  int64_t Add(std::span<const int32_t> v) {
    const int64_t off = static_cast<int64_t>(host_.size());
    host_.insert(host_.end(), v.begin(), v.end());
    host_.resize((host_.size() + 3) & ~size_t{3}, 0);
    return off;
  }
  // Appends `v` into a region of `capacity` >= v.size() elements (zero-filled beyond v), so the
  // offsets of what follows depend only on the capacities.
  int64_t Add(std::span<const int32_t> v, int64_t capacity) {
    const int64_t off = Add(v);
    host_.resize(static_cast<size_t>(off) + ((static_cast<size_t>(capacity) + 3) & ~size_t{3}), 0);
    return off;
  }
  absl::Status Upload(cudaStream_t stream, const char* what) {
    const int64_t bytes = static_cast<int64_t>(host_.size() * sizeof(int32_t));
    if (bytes == 0) return absl::OkStatus();
    if (absl::Status s = pinned_.Reserve(bytes, what); !s.ok()) return s;
    if (absl::Status s = device_.Reserve(bytes, what); !s.ok()) return s;
    std::memcpy(pinned_.get(), host_.data(), static_cast<size_t>(bytes));
    return kernels::cuda::CudaStatus(
        cudaMemcpyAsync(device_.get(), pinned_.get(), static_cast<size_t>(bytes),
                        cudaMemcpyHostToDevice, stream),
        what);
  }
  // Valid after Upload, until the next Upload.
  const int32_t* Dev(int64_t offset) const { return device_.as<int32_t>() + offset; }

 private:
  std::vector<int32_t> host_;
  PinnedBuffer pinned_;
  DeviceBuffer device_;
};

}  // namespace banyan::engine::cuda
