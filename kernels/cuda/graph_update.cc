#include "kernels/cuda/graph_update.h"

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

}  // namespace banyan::kernels::cuda
