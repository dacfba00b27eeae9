#include "kernels/cuda/graph_update.h"

#include <cuda_runtime_api.h>  // CUDART_VERSION

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace banyan::kernels::cuda {

absl::Status ListKernelNodes(cudaGraph_t graph, std::vector<KernelNode>* out) {
  out->clear();
  size_t n = 0;
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams kp = {};
    if (cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) {
      // A driver-API kernel (cuBLAS): the runtime has no host function for it. Not an error of
      // ours, and not sticky.
      cudaGetLastError();
      continue;
    }
    out->push_back({node, kp.func});
  }
  return absl::OkStatus();
}

absl::Status ApplyKernelNodeUpdates(const std::vector<KernelNode>& nodes, cudaGraphExec_t exec,
                                    const std::vector<KernelNodeUpdate>& updates, int* updated) {
  *updated = 0;
  std::vector<unsigned char> buffer;
  for (const KernelNode& kn : nodes) {
    for (const KernelNodeUpdate& u : updates) {
      if (kn.func != u.func) continue;
      cudaKernelNodeParams kp = {};
      BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphKernelNodeGetParams(kn.node, &kp));
      if (kp.kernelParams == nullptr || kp.extra != nullptr) {
        return absl::InvalidArgumentError("graph update: a kernel node without by-value params");
      }
      buffer.resize(u.param_bytes);
      std::memcpy(buffer.data(), kp.kernelParams[0], u.param_bytes);
      u.patch(buffer.data());
      void* args[1] = {buffer.data()};
      kp.gridDim = u.grid;
      kp.kernelParams = args;
      BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphExecKernelNodeSetParams(exec, kn.node, &kp));
      ++*updated;
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status LaunchEarly(cudaGraph_t graph, const std::vector<KernelNode>& nodes,
                         const std::vector<const void*>& kernels, int* converted) {
  *converted = 0;
#if CUDART_VERSION < 12030
  (void)graph;
  (void)nodes;
  (void)kernels;
  return absl::UnimplementedError("LaunchEarly: graph edge data needs CUDA 12.3 or newer");
#else
#if CUDART_VERSION < 13000  // CUDA 12.3-12.9 name the edge-data calls _v2
#define cudaGraphNodeGetDependencies cudaGraphNodeGetDependencies_v2
#define cudaGraphAddDependencies cudaGraphAddDependencies_v2
#define cudaGraphRemoveDependencies cudaGraphRemoveDependencies_v2
#endif
  for (const KernelNode& kn : nodes) {
    if (std::find(kernels.begin(), kernels.end(), kn.func) == kernels.end()) continue;
    cudaGraphNode_t dep[2] = {};
    cudaGraphEdgeData edge[2] = {};
    size_t n = 2;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetDependencies(kn.node, dep, edge, &n));
    if (n != 1 || edge[0].type != cudaGraphDependencyTypeDefault || edge[0].from_port != 0) {
      continue;  // a join, a root, or an edge that is already programmatic
    }
    cudaGraphNodeType type;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(dep[0], &type));
    if (type != cudaGraphNodeTypeKernel) continue;  // after a copy or a memset: as captured
    cudaGraphEdgeData early = {};
    early.from_port = cudaGraphKernelNodePortLaunchCompletion;
    early.type = cudaGraphDependencyTypeProgrammatic;
    BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphRemoveDependencies(graph, &dep[0], &kn.node, &edge[0], 1));
    if (const cudaError_t err = cudaGraphAddDependencies(graph, &dep[0], &kn.node, &early, 1);
        err != cudaSuccess) {
      cudaGetLastError();
      BANYAN_CUDA_RETURN_IF_ERROR(cudaGraphAddDependencies(graph, &dep[0], &kn.node, &edge[0], 1));
      return CudaStatus(err, "LaunchEarly: a programmatic graph edge");
    }
    ++*converted;
  }
  return absl::OkStatus();
#undef cudaGraphNodeGetDependencies
#undef cudaGraphAddDependencies
#undef cudaGraphRemoveDependencies
#endif
}

}  // namespace banyan::kernels::cuda
