/* The driver entry points the interposer counts: one row per ABI (an
 * exported name of libcuda with one signature), in X-macro form:
 *
 *   X(name, base, per_thread, body, (params), (args))
 *
 * `base` is the name cuGetProcAddress is asked for; `per_thread` whether
 * the row is the per-thread-default-stream flavour (_ptsz/_ptds) that
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM selects; `body` the
 * function in interpose.c that counts and forwards. Each row gets
 * GS_SLOTS wrappers: slot 0 is exported under `name` itself (programs
 * linked to libcuda call it through their PLT), the others serve
 * cuGetProcAddress answers that are not libcuda's export of `name` (a
 * driver may hand out internal entry points). */
#ifndef GRAPHSIGNAL_INTERPOSE_HOOKS_H
#define GRAPHSIGNAL_INTERPOSE_HOOKS_H

#define GS_P_LAUNCH                                                                                           \
  (gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm, \
   gs_CUstream s, void** params, void** extra)
#define GS_A_LAUNCH (f, gx, gy, gz, bx, by, bz, shm, s, params, extra)
#define GS_P_COOP                                                                                             \
  (gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm, \
   gs_CUstream s, void** params)
#define GS_A_COOP (f, gx, gy, gz, bx, by, bz, shm, s, params)
#define GS_P_LAUNCH_EX (const gs_CUlaunchConfig* config, gs_CUfunction f, void** params, void** extra)
#define GS_A_LAUNCH_EX (config, f, params, extra)
#define GS_P_GRAPH_LAUNCH (gs_CUgraphExec exec, gs_CUstream s)
#define GS_A_GRAPH_LAUNCH (exec, s)
#define GS_P_INST_FLAGS (gs_CUgraphExec * exec, gs_CUgraph graph, unsigned long long flags)
#define GS_A_INST_FLAGS (exec, graph, flags)
#define GS_P_INST_PARAMS (gs_CUgraphExec * exec, gs_CUgraph graph, void* params)
#define GS_A_INST_PARAMS (exec, graph, params)
#define GS_P_INST_V2 (gs_CUgraphExec * exec, gs_CUgraph graph, gs_CUgraphNode * err_node, char* log, size_t log_size)
#define GS_A_INST_V2 (exec, graph, err_node, log, log_size)
#define GS_P_EXEC_UPDATE_V2 (gs_CUgraphExec exec, gs_CUgraph graph, void* info)
#define GS_A_EXEC_UPDATE_V2 (exec, graph, info)
#define GS_P_EXEC_UPDATE_V1 (gs_CUgraphExec exec, gs_CUgraph graph, gs_CUgraphNode * err_node, int* result)
#define GS_A_EXEC_UPDATE_V1 (exec, graph, err_node, result)
#define GS_P_BEGIN_V1 (gs_CUstream s)
#define GS_A_BEGIN_V1 (s)
#define GS_P_BEGIN_V2 (gs_CUstream s, int mode)
#define GS_A_BEGIN_V2 (s, mode)
#define GS_P_BEGIN_TO_GRAPH \
  (gs_CUstream s, gs_CUgraph graph, const gs_CUgraphNode* deps, const void* dep_data, size_t n, int mode)
#define GS_A_BEGIN_TO_GRAPH (s, graph, deps, dep_data, n, mode)
#define GS_P_END (gs_CUstream s, gs_CUgraph * graph)
#define GS_A_END (s, graph)
#define GS_P_STREAM (gs_CUstream s)
#define GS_A_STREAM (s)
#define GS_P_VOID (void)
#define GS_A_VOID (0) /* a placeholder argument: the body's list is never empty */
#define GS_P_CTX (gs_CUcontext ctx)
#define GS_A_CTX (ctx)
#define GS_P_EVENT (gs_CUevent e)
#define GS_A_EVENT (e)
#define GS_P_COPY (gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n)
#define GS_A_COPY (dst, src, n)
#define GS_P_COPY_ASYNC (gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n, gs_CUstream s)
#define GS_A_COPY_ASYNC (dst, src, n, s)
#define GS_P_HTOD (gs_CUdeviceptr dst, const void* src, size_t n)
#define GS_A_HTOD (dst, src, n)
#define GS_P_HTOD_ASYNC (gs_CUdeviceptr dst, const void* src, size_t n, gs_CUstream s)
#define GS_A_HTOD_ASYNC (dst, src, n, s)
#define GS_P_DTOH (void* dst, gs_CUdeviceptr src, size_t n)
#define GS_A_DTOH (dst, src, n)
#define GS_P_DTOH_ASYNC (void* dst, gs_CUdeviceptr src, size_t n, gs_CUstream s)
#define GS_A_DTOH_ASYNC (dst, src, n, s)
#define GS_P_PEER (gs_CUdeviceptr dst, gs_CUcontext dctx, gs_CUdeviceptr src, gs_CUcontext sctx, size_t n)
#define GS_A_PEER (dst, dctx, src, sctx, n)
#define GS_P_PEER_ASYNC \
  (gs_CUdeviceptr dst, gs_CUcontext dctx, gs_CUdeviceptr src, gs_CUcontext sctx, size_t n, gs_CUstream s)
#define GS_A_PEER_ASYNC (dst, dctx, src, sctx, n, s)
#define GS_P_2D (const gs_Memcpy2D* p)
#define GS_A_2D (p)
#define GS_P_2D_ASYNC (const gs_Memcpy2D* p, gs_CUstream s)
#define GS_A_2D_ASYNC (p, s)
#define GS_P_SET8 (gs_CUdeviceptr dst, unsigned char v, size_t n)
#define GS_P_SET16 (gs_CUdeviceptr dst, unsigned short v, size_t n)
#define GS_P_SET32 (gs_CUdeviceptr dst, unsigned int v, size_t n)
#define GS_A_SET (dst, v, n)
#define GS_P_SET8_ASYNC (gs_CUdeviceptr dst, unsigned char v, size_t n, gs_CUstream s)
#define GS_P_SET16_ASYNC (gs_CUdeviceptr dst, unsigned short v, size_t n, gs_CUstream s)
#define GS_P_SET32_ASYNC (gs_CUdeviceptr dst, unsigned int v, size_t n, gs_CUstream s)
#define GS_A_SET_ASYNC (dst, v, n, s)

#define GS_P_HOST_ALLOC (void** pp, size_t n, unsigned int flags)
#define GS_A_HOST_ALLOC (pp, n, flags)
#define GS_P_ALLOC_HOST (void** pp, size_t n)
#define GS_P_ALLOC_HOST_V1 (void** pp, unsigned int n) /* before CUDA 3.2: a 32-bit size */
#define GS_A_ALLOC_HOST (pp, n)
#define GS_P_HOST_REGISTER (void* p, size_t n, unsigned int flags)
#define GS_A_HOST_REGISTER (p, n, flags)
#define GS_P_HOST_PTR (void* p)
#define GS_A_HOST_PTR (p)
#define GS_P_ALLOC_MANAGED (gs_CUdeviceptr * dptr, size_t n, unsigned int flags)
#define GS_A_ALLOC_MANAGED (dptr, n, flags)
#define GS_P_DPTR (gs_CUdeviceptr dptr)
#define GS_A_DPTR (dptr)
#define GS_P_MEM_MAP \
  (gs_CUdeviceptr ptr, size_t n, size_t offset, gs_CUmemGenericAllocationHandle handle, unsigned long long flags)
#define GS_A_MEM_MAP (ptr, n, offset, handle, flags)
#define GS_P_MEM_UNMAP (gs_CUdeviceptr ptr, size_t n)
#define GS_A_MEM_UNMAP (ptr, n)
#define GS_P_POOL_CREATE (gs_CUmemoryPool * pool, const gs_MemPoolPropsHead* props)
#define GS_A_POOL_CREATE (pool, props)

/* The calls that make or end page-locked and managed host memory
 * (hostmem.h): counted nowhere, followed so that a copy's host side can be
 * classified without asking the driver. */
#define GS_HOST_MEMORY_HOOKS(X)                                                                      \
  X(cuMemHostAlloc, "cuMemHostAlloc", 0, b_host_alloc, GS_P_HOST_ALLOC, GS_A_HOST_ALLOC)             \
  X(cuMemAllocHost_v2, "cuMemAllocHost", 0, b_alloc_host, GS_P_ALLOC_HOST, GS_A_ALLOC_HOST)          \
  X(cuMemAllocHost, "cuMemAllocHost", 0, b_alloc_host_v1, GS_P_ALLOC_HOST_V1, GS_A_ALLOC_HOST)       \
  X(cuMemHostRegister_v2, "cuMemHostRegister", 0, b_host_register, GS_P_HOST_REGISTER,             \
    GS_A_HOST_REGISTER)                                                                              \
  X(cuMemHostRegister, "cuMemHostRegister", 0, b_host_register, GS_P_HOST_REGISTER,                 \
    GS_A_HOST_REGISTER)                                                                              \
  X(cuMemFreeHost, "cuMemFreeHost", 0, b_host_unpin, GS_P_HOST_PTR, GS_A_HOST_PTR)                   \
  X(cuMemHostUnregister, "cuMemHostUnregister", 0, b_host_unpin, GS_P_HOST_PTR, GS_A_HOST_PTR)       \
  X(cuMemAllocManaged, "cuMemAllocManaged", 0, b_alloc_managed, GS_P_ALLOC_MANAGED,                 \
    GS_A_ALLOC_MANAGED)                                                                              \
  X(cuMemFree_v2, "cuMemFree", 0, b_free, GS_P_DPTR, GS_A_DPTR)                                      \
  X(cuMemMap, "cuMemMap", 0, b_mem_map, GS_P_MEM_MAP, GS_A_MEM_MAP)                                  \
  X(cuMemUnmap, "cuMemUnmap", 0, b_mem_unmap, GS_P_MEM_UNMAP, GS_A_MEM_UNMAP)                        \
  X(cuMemPoolCreate, "cuMemPoolCreate", 0, b_pool_create, GS_P_POOL_CREATE, GS_A_POOL_CREATE)

#define GS_HOOKS(X)                                                                                  \
  X(cuLaunchKernel, "cuLaunchKernel", 0, b_launch, GS_P_LAUNCH, GS_A_LAUNCH)                         \
  X(cuLaunchKernel_ptsz, "cuLaunchKernel", 1, b_launch, GS_P_LAUNCH, GS_A_LAUNCH)                    \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, b_coop, GS_P_COOP, GS_A_COOP)         \
  X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 1, b_coop, GS_P_COOP, GS_A_COOP)    \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, b_launch_ex, GS_P_LAUNCH_EX, GS_A_LAUNCH_EX)            \
  X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 1, b_launch_ex, GS_P_LAUNCH_EX, GS_A_LAUNCH_EX)       \
  X(cuGraphLaunch, "cuGraphLaunch", 0, b_graph_launch, GS_P_GRAPH_LAUNCH, GS_A_GRAPH_LAUNCH)         \
  X(cuGraphLaunch_ptsz, "cuGraphLaunch", 1, b_graph_launch, GS_P_GRAPH_LAUNCH, GS_A_GRAPH_LAUNCH)    \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0, b_inst_flags, GS_P_INST_FLAGS,    \
    GS_A_INST_FLAGS)                                                                                 \
  X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 0, b_inst_params, GS_P_INST_PARAMS, \
    GS_A_INST_PARAMS)                                                                                \
  X(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 1, b_inst_params,             \
    GS_P_INST_PARAMS, GS_A_INST_PARAMS)                                                              \
  X(cuGraphInstantiate_v2, "cuGraphInstantiate", 0, b_inst_v2, GS_P_INST_V2, GS_A_INST_V2)          \
  X(cuGraphExecUpdate_v2, "cuGraphExecUpdate", 0, b_exec_update_v2, GS_P_EXEC_UPDATE_V2,            \
    GS_A_EXEC_UPDATE_V2)                                                                             \
  X(cuGraphExecUpdate, "cuGraphExecUpdate", 0, b_exec_update_v1, GS_P_EXEC_UPDATE_V1,               \
    GS_A_EXEC_UPDATE_V1)                                                                             \
  X(cuStreamBeginCapture, "cuStreamBeginCapture", 0, b_begin_v1, GS_P_BEGIN_V1, GS_A_BEGIN_V1)       \
  X(cuStreamBeginCapture_ptsz, "cuStreamBeginCapture", 1, b_begin_v1, GS_P_BEGIN_V1, GS_A_BEGIN_V1)  \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 0, b_begin_v2, GS_P_BEGIN_V2, GS_A_BEGIN_V2)    \
  X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 1, b_begin_v2, GS_P_BEGIN_V2,             \
    GS_A_BEGIN_V2)                                                                                   \
  X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 0, b_begin_to_graph,                \
    GS_P_BEGIN_TO_GRAPH, GS_A_BEGIN_TO_GRAPH)                                                        \
  X(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", 1, b_begin_to_graph,           \
    GS_P_BEGIN_TO_GRAPH, GS_A_BEGIN_TO_GRAPH)                                                        \
  X(cuStreamEndCapture, "cuStreamEndCapture", 0, b_end, GS_P_END, GS_A_END)                          \
  X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 1, b_end, GS_P_END, GS_A_END)                     \
  X(cuStreamSynchronize, "cuStreamSynchronize", 0, b_stream_sync, GS_P_STREAM, GS_A_STREAM)          \
  X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 1, b_stream_sync, GS_P_STREAM, GS_A_STREAM)     \
  X(cuCtxSynchronize, "cuCtxSynchronize", 0, b_ctx_sync, GS_P_VOID, GS_A_VOID)                       \
  X(cuCtxSynchronize_v2, "cuCtxSynchronize", 0, b_ctx_sync_v2, GS_P_CTX, GS_A_CTX)                   \
  X(cuEventSynchronize, "cuEventSynchronize", 0, b_event_sync, GS_P_EVENT, GS_A_EVENT)               \
  X(cuMemcpy, "cuMemcpy", 0, b_copy, GS_P_COPY, GS_A_COPY)                                           \
  X(cuMemcpy_ptds, "cuMemcpy", 1, b_copy, GS_P_COPY, GS_A_COPY)                                      \
  X(cuMemcpyAsync, "cuMemcpyAsync", 0, b_copy_async, GS_P_COPY_ASYNC, GS_A_COPY_ASYNC)               \
  X(cuMemcpyAsync_ptsz, "cuMemcpyAsync", 1, b_copy_async, GS_P_COPY_ASYNC, GS_A_COPY_ASYNC)          \
  X(cuMemcpyHtoD_v2, "cuMemcpyHtoD", 0, b_htod, GS_P_HTOD, GS_A_HTOD)                                \
  X(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 1, b_htod, GS_P_HTOD, GS_A_HTOD)                           \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", 0, b_dtoh, GS_P_DTOH, GS_A_DTOH)                                \
  X(cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", 1, b_dtoh, GS_P_DTOH, GS_A_DTOH)                           \
  X(cuMemcpyDtoD_v2, "cuMemcpyDtoD", 0, b_dtod, GS_P_COPY, GS_A_COPY)                                \
  X(cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", 1, b_dtod, GS_P_COPY, GS_A_COPY)                           \
  X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", 0, b_htod_async, GS_P_HTOD_ASYNC, GS_A_HTOD_ASYNC)    \
  X(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", 1, b_htod_async, GS_P_HTOD_ASYNC,               \
    GS_A_HTOD_ASYNC)                                                                                 \
  X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 0, b_dtoh_async, GS_P_DTOH_ASYNC, GS_A_DTOH_ASYNC)    \
  X(cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", 1, b_dtoh_async, GS_P_DTOH_ASYNC,               \
    GS_A_DTOH_ASYNC)                                                                                 \
  X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", 0, b_dtod_async, GS_P_COPY_ASYNC, GS_A_COPY_ASYNC)    \
  X(cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync", 1, b_dtod_async, GS_P_COPY_ASYNC,               \
    GS_A_COPY_ASYNC)                                                                                 \
  X(cuMemcpyPeer, "cuMemcpyPeer", 0, b_peer, GS_P_PEER, GS_A_PEER)                                   \
  X(cuMemcpyPeer_ptds, "cuMemcpyPeer", 1, b_peer, GS_P_PEER, GS_A_PEER)                              \
  X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 0, b_peer_async, GS_P_PEER_ASYNC, GS_A_PEER_ASYNC)       \
  X(cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync", 1, b_peer_async, GS_P_PEER_ASYNC, GS_A_PEER_ASYNC)  \
  X(cuMemcpy2D_v2, "cuMemcpy2D", 0, b_2d, GS_P_2D, GS_A_2D)                                          \
  X(cuMemcpy2D_v2_ptds, "cuMemcpy2D", 1, b_2d, GS_P_2D, GS_A_2D)                                     \
  X(cuMemcpy2DUnaligned_v2, "cuMemcpy2DUnaligned", 0, b_2d, GS_P_2D, GS_A_2D)                        \
  X(cuMemcpy2DUnaligned_v2_ptds, "cuMemcpy2DUnaligned", 1, b_2d, GS_P_2D, GS_A_2D)                   \
  X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync", 0, b_2d_async, GS_P_2D_ASYNC, GS_A_2D_ASYNC)              \
  X(cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync", 1, b_2d_async, GS_P_2D_ASYNC, GS_A_2D_ASYNC)         \
  X(cuMemsetD8_v2, "cuMemsetD8", 0, b_set8, GS_P_SET8, GS_A_SET)                                     \
  X(cuMemsetD8_v2_ptds, "cuMemsetD8", 1, b_set8, GS_P_SET8, GS_A_SET)                                \
  X(cuMemsetD16_v2, "cuMemsetD16", 0, b_set16, GS_P_SET16, GS_A_SET)                                 \
  X(cuMemsetD16_v2_ptds, "cuMemsetD16", 1, b_set16, GS_P_SET16, GS_A_SET)                            \
  X(cuMemsetD32_v2, "cuMemsetD32", 0, b_set32, GS_P_SET32, GS_A_SET)                                 \
  X(cuMemsetD32_v2_ptds, "cuMemsetD32", 1, b_set32, GS_P_SET32, GS_A_SET)                            \
  X(cuMemsetD8Async, "cuMemsetD8Async", 0, b_set8_async, GS_P_SET8_ASYNC, GS_A_SET_ASYNC)            \
  X(cuMemsetD8Async_ptsz, "cuMemsetD8Async", 1, b_set8_async, GS_P_SET8_ASYNC, GS_A_SET_ASYNC)       \
  X(cuMemsetD16Async, "cuMemsetD16Async", 0, b_set16_async, GS_P_SET16_ASYNC, GS_A_SET_ASYNC)        \
  X(cuMemsetD16Async_ptsz, "cuMemsetD16Async", 1, b_set16_async, GS_P_SET16_ASYNC, GS_A_SET_ASYNC)   \
  X(cuMemsetD32Async, "cuMemsetD32Async", 0, b_set32_async, GS_P_SET32_ASYNC, GS_A_SET_ASYNC)        \
  X(cuMemsetD32Async_ptsz, "cuMemsetD32Async", 1, b_set32_async, GS_P_SET32_ASYNC, GS_A_SET_ASYNC)     \
  GS_HOST_MEMORY_HOOKS(X)

#endif
