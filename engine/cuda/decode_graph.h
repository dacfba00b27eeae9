// DecodeGraphCache: CUDA graphs of the CUDA backend's decode step, captured once per launch
// shape and replayed.
//
// Contract with the caller (CudaBackend):
//  - Everything the captured launches read that changes from step to step (token ids,
//    positions, KV slots, attention work tables, the TPP image) lives in device buffers whose
//    addresses are part of the key, and the caller copies the step's contents into them on the
//    same stream *before* Launch. The graph itself holds no host-to-device copies.
//  - The key has two parts. `shape` picks the cached executable: rows, logit rows, greedy or
//    not, the attention path. `params` is everything else a launch bakes in: buffer addresses,
//    grid sizes, offsets of the tables inside their buffers, the TPP plan's geometry. When both
//    equal a cached entry's, Launch replays it (no capture). When only `params` differ, the step
//    is captured again and cudaGraphExecUpdate patches the executable in place; if the update is
//    refused (the new capture has another topology, e.g. cuBLAS picked a different kernel
//    sequence, or the TPP schedule switched between fused and deferred merge) the executable is
//    instantiated again. A new `shape` is captured and instantiated, evicting the least recently
//    used entry beyond `capacity`.
//  - `enqueue` must only enqueue work on the stream (and on streams it forks from it by events):
//    no allocation, no synchronization, no host reads of device results. Capture runs in
//    cudaStreamCaptureModeThreadLocal, so an unsafe call on this thread fails the capture instead
//    of being recorded.
//
// Not thread-safe; one instance per stream (the backend's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace banyan::engine::cuda {

// Counters of the graph path (CudaAttentionStats::graph).
struct DecodeGraphStats {
  int64_t steps = 0;           // decode steps that ran through a graph
  int64_t replays = 0;         // of which replayed a cached executable as it was
  int64_t captures = 0;        // of which captured the step first (replays + captures = steps)
  int64_t updates = 0;         // captures applied to a cached executable by cudaGraphExecUpdate
  int64_t instantiations = 0;  // captures instantiated (new shape, or the update was refused)
  int64_t update_refusals = 0; // of the instantiations: cudaGraphExecUpdate was tried and refused
  double capture_host_us = 0;  // summed host time of capture + update / instantiate
  int64_t fallbacks = 0;       // graph failures: the step ran eagerly and graphs were turned off
};

struct DecodeGraphKey {
  std::vector<int64_t> shape;
  std::vector<int64_t> params;
};

class DecodeGraphCache {
 public:
  explicit DecodeGraphCache(int capacity = 8) : capacity_(capacity) {}
  ~DecodeGraphCache() { Clear(); }
  DecodeGraphCache(const DecodeGraphCache&) = delete;
  DecodeGraphCache& operator=(const DecodeGraphCache&) = delete;

  // Replays the executable cached for `key`, capturing `enqueue` on `stream` first when there is
  // none. On an error the stream is left out of capture and nothing of this step was launched.
  absl::Status Launch(const DecodeGraphKey& key, cudaStream_t stream,
                      absl::FunctionRef<absl::Status()> enqueue, DecodeGraphStats* stats);

  // Destroys every cached executable.
  void Clear();
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    DecodeGraphKey key;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  // Captures `enqueue` into *graph.
  static absl::Status Capture(cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue,
                              cudaGraph_t* graph);

  int capacity_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace banyan::engine::cuda
