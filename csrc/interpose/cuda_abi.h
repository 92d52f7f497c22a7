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
typedef unsigned long long gs_CUmemGenericAllocationHandle;
typedef void* gs_CUmemoryPool;

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

/* CUmemLocationType, CUmemAllocationType */
#define GS_CU_MEM_LOCATION_TYPE_DEVICE 1
#define GS_CU_MEM_LOCATION_TYPE_HOST 2
#define GS_CU_MEM_LOCATION_TYPE_HOST_NUMA 3
#define GS_CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT 4
#define GS_CU_MEM_ALLOCATION_TYPE_PINNED 1

typedef struct {
  int type;
  int id;
} gs_MemLocation;

/* CUmemAllocationProp (v1): cuMemGetAllocationPropertiesFromHandle writes
 * it whole; location.type is read */
typedef struct {
  int type;
  int requestedHandleTypes;
  gs_MemLocation location;
  void* win32HandleMetaData;
  unsigned char compressionType, gpuDirectRDMACapable;
  unsigned short usage;
  unsigned char reserved[4];
} gs_MemAllocationProp;

/* the head of CUmemPoolProps: allocType and location.type are read */
typedef struct {
  int allocType;
  int handleTypes;
  gs_MemLocation location;
} gs_MemPoolPropsHead;

#define GS_ABI_ASSERT(c, m) typedef char gs_abi_assert_##m[(c) ? 1 : -1]
GS_ABI_ASSERT(offsetof(gs_CUlaunchConfig, hStream) == 32, launch_stream);
GS_ABI_ASSERT(offsetof(gs_KernelNodeParams, kern) == 56 && sizeof(gs_KernelNodeParams) == 72, node_params);
GS_ABI_ASSERT(offsetof(gs_Memcpy2D, dstMemoryType) == 72 && offsetof(gs_Memcpy2D, WidthInBytes) == 112 &&
                  sizeof(gs_Memcpy2D) == 128,
              memcpy2d);
GS_ABI_ASSERT(offsetof(gs_MemAllocationProp, location) == 8 && sizeof(gs_MemAllocationProp) == 32, alloc_prop);
GS_ABI_ASSERT(offsetof(gs_MemPoolPropsHead, location) == 8, pool_props);

#endif
