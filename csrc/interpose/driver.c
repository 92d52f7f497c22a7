/* The driver functions the interposer calls itself (counters.h), from the
 * libcuda the process loaded. Called once, when the process first reaches
 * the driver; lookups go to the next dlsym, never through our own. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>

#include "counters.h"

typedef void* (*dlsym_fn)(void*, const char*);
extern void* gs_real_dlsym;

static void* find(void* h, const char* name) {
  dlsym_fn f = (dlsym_fn)__atomic_load_n(&gs_real_dlsym, __ATOMIC_ACQUIRE);
  void* p = f && h ? f(h, name) : NULL;
  dlerror(); /* no error of ours for the workload's next dlerror() */
  return p;
}

void gs_driver_resolve(void* h) {
  if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
  *(void**)&gs_driver.func_get_name = find(h, "cuFuncGetName");
  *(void**)&gs_driver.kernel_get_name = find(h, "cuKernelGetName");
  *(void**)&gs_driver.graph_get_nodes = find(h, "cuGraphGetNodes");
  *(void**)&gs_driver.node_get_type = find(h, "cuGraphNodeGetType");
  *(void**)&gs_driver.kernel_node_get_params = find(h, "cuGraphKernelNodeGetParams_v2");
  *(void**)&gs_driver.child_graph = find(h, "cuGraphChildGraphNodeGetGraph");
  *(void**)&gs_driver.stream_is_capturing = find(h, "cuStreamIsCapturing");
  *(void**)&gs_driver.stream_query = find(h, "cuStreamQuery");
  *(void**)&gs_driver.stream_query_ptsz = find(h, "cuStreamQuery_ptsz");
  *(void**)&gs_driver.ctx_get_current = find(h, "cuCtxGetCurrent");
  *(void**)&gs_driver.ctx_get_device = find(h, "cuCtxGetDevice");
  *(void**)&gs_driver.device_get = find(h, "cuDeviceGet");
  *(void**)&gs_driver.device_get_count = find(h, "cuDeviceGetCount");
  *(void**)&gs_driver.device_get_uuid = find(h, "cuDeviceGetUuid_v2");
  if (!gs_driver.device_get_uuid) *(void**)&gs_driver.device_get_uuid = find(h, "cuDeviceGetUuid");
  *(void**)&gs_driver.mem_get_allocation_props = find(h, "cuMemGetAllocationPropertiesFromHandle");
}
