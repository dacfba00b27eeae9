// DecodeGraphCache: CUDA graphs of the CUDA backend's decode step, captured once per launch
// shape and replayed.
//
// Contract with the caller (CudaBackend):
//  - Everything the captured launches read that changes from step to step (token ids,
//    positions, KV slots, attention work tables, the TPP image) lives in device buffers whose
//    addresses are part of the key, and the caller copies the step's contents into them on the
//    same stream *before* Launch. The graph itself holds no host-to-device copies.
//  - The key has three parts. `shape` picks the cached executable: rows, logit rows, the
//    attention path, fed rows or not. `params` is what a launch bakes in that only a capture can change:
//    buffer addresses, the attention's launch signature (which kernels, launched how). `patch`
//    is the attention's work partition (which TPP plan build):
//    what the caller's `update` moves in the executable's kernel nodes without a capture
//    (kernels/cuda/graph_update.h). When shape and params equal a cached executable's, Launch
//    replays it, calling `update` first when the patch differs. Serving changes the partition
//    whenever rows cross chunk boundaries at different steps or the row set changes; those steps
//    stay on the graph.
//  - A key not cached yet is captured only once it has been asked for `min_stable_steps` times
//    in a row (per shape); before that Launch returns false and the caller runs the step
//    eagerly. A capture costs several eager steps' worth of host time, so a key that lasts one
//    step (rows that start new chunks at every step) is never captured.
//  - Captured again with the same `shape`, the executable is instantiated again from the new
//    capture (not cudaGraphExecUpdate'd: node updates must name nodes of the graph an
//    executable was instantiated from, and after an exec update the kept template is not that
//    graph, so every later node update was refused; docs/gpu.md, "CUDA graphs"). A new `shape`
//    is instantiated, evicting the least recently used shape beyond `capacity`.
//  - `enqueue` must only enqueue work on the stream (and on streams it forks from it by events):
//    no allocation, no synchronization, no host reads of device results. Capture runs in
//    cudaStreamCaptureModeThreadLocal, so an unsafe call on this thread fails the capture instead
//    of being recorded.
//
// Not thread-safe; one instance per stream (the backend's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "kernels/cuda/graph_update.h"

namespace banyan::engine::cuda {

// Counters of the graph path (CudaAttentionStats::graph).
struct DecodeGraphStats {
  int64_t steps = 0;           // decode steps that ran through a graph
  int64_t replays = 0;         // of which replayed a cached executable as it was
  int64_t captures = 0;        // of which captured the step first (replays + captures = steps)
  double capture_host_us = 0;  // summed host time of capture + instantiate
  int64_t unstable = 0;  // decode steps run eagerly: their key was not stable long enough yet
  int64_t fallbacks = 0;       // graph failures: the step ran eagerly and graphs were turned off
  int64_t patches = 0;         // replays whose attention nodes were updated first (no capture)
  int64_t patched_nodes = 0;   // kernel nodes those updates changed
  double patch_host_us = 0;    // summed host time of the updates
  int64_t patch_failures = 0;  // updates that failed (the step was captured instead)
  double launch_call_us = 0;   // summed host time of the cudaGraphLaunch calls (not only an
                               // enqueue: it grows with the step's device time; docs/gpu.md,
                               // "Running on a GPU machine")
  int64_t kernel_nodes = 0;    // kernel nodes of the last executable launched
  int64_t early_edges = 0;     // of its edges, those made launch-early (SetEarlyLaunch)

  DecodeGraphStats& operator+=(const DecodeGraphStats& o) {
    steps += o.steps;
    replays += o.replays;
    captures += o.captures;
    capture_host_us += o.capture_host_us;
    unstable += o.unstable;
    fallbacks += o.fallbacks;
    patches += o.patches;
    patched_nodes += o.patched_nodes;
    patch_host_us += o.patch_host_us;
    patch_failures += o.patch_failures;
    launch_call_us += o.launch_call_us;
    kernel_nodes = o.kernel_nodes;
    early_edges = o.early_edges;
    return *this;
  }
};

struct DecodeGraphKey {
  std::vector<int64_t> shape;
  std::vector<int64_t> params;
  std::vector<int64_t> patch;
  // A capture of this key launches the SetEarlyLaunch kernels early. Part of the choice of the
  // shape: give the same value for equal shapes.
  bool early_launch = true;
};

class DecodeGraphCache {
 public:
  explicit DecodeGraphCache(int capacity = 8, int min_stable_steps = 2)
      : capacity_(capacity), min_stable_steps_(min_stable_steps) {}
  ~DecodeGraphCache() { Clear(); }
  DecodeGraphCache(const DecodeGraphCache&) = delete;
  DecodeGraphCache& operator=(const DecodeGraphCache&) = delete;

  // Updates the attention nodes of `exec` to this step's partition; `kernels`: the kernel nodes
  // of its template (kernels::cuda::ListKernelNodes, listed once per capture); *nodes: how many
  // it changed.
  using Update = absl::FunctionRef<absl::Status(
      const std::vector<kernels::cuda::KernelNode>& kernels, cudaGraphExec_t exec, int* nodes)>;
  // Replays the executable cached for `key`, updated by `update` when only key.patch differs,
  // or captured from `enqueue` on `stream` first when the key is new but stable (see above);
  // *launched = false when the caller must run the step itself. A failed update captures
  // instead. On an error the stream is left out of capture and nothing of this step was
  // launched.
  absl::Status Launch(const DecodeGraphKey& key, cudaStream_t stream,
                      absl::FunctionRef<absl::Status()> enqueue, Update update,
                      DecodeGraphStats* stats, bool* launched);

  // Kernels (host stubs) that wait for their predecessor on the device (griddepcontrol.wait):
  // each capture of a key with early_launch from now on launches them early
  // (kernels::cuda::LaunchEarly). If the driver refuses the edges or an executable with them,
  // that capture is taken again as it was and early launch stays off (early_error()).
  void SetEarlyLaunch(std::vector<const void*> kernels) { early_kernels_ = std::move(kernels); }
  const std::string& early_error() const { return early_error_; }
  // Destroys every cached executable.
  void Clear();
  // Why the last failed attention-node update failed (empty if none did).
  const std::string& update_error() const { return update_error_; }
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    std::vector<int64_t> shape;
    cudaGraph_t graph = nullptr;       // the template `exec` was made from (its node handles)
    cudaGraphExec_t exec = nullptr;    // null until the first capture of this shape
    std::vector<int64_t> exec_params;  // the params `exec` was captured with
    std::vector<int64_t> exec_patch;   // the patch it holds now
    std::vector<kernels::cuda::KernelNode> kernels;  // of `graph`, for updates
    std::vector<int64_t> seen_params;  // the params asked for last, and how many times in a row
    int seen = 0;
    uint64_t last_use = 0;
    int early_edges = 0;  // launch-early edges of `graph`
  };
  static void Destroy(Entry& e);
  // Captures `enqueue` and instantiates it into e.graph / e.exec / e.kernels (e destroyed
  // before), launching early where `early` says. If the driver refuses the early edges, at the
  // edge or at instantiation, it captures again without them and stops launching early.
  // *early_edges: edges launched early in the result.
  absl::Status Build(bool early, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue,
                     Entry& e, int* early_edges);
  // Captures `enqueue` into *graph.
  static absl::Status Capture(cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue,
                              cudaGraph_t* graph);

  int capacity_;
  int min_stable_steps_;
  std::string update_error_;
  std::vector<const void*> early_kernels_;
  std::string early_error_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace banyan::engine::cuda
