/* The few CUDA driver types the interposer reads, declared here so that it
 * builds without a CUDA toolkit (it is preloaded into every process a
 * workload starts and must build wherever graphsignal installs). Only
 * 64-bit layouts; tests/integration/test_interpose.py compiles
 * tests/support/interpose/abi_check.c, which holds every offset below
 * against the real cuda.h where one is installed. */
#ifndef GRAPHSIGNAL_INTERPOSE_CUDA_ABI_H
#define GRAPHSIGNAL_INTERPOSE_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int gs_CUresult;
#define GS_CUDA_SUCCESS 0
#define GS_CUDA_ERROR_NOT_INITIALIZED 3

typedef void* gs_CUfunction;
typedef void* gs_CUkernel;
typedef void* gs_CUstream;
typedef void* gs_CUevent;
typedef void* gs_CUcontext;
typedef void* gs_CUgraph;
typedef void* gs_CUgraphExec;
typedef void* gs_CUgraphNode;
typedef unsigned long long gs_CUdeviceptr;

/* CUdriverProcAddress_flags */
#define GS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1u << 1)

/* CUstreamCaptureStatus */
#define GS_CU_STREAM_CAPTURE_STATUS_NONE 0

/* CUgraphNodeType */
#define GS_CU_GRAPH_NODE_TYPE_KERNEL 0
#define GS_CU_GRAPH_NODE_TYPE_GRAPH 4

/* CUmemorytype */
#define GS_CU_MEMORYTYPE_HOST 1
#define GS_CU_MEMORYTYPE_DEVICE 2
#define GS_CU_MEMORYTYPE_ARRAY 3
#define GS_CU_MEMORYTYPE_UNIFIED 4

/* CUlaunchConfig: only hStream is read */
typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  gs_CUstream hStream;
  void* attrs;
  unsigned int numAttrs;
} gs_CUlaunchConfig;

/* CUDA_KERNEL_NODE_PARAMS_v2: func and kern are read */
typedef struct {
  gs_CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void** kernelParams;
  void** extra;
  gs_CUkernel kern;
  gs_CUcontext ctx;
} gs_KernelNodeParams;

/* CUDA_MEMCPY2D (v2): memory types and the extent are read */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void* srcHost;
  gs_CUdeviceptr srcDevice;
  void* srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void* dstHost;
  gs_CUdeviceptr dstDevice;
  void* dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} gs_Memcpy2D;

#define GS_ABI_ASSERT(c, m) typedef char gs_abi_assert_##m[(c) ? 1 : -1]
GS_ABI_ASSERT(offsetof(gs_CUlaunchConfig, hStream) == 32, launch_stream);
GS_ABI_ASSERT(offsetof(gs_KernelNodeParams, kern) == 56 && sizeof(gs_KernelNodeParams) == 72, node_params);
GS_ABI_ASSERT(offsetof(gs_Memcpy2D, dstMemoryType) == 72 && offsetof(gs_Memcpy2D, WidthInBytes) == 112 &&
                  sizeof(gs_Memcpy2D) == 128,
              memcpy2d);

#endif
