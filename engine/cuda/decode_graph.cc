#include "engine/cuda/decode_graph.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace banyan::engine::cuda {

absl::Status DecodeGraphCache::Capture(cudaStream_t stream,
                                       absl::FunctionRef<absl::Status()> enqueue,
                                       cudaGraph_t* graph) {
  BANYAN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  // End the capture whatever happened, so the stream is usable again.
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &g);
  if (!enqueued.ok() || ended != cudaSuccess) {
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();  // an invalidated capture's error is not sticky; clear it
    if (!enqueued.ok()) return enqueued;
    return kernels::cuda::CudaStatus(ended, "cudaStreamEndCapture (decode step)");
  }
  *graph = g;
  return absl::OkStatus();
}

absl::Status DecodeGraphCache::Build(bool early, cudaStream_t stream,
                                     absl::FunctionRef<absl::Status()> enqueue, Entry& e,
                                     int* early_edges) {
  *early_edges = 0;
  cudaGraph_t graph = nullptr;
  BANYAN_RETURN_IF_ERROR(Capture(stream, enqueue, &graph));
  // The template's kernel nodes: node updates name them (kept with the executable), and early
  // launch picks its nodes among them. Changing edges keeps the nodes.
  std::vector<kernels::cuda::KernelNode> nodes;
  if (!kernels::cuda::ListKernelNodes(graph, &nodes).ok()) {
    cudaGetLastError();
    nodes.clear();  // updates then fail their node count and capture instead
  }
  absl::Status early_status = absl::OkStatus();
  if (early) early_status = kernels::cuda::LaunchEarly(graph, nodes, early_kernels_, early_edges);
  cudaError_t err = cudaErrorUnknown;
  if (early_status.ok()) err = cudaGraphInstantiate(&e.exec, graph, 0);
  if (!early_status.ok() || (err != cudaSuccess && *early_edges > 0)) {
    // Refused with early edges (the graph may also have lost one): the step again as captured,
    // and no early launch from now on.
    cudaGetLastError();
    early_error_ = !early_status.ok()
                       ? std::string(early_status.message())
                       : std::string(kernels::cuda::CudaStatus(
                                         err, "cudaGraphInstantiate with launch-early edges")
                                         .message());
    early_kernels_.clear();
    e.exec = nullptr;
    cudaGraphDestroy(graph);
    return Build(false, stream, enqueue, e, early_edges);
  }
  if (err != cudaSuccess) {
    e.exec = nullptr;
    cudaGraphDestroy(graph);
    return kernels::cuda::CudaStatus(err, "cudaGraphInstantiate (decode step)");
  }
  e.graph = graph;  // kept: node updates name its nodes
  e.kernels = std::move(nodes);
  return absl::OkStatus();
}

void DecodeGraphCache::Destroy(Entry& e) {
  if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  if (e.graph != nullptr) cudaGraphDestroy(e.graph);
  e.exec = nullptr;
  e.graph = nullptr;
}

absl::Status DecodeGraphCache::Launch(const DecodeGraphKey& key, cudaStream_t stream,
                                      absl::FunctionRef<absl::Status()> enqueue, Update update,
                                      DecodeGraphStats* stats, bool* launched) {
  *launched = false;
  ++clock_;
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.shape == key.shape; });
  if (it == entries_.end()) {
    if (static_cast<int>(entries_.size()) >= capacity_) {
      auto lru = std::min_element(entries_.begin(), entries_.end(),
                                  [](const Entry& a, const Entry& b) {
                                    return a.last_use < b.last_use;
                                  });
      Destroy(*lru);
      entries_.erase(lru);
    }
    entries_.emplace_back();
    it = entries_.end() - 1;
    it->shape = key.shape;
  }
  Entry& e = *it;
  e.last_use = clock_;
  if (e.seen_params == key.params) {
    ++e.seen;
  } else {
    e.seen_params = key.params;
    e.seen = 1;
  }
  bool ready = e.exec != nullptr && e.exec_params == key.params;
  if (ready && e.exec_patch != key.patch) {
    const auto t0 = std::chrono::steady_clock::now();
    int nodes = 0;
    const absl::Status updated = update(e.kernels, e.exec, &nodes);
    if (updated.ok()) {
      e.exec_patch = key.patch;
      ++stats->patches;
      stats->patched_nodes += nodes;
      stats->patch_host_us +=
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
              .count();
    } else {
      cudaGetLastError();  // capture below instead; a refused node update is not sticky
      ++stats->patch_failures;
      update_error_ = std::string(updated.message());
      ready = false;
      e.seen = min_stable_steps_;
    }
  }
  if (ready) {
    ++stats->replays;
  } else {
    if (e.seen < min_stable_steps_) {
      ++stats->unstable;
      return absl::OkStatus();
    }
    const auto t0 = std::chrono::steady_clock::now();
    // A fresh executable, never cudaGraphExecUpdate: node updates (`update`) must name nodes of
    // the graph the executable was instantiated from (see the header).
    Destroy(e);
    BANYAN_RETURN_IF_ERROR(
        Build(key.early_launch && !early_kernels_.empty(), stream, enqueue, e, &e.early_edges));
    e.exec_params = key.params;
    e.exec_patch = key.patch;
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    ++stats->captures;
    stats->capture_host_us += us;
  }
  ++stats->steps;
  const auto t0 = std::chrono::steady_clock::now();
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(e.exec, stream));
  stats->launch_call_us +=
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  stats->kernel_nodes = static_cast<int64_t>(e.kernels.size());
  stats->early_edges = e.early_edges;
  *launched = true;
  return absl::OkStatus();
}

void DecodeGraphCache::Clear() {
  for (Entry& e : entries_) Destroy(e);
  entries_.clear();
}

}  // namespace banyan::engine::cuda
