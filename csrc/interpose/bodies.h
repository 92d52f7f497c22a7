/* What each hooked driver call counts: one body per family of rows in
 * hooks.h, called by that row's wrappers (interpose.c) with the row and the
 * driver function to forward to. Each forwards first and counts what ran
 * (a failed call counts nothing; a sync counts its host time).
 *
 * Included once, by interpose.c, after the row enum (GS_H_*), g_calls and
 * g_census, which CALLS() reads: the bodies are static inline so that each
 * wrapper compiles to the forwarding call and a few adds. */
#ifndef GRAPHSIGNAL_INTERPOSE_BODIES_H
#define GRAPHSIGNAL_INTERPOSE_BODIES_H

#include <string.h>

#include "counters.h"
#include "hooks.h"
#include "hostmem.h"

#define CALLS(row) \
  if (__builtin_expect(g_census, 0)) __atomic_fetch_add(&g_calls[row], 1, __ATOMIC_RELAXED)

typedef gs_CUresult(*fn_launch) GS_P_LAUNCH;
static inline gs_CUresult b_launch(int row, void* real, gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shm, gs_CUstream s, void** params,
                                   void** extra) {
  gs_CUresult r = ((fn_launch)real)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, s);
  return r;
}

typedef gs_CUresult(*fn_coop) GS_P_COOP;
static inline gs_CUresult b_coop(int row, void* real, gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shm, gs_CUstream s, void** params) {
  gs_CUresult r = ((fn_coop)real)(f, gx, gy, gz, bx, by, bz, shm, s, params);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, s);
  return r;
}

typedef gs_CUresult(*fn_launch_ex) GS_P_LAUNCH_EX;
static inline gs_CUresult b_launch_ex(int row, void* real, const gs_CUlaunchConfig* config, gs_CUfunction f,
                                      void** params, void** extra) {
  gs_CUresult r = ((fn_launch_ex)real)(config, f, params, extra);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, config ? config->hStream : NULL);
  return r;
}

typedef gs_CUresult(*fn_graph_launch) GS_P_GRAPH_LAUNCH;
static inline gs_CUresult b_graph_launch(int row, void* real, gs_CUgraphExec exec, gs_CUstream s) {
  int per_thread = row == GS_H_cuGraphLaunch_ptsz;
  void* ticket = NULL;
  gs_slot* slot;
  int sampled;
  gs_CUresult r;
  if (gs_stream_capturing(s)) { /* a graph launched into a capture becomes a child of the captured graph */
    r = ((fn_graph_launch)real)(exec, s);
    CALLS(row);
    if (r == GS_CUDA_SUCCESS) __atomic_fetch_add(&gs_state.captured, 1, __ATOMIC_RELAXED);
    return r;
  }
  slot = gs_graph_slot(exec);
  sampled = gs_sample_begin(slot, s, per_thread, &ticket);
  r = ((fn_graph_launch)real)(exec, s);
  CALLS(row);
  if (sampled) gs_sample_end(ticket, s, per_thread, r == GS_CUDA_SUCCESS);
  if (r == GS_CUDA_SUCCESS) gs_count_graph_slot(slot);
  return r;
}

typedef gs_CUresult(*fn_inst_flags) GS_P_INST_FLAGS;
static inline gs_CUresult b_inst_flags(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph,
                                       unsigned long long flags) {
  gs_CUresult r = ((fn_inst_flags)real)(exec, graph, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_inst_params) GS_P_INST_PARAMS;
static inline gs_CUresult b_inst_params(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph, void* params) {
  gs_CUresult r = ((fn_inst_params)real)(exec, graph, params);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_inst_v2) GS_P_INST_V2;
static inline gs_CUresult b_inst_v2(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph,
                                    gs_CUgraphNode* err_node, char* log, size_t log_size) {
  gs_CUresult r = ((fn_inst_v2)real)(exec, graph, err_node, log, log_size);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_exec_update_v2) GS_P_EXEC_UPDATE_V2;
static inline gs_CUresult b_exec_update_v2(int row, void* real, gs_CUgraphExec exec, gs_CUgraph graph, void* info) {
  gs_CUresult r = ((fn_exec_update_v2)real)(exec, graph, info);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_graph_updated(exec, graph);
  return r;
}

typedef gs_CUresult(*fn_exec_update_v1) GS_P_EXEC_UPDATE_V1;
static inline gs_CUresult b_exec_update_v1(int row, void* real, gs_CUgraphExec exec, gs_CUgraph graph,
                                           gs_CUgraphNode* err_node, int* result) {
  gs_CUresult r = ((fn_exec_update_v1)real)(exec, graph, err_node, result);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_graph_updated(exec, graph);
  return r;
}

typedef gs_CUresult(*fn_begin_v1) GS_P_BEGIN_V1;
static inline gs_CUresult b_begin_v1(int row, void* real, gs_CUstream s) {
  gs_CUresult r = ((fn_begin_v1)real)(s);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_begin_v2) GS_P_BEGIN_V2;
static inline gs_CUresult b_begin_v2(int row, void* real, gs_CUstream s, int mode) {
  gs_CUresult r = ((fn_begin_v2)real)(s, mode);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_begin_to_graph) GS_P_BEGIN_TO_GRAPH;
static inline gs_CUresult b_begin_to_graph(int row, void* real, gs_CUstream s, gs_CUgraph graph,
                                           const gs_CUgraphNode* deps, const void* dep_data, size_t n, int mode) {
  gs_CUresult r = ((fn_begin_to_graph)real)(s, graph, deps, dep_data, n, mode);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_end) GS_P_END;
static inline gs_CUresult b_end(int row, void* real, gs_CUstream s, gs_CUgraph* graph) {
  gs_CUresult r = ((fn_end)real)(s, graph);
  CALLS(row);
  gs_capture_ended(); /* an invalidated capture ends with an error, but it ends */
  return r;
}

/* synchronizations: host wall time around the call */
#define TIMED_SYNC(kind, call)             \
  uint64_t t0 = gs_ticks();                \
  gs_CUresult r = call;                    \
  gs_count_sync(kind, gs_ticks() - t0);    \
  CALLS(row);                              \
  return r

typedef gs_CUresult(*fn_stream) GS_P_STREAM;
static inline gs_CUresult b_stream_sync(int row, void* real, gs_CUstream s) {
  TIMED_SYNC(GS_SYNC_STREAM, ((fn_stream)real)(s));
}

typedef gs_CUresult(*fn_void) GS_P_VOID;
static inline gs_CUresult b_ctx_sync(int row, void* real, int unused) {
  (void)unused; TIMED_SYNC(GS_SYNC_CONTEXT, ((fn_void)real)()); }

typedef gs_CUresult(*fn_ctx) GS_P_CTX;
static inline gs_CUresult b_ctx_sync_v2(int row, void* real, gs_CUcontext ctx) {
  TIMED_SYNC(GS_SYNC_CONTEXT, ((fn_ctx)real)(ctx));
}

typedef gs_CUresult(*fn_event) GS_P_EVENT;
static inline gs_CUresult b_event_sync(int row, void* real, gs_CUevent e) {
  TIMED_SYNC(GS_SYNC_EVENT, ((fn_event)real)(e));
}

/* copies: a synchronous copy also counts its wait as a synchronization */
/* src, dst: the host addresses gs_count_copy classifies where the kind has
 * a host side (evaluated only for a copy that ran) */
#define SYNC_COPY(kind, bytes, src, dst, call)             \
  uint64_t t0 = gs_ticks();                                \
  gs_CUresult r = call;                                    \
  CALLS(row);                                              \
  if (r == GS_CUDA_SUCCESS) {                              \
    gs_count_sync(GS_SYNC_COPY, gs_ticks() - t0);          \
    gs_count_copy(kind, bytes, src, dst, NULL, 0);         \
  }                                                        \
  return r
#define ASYNC_COPY(kind, bytes, src, dst, s, call)                   \
  gs_CUresult r = call;                                              \
  CALLS(row);                                                        \
  if (r == GS_CUDA_SUCCESS) gs_count_copy(kind, bytes, src, dst, s, 1); \
  return r

typedef gs_CUresult(*fn_copy) GS_P_COPY;
typedef gs_CUresult(*fn_copy_async) GS_P_COPY_ASYNC;
static inline gs_CUresult b_copy(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DEFAULT, n, NULL, NULL, ((fn_copy)real)(dst, src, n));
}
static inline gs_CUresult b_copy_async(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DEFAULT, n, NULL, NULL, s, ((fn_copy_async)real)(dst, src, n, s));
}
static inline gs_CUresult b_dtod(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DTOD, n, NULL, NULL, ((fn_copy)real)(dst, src, n));
}
static inline gs_CUresult b_dtod_async(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DTOD, n, NULL, NULL, s, ((fn_copy_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_htod) GS_P_HTOD;
typedef gs_CUresult(*fn_htod_async) GS_P_HTOD_ASYNC;
static inline gs_CUresult b_htod(int row, void* real, gs_CUdeviceptr dst, const void* src, size_t n) {
  SYNC_COPY(GS_COPY_HTOD, n, src, NULL, ((fn_htod)real)(dst, src, n));
}
static inline gs_CUresult b_htod_async(int row, void* real, gs_CUdeviceptr dst, const void* src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_HTOD, n, src, NULL, s, ((fn_htod_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_dtoh) GS_P_DTOH;
typedef gs_CUresult(*fn_dtoh_async) GS_P_DTOH_ASYNC;
static inline gs_CUresult b_dtoh(int row, void* real, void* dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DTOH, n, NULL, dst, ((fn_dtoh)real)(dst, src, n));
}
static inline gs_CUresult b_dtoh_async(int row, void* real, void* dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DTOH, n, NULL, dst, s, ((fn_dtoh_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_peer) GS_P_PEER;
typedef gs_CUresult(*fn_peer_async) GS_P_PEER_ASYNC;
static inline gs_CUresult b_peer(int row, void* real, gs_CUdeviceptr dst, gs_CUcontext dctx, gs_CUdeviceptr src,
                                 gs_CUcontext sctx, size_t n) {
  SYNC_COPY(GS_COPY_PTOP, n, NULL, NULL, ((fn_peer)real)(dst, dctx, src, sctx, n));
}
static inline gs_CUresult b_peer_async(int row, void* real, gs_CUdeviceptr dst, gs_CUcontext dctx,
                                       gs_CUdeviceptr src, gs_CUcontext sctx, size_t n, gs_CUstream s) {
  ASYNC_COPY(GS_COPY_PTOP, n, NULL, NULL, s, ((fn_peer_async)real)(dst, dctx, src, sctx, n, s));
}

static int kind_2d(const gs_Memcpy2D* p) {
  int s, d;
  if (!p) return GS_COPY_DEFAULT;
  s = p->srcMemoryType, d = p->dstMemoryType;
  if (s == GS_CU_MEMORYTYPE_HOST && d == GS_CU_MEMORYTYPE_HOST) return GS_COPY_HTOH;
  if (s == GS_CU_MEMORYTYPE_HOST && (d == GS_CU_MEMORYTYPE_DEVICE || d == GS_CU_MEMORYTYPE_ARRAY)) return GS_COPY_HTOD;
  if ((s == GS_CU_MEMORYTYPE_DEVICE || s == GS_CU_MEMORYTYPE_ARRAY) && d == GS_CU_MEMORYTYPE_HOST) return GS_COPY_DTOH;
  if ((s == GS_CU_MEMORYTYPE_DEVICE || s == GS_CU_MEMORYTYPE_ARRAY) &&
      (d == GS_CU_MEMORYTYPE_DEVICE || d == GS_CU_MEMORYTYPE_ARRAY))
    return GS_COPY_DTOD;
  return GS_COPY_DEFAULT;
}

static inline uint64_t bytes_2d(const gs_Memcpy2D* p) { return p ? (uint64_t)p->WidthInBytes * p->Height : 0; }

/* the first host byte a 2D copy reads or writes (only used where kind_2d
 * says that side is host memory); an address computed, never read */
static inline const void* src_2d(const gs_Memcpy2D* p) {
  return p ? (const void*)((uintptr_t)p->srcHost + p->srcY * p->srcPitch + p->srcXInBytes) : NULL;
}
static inline const void* dst_2d(const gs_Memcpy2D* p) {
  return p ? (const void*)((uintptr_t)p->dstHost + p->dstY * p->dstPitch + p->dstXInBytes) : NULL;
}

typedef gs_CUresult(*fn_2d) GS_P_2D;
typedef gs_CUresult(*fn_2d_async) GS_P_2D_ASYNC;
static inline gs_CUresult b_2d(int row, void* real, const gs_Memcpy2D* p) {
  SYNC_COPY(kind_2d(p), bytes_2d(p), src_2d(p), dst_2d(p), ((fn_2d)real)(p));
}
static inline gs_CUresult b_2d_async(int row, void* real, const gs_Memcpy2D* p, gs_CUstream s) {
  ASYNC_COPY(kind_2d(p), bytes_2d(p), src_2d(p), dst_2d(p), s, ((fn_2d_async)real)(p, s));
}

#define MEMSET(bytes, s, async, call)                        \
  gs_CUresult r = call;                                      \
  CALLS(row);                                                \
  if (r == GS_CUDA_SUCCESS) gs_count_memset(bytes, s, async); \
  return r

typedef gs_CUresult(*fn_set8) GS_P_SET8;
typedef gs_CUresult(*fn_set16) GS_P_SET16;
typedef gs_CUresult(*fn_set32) GS_P_SET32;
typedef gs_CUresult(*fn_set8_async) GS_P_SET8_ASYNC;
typedef gs_CUresult(*fn_set16_async) GS_P_SET16_ASYNC;
typedef gs_CUresult(*fn_set32_async) GS_P_SET32_ASYNC;
static inline gs_CUresult b_set8(int row, void* real, gs_CUdeviceptr dst, unsigned char v, size_t n) {
  MEMSET(n, NULL, 0, ((fn_set8)real)(dst, v, n));
}
static inline gs_CUresult b_set16(int row, void* real, gs_CUdeviceptr dst, unsigned short v, size_t n) {
  MEMSET(2 * (uint64_t)n, NULL, 0, ((fn_set16)real)(dst, v, n));
}
static inline gs_CUresult b_set32(int row, void* real, gs_CUdeviceptr dst, unsigned int v, size_t n) {
  MEMSET(4 * (uint64_t)n, NULL, 0, ((fn_set32)real)(dst, v, n));
}
static inline gs_CUresult b_set8_async(int row, void* real, gs_CUdeviceptr dst, unsigned char v, size_t n,
                                       gs_CUstream s) {
  MEMSET(n, s, 1, ((fn_set8_async)real)(dst, v, n, s));
}
static inline gs_CUresult b_set16_async(int row, void* real, gs_CUdeviceptr dst, unsigned short v, size_t n,
                                        gs_CUstream s) {
  MEMSET(2 * (uint64_t)n, s, 1, ((fn_set16_async)real)(dst, v, n, s));
}
static inline gs_CUresult b_set32_async(int row, void* real, gs_CUdeviceptr dst, unsigned int v, size_t n,
                                        gs_CUstream s) {
  MEMSET(4 * (uint64_t)n, s, 1, ((fn_set32_async)real)(dst, v, n, s));
}

/* ---- host memory (hostmem.h): recorded only when the call succeeded ---- */

typedef gs_CUresult(*fn_host_alloc) GS_P_HOST_ALLOC;
static inline gs_CUresult b_host_alloc(int row, void* real, void** pp, size_t n, unsigned int flags) {
  gs_CUresult r = ((fn_host_alloc)real)(pp, n, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && pp) gs_hostmem_pinned(*pp, n);
  return r;
}

typedef gs_CUresult(*fn_alloc_host) GS_P_ALLOC_HOST;
static inline gs_CUresult b_alloc_host(int row, void* real, void** pp, size_t n) {
  gs_CUresult r = ((fn_alloc_host)real)(pp, n);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && pp) gs_hostmem_pinned(*pp, n);
  return r;
}

typedef gs_CUresult(*fn_alloc_host_v1) GS_P_ALLOC_HOST_V1;
static inline gs_CUresult b_alloc_host_v1(int row, void* real, void** pp, unsigned int n) {
  gs_CUresult r = ((fn_alloc_host_v1)real)(pp, n);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && pp) gs_hostmem_pinned(*pp, n);
  return r;
}

typedef gs_CUresult(*fn_host_register) GS_P_HOST_REGISTER;
static inline gs_CUresult b_host_register(int row, void* real, void* p, size_t n, unsigned int flags) {
  gs_CUresult r = ((fn_host_register)real)(p, n, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_hostmem_pinned(p, n);
  return r;
}

typedef gs_CUresult(*fn_host_ptr) GS_P_HOST_PTR;
static inline gs_CUresult b_host_unpin(int row, void* real, void* p) { /* cuMemFreeHost, cuMemHostUnregister */
  gs_CUresult r = ((fn_host_ptr)real)(p);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_hostmem_unpinned(p);
  return r;
}

typedef gs_CUresult(*fn_alloc_managed) GS_P_ALLOC_MANAGED;
static inline gs_CUresult b_alloc_managed(int row, void* real, gs_CUdeviceptr* dptr, size_t n, unsigned int flags) {
  gs_CUresult r = ((fn_alloc_managed)real)(dptr, n, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && dptr) gs_hostmem_managed((uintptr_t)*dptr, n);
  return r;
}

typedef gs_CUresult(*fn_dptr) GS_P_DPTR;
static inline gs_CUresult b_free(int row, void* real, gs_CUdeviceptr dptr) {
  gs_CUresult r = ((fn_dptr)real)(dptr);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_hostmem_freed((uintptr_t)dptr);
  return r;
}

/* a mapped allocation's location, asked once per mapping: 1 on the host, 0
 * not, -1 not known */
static inline int mapped_on_host(gs_CUmemGenericAllocationHandle handle) {
  gs_MemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  if (!gs_driver.mem_get_allocation_props || gs_driver.mem_get_allocation_props(&prop, handle) != GS_CUDA_SUCCESS)
    return -1;
  switch (prop.location.type) {
    case GS_CU_MEM_LOCATION_TYPE_DEVICE: return 0;
    case GS_CU_MEM_LOCATION_TYPE_HOST:
    case GS_CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case GS_CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return 1;
    default: return -1;
  }
}

typedef gs_CUresult(*fn_mem_map) GS_P_MEM_MAP;
static inline gs_CUresult b_mem_map(int row, void* real, gs_CUdeviceptr ptr, size_t n, size_t offset,
                                    gs_CUmemGenericAllocationHandle handle, unsigned long long flags) {
  gs_CUresult r = ((fn_mem_map)real)(ptr, n, offset, handle, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_hostmem_mapped((uintptr_t)ptr, n, mapped_on_host(handle));
  return r;
}

typedef gs_CUresult(*fn_mem_unmap) GS_P_MEM_UNMAP;
static inline gs_CUresult b_mem_unmap(int row, void* real, gs_CUdeviceptr ptr, size_t n) {
  gs_CUresult r = ((fn_mem_unmap)real)(ptr, n);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_hostmem_unmapped((uintptr_t)ptr, n);
  return r;
}

/* a pool on the host, or of managed memory: its allocations
 * (cuMemAllocFromPoolAsync) are not followed */
typedef gs_CUresult(*fn_pool_create) GS_P_POOL_CREATE;
static inline gs_CUresult b_pool_create(int row, void* real, gs_CUmemoryPool* pool, const gs_MemPoolPropsHead* props) {
  gs_CUresult r = ((fn_pool_create)real)(pool, props);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && props &&
      (props->location.type != GS_CU_MEM_LOCATION_TYPE_DEVICE || props->allocType != GS_CU_MEM_ALLOCATION_TYPE_PINNED))
    gs_hostmem_unsure(GS_UNSURE_POOL);
  return r;
}

#endif
