// The few CUDA driver functions the library calls itself, looked up in the
// driver the process already loaded (never loading one). Used only from
// API-exit callbacks of rare calls (graph instantiation), from copies while
// a stream capture is in progress, and from cudaMemcpyDefault copies: never
// from resource callbacks, where CUPTI does not support driver calls.
#pragma once

#include <cuda.h>

namespace graphsignal {
namespace cupti {

struct DriverApi {
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*kernel_node_get_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;
  CUresult (*kernel_get_name)(const char**, CUkernel) = nullptr;
  CUresult (*child_graph)(CUgraphNode, CUgraph*) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;

  // From libcuda.so.1 if it is loaded. GRAPHSIGNAL_CUPTI_DRIVER_LIB names
  // another already-loaded library instead (tests: the fake libcupti,
  // which stands in for the driver too). Returns whether the graph walk
  // is possible.
  bool load();

  bool can_walk_graphs() const {
    return graph_get_nodes && node_get_type && kernel_node_get_params && (func_get_name || kernel_get_name);
  }
};

}  // namespace cupti
}  // namespace graphsignal
