#include "engine/cuda/decode_graph.h"

#include <algorithm>
#include <chrono>

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

absl::Status DecodeGraphCache::Launch(const DecodeGraphKey& key, cudaStream_t stream,
                                      absl::FunctionRef<absl::Status()> enqueue,
                                      DecodeGraphStats* stats) {
  ++clock_;
  auto same_shape = std::find_if(entries_.begin(), entries_.end(),
                                 [&](const Entry& e) { return e.key.shape == key.shape; });
  if (same_shape == entries_.end() || same_shape->key.params != key.params) {
    const auto t0 = std::chrono::steady_clock::now();
    cudaGraph_t graph = nullptr;
    BANYAN_RETURN_IF_ERROR(Capture(stream, enqueue, &graph));
    bool updated = false;
    if (same_shape != entries_.end()) {
      cudaGraphExecUpdateResultInfo info;
      updated = cudaGraphExecUpdate(same_shape->exec, graph, &info) == cudaSuccess;
      if (!updated) {
        cudaGetLastError();  // a refused update is not sticky
        ++stats->update_refusals;
        cudaGraphExecDestroy(same_shape->exec);
        entries_.erase(same_shape);
        same_shape = entries_.end();
      }
    }
    if (!updated) {
      cudaGraphExec_t exec = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
      if (err != cudaSuccess) {
        cudaGraphDestroy(graph);
        return kernels::cuda::CudaStatus(err, "cudaGraphInstantiate (decode step)");
      }
      if (static_cast<int>(entries_.size()) >= capacity_) {
        auto lru = std::min_element(entries_.begin(), entries_.end(),
                                    [](const Entry& a, const Entry& b) {
                                      return a.last_use < b.last_use;
                                    });
        cudaGraphExecDestroy(lru->exec);
        entries_.erase(lru);
      }
      entries_.push_back(Entry{key, exec, clock_});
      same_shape = entries_.end() - 1;
      ++stats->instantiations;
    } else {
      same_shape->key.params = key.params;
      ++stats->updates;
    }
    cudaGraphDestroy(graph);
    ++stats->captures;
    stats->capture_host_us +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  } else {
    ++stats->replays;
  }
  same_shape->last_use = clock_;
  ++stats->steps;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(same_shape->exec, stream));
  return absl::OkStatus();
}

void DecodeGraphCache::Clear() {
  for (Entry& e : entries_) cudaGraphExecDestroy(e.exec);
  entries_.clear();
}

}  // namespace banyan::engine::cuda
