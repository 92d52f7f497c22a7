#include "driver_api.h"

#include <dlfcn.h>
#include <stdlib.h>

namespace graphsignal {
namespace cupti {

template <typename T>
static void bind(void* h, const char* name, T* fn) {
  *fn = reinterpret_cast<T>(dlsym(h, name));
}

bool DriverApi::load() {
  const char* lib = getenv("GRAPHSIGNAL_CUPTI_DRIVER_LIB");
  // RTLD_NOLOAD: only a library the process has already loaded (CUDA
  // loaded us, so libcuda is there); an environment variable never makes
  // this library load code of its own choosing.
  void* h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  bind(h, "cuGraphGetNodes", &graph_get_nodes);
  bind(h, "cuGraphNodeGetType", &node_get_type);
  bind(h, "cuGraphKernelNodeGetParams_v2", &kernel_node_get_params);
  bind(h, "cuFuncGetName", &func_get_name);
  bind(h, "cuKernelGetName", &kernel_get_name);
  bind(h, "cuGraphChildGraphNodeGetGraph", &child_graph);
  bind(h, "cuStreamIsCapturing", &stream_is_capturing);
  bind(h, "cuPointerGetAttribute", &pointer_get_attribute);
  // The handle stays open: the functions are used until exit.
  return can_walk_graphs();
}

}  // namespace cupti
}  // namespace graphsignal
