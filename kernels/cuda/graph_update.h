// Moving a captured attention launch to new work without capturing the step again.
//
// A decode step's CUDA graph (engine/cuda/decode_graph.h) bakes each attention kernel's grid and
// by-value parameter struct into its nodes. When only the work partition changes (a new TPP
// plan of the same launch structure), the same kernels run
// with other grids and other table pointers: the kernel library describes that change as
// KernelNodeUpdates, and ApplyKernelNodeUpdates writes it into every matching node of the
// executable (cudaGraphExecKernelNodeSetParams), keeping whatever differs per layer (the KV
// view) from the captured parameters.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace banyan::kernels::cuda {

struct KernelNodeUpdate {
  const void* func = nullptr;  // the kernel (its host stub) whose nodes change
  dim3 grid;
  size_t param_bytes = 0;  // the size of the kernel's single by-value parameter struct
  // Rewrites the captured parameter struct (a copy of param_bytes bytes) for the new work.
  std::function<void(void* params)> patch;
};

// A kernel node of a graph whose function the runtime API can name (nodes of kernels launched
// through the driver API, such as cuBLAS's, are not listed: they are never updated).
struct KernelNode {
  cudaGraphNode_t node = nullptr;
  const void* func = nullptr;
};

// The kernel nodes of `graph` (the template an executable was instantiated from).
absl::Status ListKernelNodes(cudaGraph_t graph, std::vector<KernelNode>* nodes);

// Applies `updates` to every node of `nodes` (from ListKernelNodes of the executable's template)
// whose function matches, in `exec`. *updated: nodes changed. The matching kernels must take
// exactly one by-value struct of param_bytes. Other nodes are left alone.
absl::Status ApplyKernelNodeUpdates(const std::vector<KernelNode>& nodes, cudaGraphExec_t exec,
                                    const std::vector<KernelNodeUpdate>& updates, int* updated);

// Launch early: for every kernel node of `graph` whose function is in `kernels` (kernels that
// call griddepcontrol.wait before they touch memory, e.g. layer_kernels.h's EarlyLaunchKernels)
// and whose only dependency is a plain edge from another kernel node (cuBLAS's included), that
// edge becomes a programmatic one from the other kernel's launch-completion port: the node is
// launched once every block of the kernel before it has started, and its own wait holds it
// until that kernel has completed. Its launch and block scheduling overlap the kernel before
// instead of following it. Call before instantiating. *converted: edges changed. Needs
// sm_90 and a driver with graph edge data (CUDA 12.3); on a refusal the edge is restored and
// the error returned (edges converted before it stay; a caller should drop the graph).
// `nodes`: ListKernelNodes(graph).
absl::Status LaunchEarly(cudaGraph_t graph, const std::vector<KernelNode>& nodes,
                         const std::vector<const void*>& kernels, int* converted);

}  // namespace banyan::kernels::cuda
