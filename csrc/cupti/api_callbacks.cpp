#include "api_callbacks.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cupti_call.h"
#include "log.h"


namespace graphsignal {
namespace cupti {

namespace {

// CUPTI enum values this file writes (cupti_activity.h).
constexpr uint8_t kCopyHtoD = 1, kCopyDtoH = 2, kCopyDtoD = 8, kCopyHtoH = 9, kCopyPtoP = 10;
constexpr uint8_t kMemPageable = 1, kMemPinned = 2, kMemDevice = 3, kMemManaged = 5;

// Api::flags
constexpr uint16_t kSyncEvent = 1, kSyncWait = 2, kSyncStream = 3, kSyncContext = 4;  // CUPTI sync types
constexpr uint16_t kPinned = kMemPinned, kManaged = kMemManaged;                   // allocation kinds
constexpr uint16_t kLowMask = 0x7;
constexpr uint16_t kDirHtod = 1 << 4, kDirDtoh = 2 << 4, kDirDtod = 3 << 4, kDirUnified = 4 << 4, kDirMask = 7 << 4;
constexpr uint16_t kElem1 = 1 << 8, kElem2 = 2 << 8, kElem4 = 4 << 8;
constexpr uint16_t kPtsz = 1 << 12;  // the per-thread default stream variant (_ptsz / _ptds)

// The runtime's cudaMemcpyKind.
constexpr int kRtHostToHost = 0, kRtHostToDevice = 1, kRtDeviceToHost = 2, kRtDeviceToDevice = 3;

// Parameter blocks: the fields read here, in their order, as in
// generated_cuda_runtime_api_meta.h and generated_cuda_meta.h (which
// cupti.h includes; the checks below hold the mirrors to them). One
// mirror serves every entry point that shares a layout.
struct RtPos { size_t x, y, z; };
struct RtPitchedPtr { void* ptr; size_t pitch, xsize, ysize; };
struct RtExtent { size_t width, height, depth; };
struct RtMemcpy3DParms {
  void* srcArray; RtPos srcPos; RtPitchedPtr srcPtr;
  void* dstArray; RtPos dstPos; RtPitchedPtr dstPtr;
  RtExtent extent; int kind;
};

struct RtStream { CUstream stream; };
struct RtCopy { void* dst; const void* src; size_t count; int kind; CUstream stream; };
struct RtCopy2D { void* dst; size_t dpitch; const void* src; size_t spitch; size_t width, height; int kind; CUstream stream; };
struct RtCopy3D { const RtMemcpy3DParms* p; CUstream stream; };
struct RtToSymbol { const void* symbol; const void* src; size_t count, offset; int kind; CUstream stream; };
struct RtFromSymbol { void* dst; const void* symbol; size_t count, offset; int kind; CUstream stream; };
struct RtPeer { void* dst; int dstDevice; const void* src; int srcDevice; size_t count; CUstream stream; };
struct RtMemset { void* ptr; int value; size_t count; CUstream stream; };
struct RtMemset2D { void* ptr; size_t pitch; int value; size_t width, height; CUstream stream; };
struct RtMemset3D { RtPitchedPtr ptr; int value; RtExtent extent; CUstream stream; };
struct OutPtr { void** ptr; size_t size; };
struct PtrSize { void* ptr; size_t size; };
struct Ptr { void* ptr; };
struct Instantiate { CUgraphExec* exec; CUgraph graph; };
struct ExecUpdate { CUgraphExec exec; CUgraph graph; };

struct DrStream { CUstream stream; };
struct DrCopy { uint64_t dst, src; size_t bytes; CUstream stream; };  // HtoD/DtoH/DtoD/unified: pointers in order
struct DrPeer { CUdeviceptr dst; CUcontext dstContext; CUdeviceptr src; CUcontext srcContext; size_t bytes; CUstream stream; };
struct DrCopyND { const void* p; CUstream stream; };
struct DrMemset { CUdeviceptr dst; uint64_t value_slot; size_t n; CUstream stream; };  // the value is padded to 8
struct DrMemset2D { CUdeviceptr dst; size_t pitch; uint64_t value_slot; size_t width, height; CUstream stream; };

#define GS_SAME_FIELD(mine, theirs, field, their_field) \
  static_assert(offsetof(mine, field) == offsetof(theirs, their_field), #theirs "." #their_field)
static_assert(sizeof(RtMemcpy3DParms) == sizeof(cudaMemcpy3DParms), "cudaMemcpy3DParms");
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, extent, extent);
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, kind, kind);
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, dstPtr, dstPtr);
GS_SAME_FIELD(RtStream, cudaStreamSynchronize_v3020_params, stream, stream);
GS_SAME_FIELD(RtStream, cudaStreamWaitEvent_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy, cudaMemcpy_v3020_params, kind, kind);
GS_SAME_FIELD(RtCopy, cudaMemcpyAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy, cudaMemcpyAsync_ptsz_v7000_params, stream, stream);
GS_SAME_FIELD(RtCopy2D, cudaMemcpy2D_v3020_params, kind, kind);
GS_SAME_FIELD(RtCopy2D, cudaMemcpy2DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy3D, cudaMemcpy3DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtToSymbol, cudaMemcpyToSymbol_v3020_params, kind, kind);
GS_SAME_FIELD(RtToSymbol, cudaMemcpyToSymbolAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtFromSymbol, cudaMemcpyFromSymbol_v3020_params, kind, kind);
GS_SAME_FIELD(RtFromSymbol, cudaMemcpyFromSymbolAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtPeer, cudaMemcpyPeer_v4000_params, count, count);
GS_SAME_FIELD(RtPeer, cudaMemcpyPeerAsync_v4000_params, stream, stream);
GS_SAME_FIELD(RtMemset, cudaMemset_v3020_params, count, count);
GS_SAME_FIELD(RtMemset, cudaMemsetAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtMemset2D, cudaMemset2D_v3020_params, height, height);
GS_SAME_FIELD(RtMemset2D, cudaMemset2DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtMemset3D, cudaMemset3D_v3020_params, extent, extent);
GS_SAME_FIELD(RtMemset3D, cudaMemset3DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(OutPtr, cudaHostAlloc_v3020_params, size, size);
GS_SAME_FIELD(OutPtr, cudaMallocHost_v3020_params, size, size);
GS_SAME_FIELD(OutPtr, cudaMallocManaged_v6000_params, size, size);
GS_SAME_FIELD(PtrSize, cudaHostRegister_v4000_params, size, size);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiate_v12000_params, graph, graph);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiateWithFlags_v11040_params, graph, graph);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiateWithParams_v12000_params, graph, graph);
GS_SAME_FIELD(ExecUpdate, cudaGraphExecUpdate_v10020_params, graph, hGraph);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoDAsync_v2_params, src, srcHost);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoDAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoHAsync_v2_params, src, srcDevice);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoHAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoDAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyAsync_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoD_v2_params, bytes, ByteCount);
GS_SAME_FIELD(DrPeer, cuMemcpyPeerAsync_params, stream, hStream);
GS_SAME_FIELD(DrCopyND, cuMemcpy2DAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopyND, cuMemcpy3DAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrMemset, cuMemsetD8Async_params, n, N);
GS_SAME_FIELD(DrMemset, cuMemsetD32Async_params, stream, hStream);
GS_SAME_FIELD(DrMemset2D, cuMemsetD2D16Async_params, height, Height);
GS_SAME_FIELD(DrMemset2D, cuMemsetD2D32Async_params, stream, hStream);
GS_SAME_FIELD(OutPtr, cuMemHostAlloc_params, size, bytesize);
GS_SAME_FIELD(OutPtr, cuMemAllocManaged_params, size, bytesize);
GS_SAME_FIELD(PtrSize, cuMemHostRegister_v2_params, size, bytesize);
GS_SAME_FIELD(Instantiate, cuGraphInstantiateWithFlags_params, graph, hGraph);
GS_SAME_FIELD(Instantiate, cuGraphInstantiate_v2_params, graph, hGraph);
GS_SAME_FIELD(ExecUpdate, cuGraphExecUpdate_v2_params, graph, hGraph);
#undef GS_SAME_FIELD
static_assert(offsetof(DrMemset, n) == 16 && offsetof(DrMemset2D, width) == 24, "memset parameter layouts");
static_assert(offsetof(CUDA_MEMCPY2D, WidthInBytes) > offsetof(CUDA_MEMCPY2D, dstPitch), "CUDA_MEMCPY2D");

enum class Layout : uint8_t {
  kNoParams, kRtStream, kRtEvent, kRtCopy, kRtCopyAsync, kRtCopy2D, kRtCopy2DAsync, kRtCopy3D, kRtCopy3DAsync,
  kRtToSymbol, kRtToSymbolAsync, kRtFromSymbol, kRtFromSymbolAsync, kRtPeer, kRtPeerAsync, kRtMemset,
  kRtMemsetAsync, kRtMemset2D, kRtMemset2DAsync, kRtMemset3D, kRtMemset3DAsync, kRtOutPtr, kRtPtrSize, kRtPtr,
  kRtInstantiate, kRtExecUpdate, kDrStream, kDrEvent, kDrCopy, kDrCopyAsync, kDrPeer, kDrPeerAsync, kDrCopy2D,
  kDrCopy2DAsync, kDrCopy3D, kDrCopy3DAsync, kDrMemset, kDrMemsetAsync, kDrMemset2D, kDrMemset2DAsync, kDrOutPtr,
  kDrPtrSize, kDrPtr, kDrInstantiate, kDrExecUpdate,
};

enum class Op : uint8_t { kSync, kCopy, kMemset, kHostAlloc, kHostRegister, kHostFree, kCaptureBegin, kCaptureEnd,
                          kInstantiate, kExecUpdate };

}  // namespace

struct ApiCallbacks::Api {
  uint16_t cbid;
  Op op;
  Layout layout;
  uint16_t flags;
};

namespace {

// The hooked entry points, by callback id (cupti_runtime_cbid.h,
// cupti_driver_cbid.h; the numbers are CUPTI's ABI, spelled out so that
// older header sets without the newest ids still build).
const ApiCallbacks::Api kRuntimeApis[] = {
    {131, Op::kSync, Layout::kRtStream, kSyncStream},  // cudaStreamSynchronize_v3020
    {239, Op::kSync, Layout::kRtStream, kSyncStream | kPtsz},  // cudaStreamSynchronize_ptsz_v7000
    {165, Op::kSync, Layout::kNoParams, kSyncContext},  // cudaDeviceSynchronize_v3020
    {126, Op::kSync, Layout::kNoParams, kSyncContext},  // cudaThreadSynchronize_v3020
    {137, Op::kSync, Layout::kRtEvent, kSyncEvent},  // cudaEventSynchronize_v3020
    {147, Op::kSync, Layout::kRtStream, kSyncWait},  // cudaStreamWaitEvent_v3020
    {247, Op::kSync, Layout::kRtStream, kSyncWait | kPtsz},  // cudaStreamWaitEvent_ptsz_v7000
    {31, Op::kCopy, Layout::kRtCopy, 0},  // cudaMemcpy_v3020
    {215, Op::kCopy, Layout::kRtCopy, kPtsz},  // cudaMemcpy_ptds_v7000
    {41, Op::kCopy, Layout::kRtCopyAsync, 0},  // cudaMemcpyAsync_v3020
    {225, Op::kCopy, Layout::kRtCopyAsync, kPtsz},  // cudaMemcpyAsync_ptsz_v7000
    {32, Op::kCopy, Layout::kRtCopy2D, 0},  // cudaMemcpy2D_v3020
    {216, Op::kCopy, Layout::kRtCopy2D, kPtsz},  // cudaMemcpy2D_ptds_v7000
    {44, Op::kCopy, Layout::kRtCopy2DAsync, 0},  // cudaMemcpy2DAsync_v3020
    {228, Op::kCopy, Layout::kRtCopy2DAsync, kPtsz},  // cudaMemcpy2DAsync_ptsz_v7000
    {144, Op::kCopy, Layout::kRtCopy3D, 0},  // cudaMemcpy3D_v3020
    {245, Op::kCopy, Layout::kRtCopy3D, kPtsz},  // cudaMemcpy3D_ptds_v7000
    {145, Op::kCopy, Layout::kRtCopy3DAsync, 0},  // cudaMemcpy3DAsync_v3020
    {246, Op::kCopy, Layout::kRtCopy3DAsync, kPtsz},  // cudaMemcpy3DAsync_ptsz_v7000
    {39, Op::kCopy, Layout::kRtToSymbol, 0},  // cudaMemcpyToSymbol_v3020
    {223, Op::kCopy, Layout::kRtToSymbol, kPtsz},  // cudaMemcpyToSymbol_ptds_v7000
    {47, Op::kCopy, Layout::kRtToSymbolAsync, 0},  // cudaMemcpyToSymbolAsync_v3020
    {231, Op::kCopy, Layout::kRtToSymbolAsync, kPtsz},  // cudaMemcpyToSymbolAsync_ptsz_v7000
    {40, Op::kCopy, Layout::kRtFromSymbol, 0},  // cudaMemcpyFromSymbol_v3020
    {224, Op::kCopy, Layout::kRtFromSymbol, kPtsz},  // cudaMemcpyFromSymbol_ptds_v7000
    {48, Op::kCopy, Layout::kRtFromSymbolAsync, 0},  // cudaMemcpyFromSymbolAsync_v3020
    {232, Op::kCopy, Layout::kRtFromSymbolAsync, kPtsz},  // cudaMemcpyFromSymbolAsync_ptsz_v7000
    {160, Op::kCopy, Layout::kRtPeer, 0},  // cudaMemcpyPeer_v4000
    {161, Op::kCopy, Layout::kRtPeerAsync, 0},  // cudaMemcpyPeerAsync_v4000
    {49, Op::kMemset, Layout::kRtMemset, 0},  // cudaMemset_v3020
    {233, Op::kMemset, Layout::kRtMemset, kPtsz},  // cudaMemset_ptds_v7000
    {51, Op::kMemset, Layout::kRtMemsetAsync, 0},  // cudaMemsetAsync_v3020
    {235, Op::kMemset, Layout::kRtMemsetAsync, kPtsz},  // cudaMemsetAsync_ptsz_v7000
    {50, Op::kMemset, Layout::kRtMemset2D, 0},  // cudaMemset2D_v3020
    {234, Op::kMemset, Layout::kRtMemset2D, kPtsz},  // cudaMemset2D_ptds_v7000
    {52, Op::kMemset, Layout::kRtMemset2DAsync, 0},  // cudaMemset2DAsync_v3020
    {236, Op::kMemset, Layout::kRtMemset2DAsync, kPtsz},  // cudaMemset2DAsync_ptsz_v7000
    {142, Op::kMemset, Layout::kRtMemset3D, 0},  // cudaMemset3D_v3020
    {243, Op::kMemset, Layout::kRtMemset3D, kPtsz},  // cudaMemset3D_ptds_v7000
    {143, Op::kMemset, Layout::kRtMemset3DAsync, 0},  // cudaMemset3DAsync_v3020
    {244, Op::kMemset, Layout::kRtMemset3DAsync, kPtsz},  // cudaMemset3DAsync_ptsz_v7000
    {25, Op::kHostAlloc, Layout::kRtOutPtr, kPinned},  // cudaMallocHost_v3020
    {27, Op::kHostAlloc, Layout::kRtOutPtr, kPinned},  // cudaHostAlloc_v3020
    {206, Op::kHostAlloc, Layout::kRtOutPtr, kManaged},  // cudaMallocManaged_v6000
    {152, Op::kHostRegister, Layout::kRtPtrSize, kPinned},  // cudaHostRegister_v4000
    {26, Op::kHostFree, Layout::kRtPtr, 0},  // cudaFreeHost_v3020
    {153, Op::kHostFree, Layout::kRtPtr, 0},  // cudaHostUnregister_v4000
    {22, Op::kHostFree, Layout::kRtPtr, 0},  // cudaFree_v3020
    {315, Op::kCaptureBegin, Layout::kRtStream, 0},  // cudaStreamBeginCapture_v10000
    {316, Op::kCaptureBegin, Layout::kRtStream, kPtsz},  // cudaStreamBeginCapture_ptsz_v10000
    {452, Op::kCaptureBegin, Layout::kRtStream, 0},  // cudaStreamBeginCaptureToGraph_v12030
    {453, Op::kCaptureBegin, Layout::kRtStream, kPtsz},  // cudaStreamBeginCaptureToGraph_ptsz_v12030
    {319, Op::kCaptureEnd, Layout::kRtStream, 0},  // cudaStreamEndCapture_v10000
    {320, Op::kCaptureEnd, Layout::kRtStream, kPtsz},  // cudaStreamEndCapture_ptsz_v10000
    {310, Op::kInstantiate, Layout::kRtInstantiate, 0},  // cudaGraphInstantiate_v10000
    {443, Op::kInstantiate, Layout::kRtInstantiate, 0},  // cudaGraphInstantiate_v12000
    {418, Op::kInstantiate, Layout::kRtInstantiate, 0},  // cudaGraphInstantiateWithFlags_v11040
    {436, Op::kInstantiate, Layout::kRtInstantiate, 0},  // cudaGraphInstantiateWithParams_v12000
    {437, Op::kInstantiate, Layout::kRtInstantiate, 0},  // cudaGraphInstantiateWithParams_ptsz_v12000
    {335, Op::kExecUpdate, Layout::kRtExecUpdate, 0},  // cudaGraphExecUpdate_v10020
};

const ApiCallbacks::Api kDriverApis[] = {
    {126, Op::kSync, Layout::kDrStream, kSyncStream},  // cuStreamSynchronize
    {440, Op::kSync, Layout::kDrStream, kSyncStream | kPtsz},  // cuStreamSynchronize_ptsz
    {17, Op::kSync, Layout::kNoParams, kSyncContext},  // cuCtxSynchronize
    {800, Op::kSync, Layout::kNoParams, kSyncContext},  // cuCtxSynchronize_v2
    {121, Op::kSync, Layout::kDrEvent, kSyncEvent},  // cuEventSynchronize
    {295, Op::kSync, Layout::kDrStream, kSyncWait},  // cuStreamWaitEvent
    {436, Op::kSync, Layout::kDrStream, kSyncWait | kPtsz},  // cuStreamWaitEvent_ptsz
    {276, Op::kCopy, Layout::kDrCopy, kDirHtod},  // cuMemcpyHtoD_v2
    {278, Op::kCopy, Layout::kDrCopy, kDirDtoh},  // cuMemcpyDtoH_v2
    {280, Op::kCopy, Layout::kDrCopy, kDirDtod},  // cuMemcpyDtoD_v2
    {397, Op::kCopy, Layout::kDrCopy, kDirHtod | kPtsz},  // cuMemcpyHtoD_v2_ptds
    {398, Op::kCopy, Layout::kDrCopy, kDirDtoh | kPtsz},  // cuMemcpyDtoH_v2_ptds
    {399, Op::kCopy, Layout::kDrCopy, kDirDtod | kPtsz},  // cuMemcpyDtoD_v2_ptds
    {277, Op::kCopy, Layout::kDrCopyAsync, kDirHtod},  // cuMemcpyHtoDAsync_v2
    {279, Op::kCopy, Layout::kDrCopyAsync, kDirDtoh},  // cuMemcpyDtoHAsync_v2
    {281, Op::kCopy, Layout::kDrCopyAsync, kDirDtod},  // cuMemcpyDtoDAsync_v2
    {421, Op::kCopy, Layout::kDrCopyAsync, kDirHtod | kPtsz},  // cuMemcpyHtoDAsync_v2_ptsz
    {422, Op::kCopy, Layout::kDrCopyAsync, kDirDtoh | kPtsz},  // cuMemcpyDtoHAsync_v2_ptsz
    {423, Op::kCopy, Layout::kDrCopyAsync, kDirDtod | kPtsz},  // cuMemcpyDtoDAsync_v2_ptsz
    {305, Op::kCopy, Layout::kDrCopy, kDirUnified},  // cuMemcpy
    {408, Op::kCopy, Layout::kDrCopy, kDirUnified | kPtsz},  // cuMemcpy_ptds
    {306, Op::kCopy, Layout::kDrCopyAsync, kDirUnified},  // cuMemcpyAsync
    {418, Op::kCopy, Layout::kDrCopyAsync, kDirUnified | kPtsz},  // cuMemcpyAsync_ptsz
    {318, Op::kCopy, Layout::kDrPeer, 0},  // cuMemcpyPeer
    {409, Op::kCopy, Layout::kDrPeer, kPtsz},  // cuMemcpyPeer_ptds
    {319, Op::kCopy, Layout::kDrPeerAsync, 0},  // cuMemcpyPeerAsync
    {426, Op::kCopy, Layout::kDrPeerAsync, kPtsz},  // cuMemcpyPeerAsync_ptsz
    {287, Op::kCopy, Layout::kDrCopy2D, 0},  // cuMemcpy2D_v2
    {405, Op::kCopy, Layout::kDrCopy2D, kPtsz},  // cuMemcpy2D_v2_ptds
    {288, Op::kCopy, Layout::kDrCopy2D, 0},  // cuMemcpy2DUnaligned_v2
    {406, Op::kCopy, Layout::kDrCopy2D, kPtsz},  // cuMemcpy2DUnaligned_v2_ptds
    {289, Op::kCopy, Layout::kDrCopy2DAsync, 0},  // cuMemcpy2DAsync_v2
    {424, Op::kCopy, Layout::kDrCopy2DAsync, kPtsz},  // cuMemcpy2DAsync_v2_ptsz
    {290, Op::kCopy, Layout::kDrCopy3D, 0},  // cuMemcpy3D_v2
    {407, Op::kCopy, Layout::kDrCopy3D, kPtsz},  // cuMemcpy3D_v2_ptds
    {291, Op::kCopy, Layout::kDrCopy3DAsync, 0},  // cuMemcpy3DAsync_v2
    {425, Op::kCopy, Layout::kDrCopy3DAsync, kPtsz},  // cuMemcpy3DAsync_v2_ptsz
    {249, Op::kMemset, Layout::kDrMemset, kElem1},  // cuMemsetD8_v2
    {411, Op::kMemset, Layout::kDrMemset, kElem1 | kPtsz},  // cuMemsetD8_v2_ptds
    {216, Op::kMemset, Layout::kDrMemsetAsync, kElem1},  // cuMemsetD8Async
    {428, Op::kMemset, Layout::kDrMemsetAsync, kElem1 | kPtsz},  // cuMemsetD8Async_ptsz
    {252, Op::kMemset, Layout::kDrMemset2D, kElem1},  // cuMemsetD2D8_v2
    {414, Op::kMemset, Layout::kDrMemset2D, kElem1 | kPtsz},  // cuMemsetD2D8_v2_ptds
    {222, Op::kMemset, Layout::kDrMemset2DAsync, kElem1},  // cuMemsetD2D8Async
    {431, Op::kMemset, Layout::kDrMemset2DAsync, kElem1 | kPtsz},  // cuMemsetD2D8Async_ptsz
    {250, Op::kMemset, Layout::kDrMemset, kElem2},  // cuMemsetD16_v2
    {412, Op::kMemset, Layout::kDrMemset, kElem2 | kPtsz},  // cuMemsetD16_v2_ptds
    {218, Op::kMemset, Layout::kDrMemsetAsync, kElem2},  // cuMemsetD16Async
    {429, Op::kMemset, Layout::kDrMemsetAsync, kElem2 | kPtsz},  // cuMemsetD16Async_ptsz
    {253, Op::kMemset, Layout::kDrMemset2D, kElem2},  // cuMemsetD2D16_v2
    {415, Op::kMemset, Layout::kDrMemset2D, kElem2 | kPtsz},  // cuMemsetD2D16_v2_ptds
    {224, Op::kMemset, Layout::kDrMemset2DAsync, kElem2},  // cuMemsetD2D16Async
    {432, Op::kMemset, Layout::kDrMemset2DAsync, kElem2 | kPtsz},  // cuMemsetD2D16Async_ptsz
    {251, Op::kMemset, Layout::kDrMemset, kElem4},  // cuMemsetD32_v2
    {413, Op::kMemset, Layout::kDrMemset, kElem4 | kPtsz},  // cuMemsetD32_v2_ptds
    {220, Op::kMemset, Layout::kDrMemsetAsync, kElem4},  // cuMemsetD32Async
    {430, Op::kMemset, Layout::kDrMemsetAsync, kElem4 | kPtsz},  // cuMemsetD32Async_ptsz
    {254, Op::kMemset, Layout::kDrMemset2D, kElem4},  // cuMemsetD2D32_v2
    {416, Op::kMemset, Layout::kDrMemset2D, kElem4 | kPtsz},  // cuMemsetD2D32_v2_ptds
    {226, Op::kMemset, Layout::kDrMemset2DAsync, kElem4},  // cuMemsetD2D32Async
    {433, Op::kMemset, Layout::kDrMemset2DAsync, kElem4 | kPtsz},  // cuMemsetD2D32Async_ptsz
    {294, Op::kHostAlloc, Layout::kDrOutPtr, kPinned},  // cuMemAllocHost_v2
    {39, Op::kHostAlloc, Layout::kDrOutPtr, kPinned},  // cuMemHostAlloc
    {371, Op::kHostAlloc, Layout::kDrOutPtr, kManaged},  // cuMemAllocManaged
    {301, Op::kHostRegister, Layout::kDrPtrSize, kPinned},  // cuMemHostRegister
    {379, Op::kHostRegister, Layout::kDrPtrSize, kPinned},  // cuMemHostRegister_v2
    {38, Op::kHostFree, Layout::kDrPtr, 0},  // cuMemFreeHost
    {302, Op::kHostFree, Layout::kDrPtr, 0},  // cuMemHostUnregister
    {245, Op::kHostFree, Layout::kDrPtr, 0},  // cuMemFree_v2
    {495, Op::kCaptureBegin, Layout::kDrStream, 0},  // cuStreamBeginCapture
    {496, Op::kCaptureBegin, Layout::kDrStream, kPtsz},  // cuStreamBeginCapture_ptsz
    {539, Op::kCaptureBegin, Layout::kDrStream, 0},  // cuStreamBeginCapture_v2
    {540, Op::kCaptureBegin, Layout::kDrStream, kPtsz},  // cuStreamBeginCapture_v2_ptsz
    {720, Op::kCaptureBegin, Layout::kDrStream, 0},  // cuStreamBeginCaptureToGraph
    {721, Op::kCaptureBegin, Layout::kDrStream, kPtsz},  // cuStreamBeginCaptureToGraph_ptsz
    {497, Op::kCaptureEnd, Layout::kDrStream, 0},  // cuStreamEndCapture
    {498, Op::kCaptureEnd, Layout::kDrStream, kPtsz},  // cuStreamEndCapture_ptsz
    {513, Op::kInstantiate, Layout::kDrInstantiate, 0},  // cuGraphInstantiate
    {578, Op::kInstantiate, Layout::kDrInstantiate, 0},  // cuGraphInstantiate_v2
    {643, Op::kInstantiate, Layout::kDrInstantiate, 0},  // cuGraphInstantiateWithFlags
    {656, Op::kInstantiate, Layout::kDrInstantiate, 0},  // cuGraphInstantiateWithParams
    {657, Op::kInstantiate, Layout::kDrInstantiate, 0},  // cuGraphInstantiateWithParams_ptsz
    {561, Op::kExecUpdate, Layout::kDrExecUpdate, 0},  // cuGraphExecUpdate
    {696, Op::kExecUpdate, Layout::kDrExecUpdate, 0},  // cuGraphExecUpdate_v2
};

constexpr size_t kRuntimeCount = sizeof(kRuntimeApis) / sizeof(kRuntimeApis[0]);
constexpr size_t kDriverCount = sizeof(kDriverApis) / sizeof(kDriverApis[0]);
static_assert(kRuntimeCount < 255 && kDriverCount < 255, "index fits uint8_t");

#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
// Spot checks of the spelled-out ids against the headers they came from.
static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020 == 131, "cbid");
static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020 == 41, "cbid");
static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecUpdate_v10020 == 335, "cbid");
static_assert(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 == 277, "cbid");
static_assert(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2 == 800, "cbid");
static_assert(CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2 == 696, "cbid");
#endif

typedef CUptiResult (*GetGraphExecIdFn)(CUgraphExec, uint32_t*);

// The libcupti this library runs against (it may be newer than the headers
// it was built with), found through a function every version exports.
static GetGraphExecIdFn graph_exec_id_fn() {
  static GetGraphExecIdFn fn = []() -> GetGraphExecIdFn {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(&cuptiGetGraphId), &info) || !info.dli_fname) return nullptr;
    void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<GetGraphExecIdFn>(dlsym(h, "cuptiGetGraphExecId")) : nullptr;
  }();
  return fn;
}

thread_local int tl_runtime_depth = 0;  // hooked runtime calls in progress on this thread
thread_local uint16_t tl_runtime_cbid = 0;  // the outermost one (diagnostics)

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool is_sync_layout_with_stream(Layout l) { return l == Layout::kRtStream || l == Layout::kDrStream; }

}  // namespace

ApiCallbacks::ApiCallbacks(RingSink* sink, Devices* devices, HostMemory* host, GraphRegistry* graphs,
                           const CopyEstimator* estimator, const DriverApi* driver, CallTables* tables)
    : sink_(sink),
      devices_(devices),
      host_(host),
      graphs_(graphs),
      estimator_(estimator),
      driver_(driver),
      tables_(tables) {}

bool ApiCallbacks::enable(CUpti_SubscriberHandle subscriber, const CallbackConfig& cfg) {
  cfg_ = cfg;
  auto wanted = [&cfg](const Api& a) {
    switch (a.op) {
      case Op::kSync:
        return cfg.syncs;
      case Op::kInstantiate:
      case Op::kExecUpdate:
        return cfg.graphs;
      default:
        return cfg.copies;  // copies, memsets, and what classifies them (allocations, captures)
    }
  };
  // The entry points every workload of the kind uses; the rest may be
  // missing from an older CUPTI and are skipped quietly.
  auto core = [](bool runtime, uint16_t cbid) {
    return runtime ? (cbid == 131 || cbid == 165 || cbid == 41 || cbid == 51) : (cbid == 126 || cbid == 306);
  };
  // The calls made on every step (syncs, copies, memsets) are hooked in the
  // configured domains only: a runtime call reaches the driver through its
  // public entry points, where the driver callback sees it (a second domain
  // doubles CUPTI's dispatch on every call; scripts/bench_percall.py). Rare
  // calls (allocations, captures, instantiations) are hooked in both, the
  // driver call inside a hooked runtime call skipped.
  auto hot = [](const Api& a) { return a.op == Op::kSync || a.op == Op::kCopy || a.op == Op::kMemset; };
  bool ok = true;
  int enabled = 0, missing = 0;
  for (int d = 0; d < 2 && ok; d++) {
    bool runtime = d == 0;
    const Api* table = runtime ? kRuntimeApis : kDriverApis;
    size_t n = runtime ? kRuntimeCount : kDriverCount;
    uint8_t* index = runtime ? runtime_index_ : driver_index_;
    CUpti_CallbackDomain domain = runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    for (size_t i = 0; i < n; i++) {
      const Api& a = table[i];
      if (!wanted(a) || a.cbid >= kMaxCbid) continue;
      if (hot(a) && (runtime ? !cfg.runtime : !cfg.driver)) continue;
      bool is_core = core(runtime, a.cbid) && (a.op == Op::kSync ? cfg.syncs : cfg.copies);
      // Not through GS_CUPTI_CALL: an id this CUPTI does not know is expected.
      if (cuptiEnableCallback(1, subscriber, domain, a.cbid) != CUPTI_SUCCESS) {
        missing++;
        if (is_core) ok = false;
        continue;
      }
      index[a.cbid] = static_cast<uint8_t>(i + 1);
      enabled++;
    }
  }
  if (!ok) {
    for (int d = 0; d < 2; d++) {
      uint8_t* index = d == 0 ? runtime_index_ : driver_index_;
      CUpti_CallbackDomain domain = d == 0 ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
      for (int c = 0; c < kMaxCbid; c++) {
        if (index[c]) cuptiEnableCallback(0, subscriber, domain, static_cast<CUpti_CallbackId>(c));
        index[c] = 0;
      }
    }
    log(Level::kInfo, "CUPTI API callbacks unavailable; synchronization and copies are traced by activity records");
    return false;
  }
  log(Level::kDebug, "%d API callbacks enabled (%d unknown to this CUPTI)", enabled, missing);
  return true;
}

void ApiCallbacks::ignore_stream(void* stream) {
  CUstream s = static_cast<CUstream>(stream);
  for (int i = 0, n = n_ignored_.load(std::memory_order_acquire); i < n; i++)
    if (ignored_[i].load(std::memory_order_acquire) == s) return;
  int i = n_ignored_.load(std::memory_order_relaxed);
  while (i < kMaxIgnored && !n_ignored_.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel)) {
  }
  if (i < kMaxIgnored) ignored_[i].store(s, std::memory_order_release);
}

CallbackStats ApiCallbacks::stats() const {
  CallbackStats s;
  s.runtime = counters_.runtime.load(std::memory_order_relaxed);
  s.driver = counters_.driver.load(std::memory_order_relaxed);
  s.nested = counters_.nested.load(std::memory_order_relaxed);
  s.captured = counters_.captured.load(std::memory_order_relaxed);
  s.failed = counters_.failed.load(std::memory_order_relaxed);
  s.unsupported = counters_.unsupported.load(std::memory_order_relaxed);
  return s;
}

void ApiCallbacks::on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (cbid >= static_cast<CUpti_CallbackId>(kMaxCbid) || !cb) return;
  uint8_t i = runtime ? runtime_index_[cbid] : driver_index_[cbid];
  if (!i) return;
  const Api& api = runtime ? kRuntimeApis[i - 1] : kDriverApis[i - 1];
  // A driver call inside a hooked runtime call is the runtime call's own
  // work: the runtime call is the one reported.
  bool nested = !runtime && runtime_calls_.load(std::memory_order_relaxed) && tl_runtime_depth;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (runtime) {
      runtime_calls_.fetch_add(1, std::memory_order_relaxed);
      if (!tl_runtime_depth++) tl_runtime_cbid = static_cast<uint16_t>(cbid);
    } else if (nested) {
      if (diagnose_) note_nested(tl_runtime_cbid, static_cast<uint16_t>(cbid));
      return;
    }
    if (api.op == Op::kSync && cb->correlationData) *cb->correlationData = now_ns();
    return;
  }
  if (runtime) {
    if (tl_runtime_depth > 0) {
      tl_runtime_depth--;
      runtime_calls_.fetch_sub(1, std::memory_order_relaxed);
    }
  } else if (nested) {
    if (diagnose_) counters_.nested.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (diagnose_) (runtime ? counters_.runtime : counters_.driver).fetch_add(1, std::memory_order_relaxed);
  on_exit(api, cb);
}

void ApiCallbacks::on_exit(const Api& api, const CUpti_CallbackData* cb) {
  int result = -1;
  if (cb->functionReturnValue)
    result = *static_cast<const int*>(cb->functionReturnValue);  // a cudaError_t or a CUresult: 0 is success
  const void* params = cb->functionParams;
  if (api.op == Op::kCaptureEnd) {
    // An invalidated capture has ended too (901: the same value in both APIs).
    if (result == 0 || result == 901) {
      int n = captures_.load(std::memory_order_relaxed);
      while (n > 0 && !captures_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
      }
    }
    return;
  }
  if (result != 0) {
    counters_.failed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!params && api.layout != Layout::kNoParams) return;
  bool ptsz = (api.flags & kPtsz) != 0;
  switch (api.op) {
    case Op::kSync: {
      uint64_t start = cb->correlationData ? *cb->correlationData : 0;
      uint64_t end = now_ns();
      uint8_t type = static_cast<uint8_t>(api.flags & kLowMask);
      if (is_sync_layout_with_stream(api.layout) && skip_stream(static_cast<const RtStream*>(params)->stream, ptsz))
        return;
      record(CallTables::kSync, type, 0, 0, device_of(cb->context), start && end > start ? end - start : 0, 0);
      return;
    }
    case Op::kCopy: {
      Copy c;
      if (!copy_of(api, params, &c)) return;
      if (skip_stream(c.stream, ptsz)) return;
      record_copy(c, device_of(cb->context));
      return;
    }
    case Op::kMemset: {
      uint64_t bytes = 0;
      uintptr_t dst = 0;
      CUstream stream = nullptr;
      if (!memset_of(api, params, &bytes, &dst, &stream) || !bytes) return;
      if (skip_stream(stream, ptsz)) return;
      record(CallTables::kMemset, device_side(dst), 0, 0, device_of(cb->context), 0, bytes);
      return;
    }
    case Op::kHostAlloc: {
      const OutPtr* p = static_cast<const OutPtr*>(params);
      if (p->ptr) host_->add(reinterpret_cast<uintptr_t>(*p->ptr), p->size, static_cast<uint8_t>(api.flags & kLowMask));
      return;
    }
    case Op::kHostRegister: {
      const PtrSize* p = static_cast<const PtrSize*>(params);
      host_->add(reinterpret_cast<uintptr_t>(p->ptr), p->size, static_cast<uint8_t>(api.flags & kLowMask));
      return;
    }
    case Op::kHostFree:
      host_->remove(reinterpret_cast<uintptr_t>(static_cast<const Ptr*>(params)->ptr));
      return;
    case Op::kCaptureBegin:
      captures_.fetch_add(1, std::memory_order_relaxed);
      return;
    case Op::kInstantiate:
    case Op::kExecUpdate: {
      CUgraphExec exec;
      CUgraph graph;
      if (api.op == Op::kInstantiate) {
        const Instantiate* p = static_cast<const Instantiate*>(params);
        exec = p->exec ? *p->exec : nullptr, graph = p->graph;
      } else {
        const ExecUpdate* p = static_cast<const ExecUpdate*>(params);
        exec = p->exec, graph = p->graph;
      }
      uint32_t exec_id = 0, graph_id = 0;
      if (!graphs_ || !exec) return;
      // cuptiGetGraphExecId is newer than the oldest CUPTI 12 headers we
      // build against: looked up in the loaded libcupti; without it the
      // records carry (and the registry keys on) the source graph's id.
      if (GetGraphExecIdFn get_exec_id = graph_exec_id_fn())
        if (get_exec_id(exec, &exec_id) != CUPTI_SUCCESS) exec_id = 0;
      if (graph) GS_CUPTI_CALL(cuptiGetGraphId(graph, &graph_id));
      if (!exec_id && !graph_id) return;
      if (api.op == Op::kInstantiate) graphs_->on_instantiate(exec_id, graph_id, graph);
      else graphs_->on_update(exec_id, graph_id, graph);
      return;
    }
    case Op::kCaptureEnd:
      return;
  }
}

bool ApiCallbacks::skip_stream(CUstream stream, bool ptsz) {
  if (!stream && ptsz) stream = CU_STREAM_PER_THREAD;  // a _ptsz call's null stream
  int n = n_ignored_.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ignored_[i].load(std::memory_order_acquire) == stream) return true;
  if (captures_.load(std::memory_order_relaxed) > 0 && driver_ && driver_->stream_is_capturing) {
    // Work put on a capturing stream joins the graph instead of running;
    // the graph's replays carry it. Asked only while some capture runs.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_->stream_is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) {
      counters_.captured.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

uint16_t ApiCallbacks::device_of(CUcontext ctx) {
  // user-space pointers fit 48 bits: (pointer << 16 | ordinal) in one word
  uint64_t c = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx));
  bool cacheable = ctx && c < (1ull << 48);
  std::atomic<uint64_t>& slot = contexts_[(c >> 4) % kContexts];
  if (cacheable) {
    uint64_t v = slot.load(std::memory_order_relaxed);
    if (v >> 16 == c) return static_cast<uint16_t>(v & 0xFFFF);
  }
  uint32_t dev = 0;
  if (!ctx || GS_CUPTI_CALL(cuptiGetDeviceId(ctx, &dev)) != CUPTI_SUCCESS) dev = devices_->last();
  uint16_t d = devices_->use(dev);  // announced before any record of it
  if (cacheable) slot.store(c << 16 | d, std::memory_order_relaxed);
  return d;
}

uint8_t ApiCallbacks::host_side(uintptr_t p) const {
  uint8_t k = host_->kind_of(p);
  return k ? k : kMemPageable;
}

uint8_t ApiCallbacks::device_side(uintptr_t p) const {
  uint8_t k = host_->kind_of(p);
  return k ? k : kMemDevice;
}

bool ApiCallbacks::host_pointer(uintptr_t p, uint8_t* kind) {
  uint8_t k = host_->kind_of(p);
  if (k == kMemPinned) {
    *kind = k;
    return true;
  }
  if (k == kMemManaged) {
    *kind = k;
    return false;
  }
  // Only unified-address copies (cudaMemcpyDefault, cuMemcpy) get here:
  // device memory, or ordinary (pageable) host memory. Under unified
  // addressing a 2 MiB region of addresses is either in CUDA's device
  // reservation or not, for the life of the process, so the driver's answer
  // is kept per region (page-locked memory is found in the ranges above,
  // first, so a region's answer never has to say "pinned").
  uint64_t region = static_cast<uint64_t>(p) >> 21;
  std::atomic<uint64_t>& slot = regions_[region % kRegions];
  uint64_t seen = slot.load(std::memory_order_relaxed);
  if (seen >> 1 == region + 1) {
    bool device = seen & 1;
    *kind = device ? kMemDevice : kMemPageable;
    return !device;
  }
  unsigned int type = 0;
  bool device = false, known = false;
  if (driver_ && driver_->pointer_get_attribute) {
    CUresult r = driver_->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, static_cast<CUdeviceptr>(p));
    if (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST) {
      *kind = kMemPinned;  // registered before this library saw it
      return true;
    }
    device = r == CUDA_SUCCESS;
    known = r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE;  // the latter: memory CUDA does not know
  }
  if (known) slot.store((region + 1) << 1 | (device ? 1 : 0), std::memory_order_relaxed);
  *kind = device ? kMemDevice : kMemPageable;
  return !device;
}

void ApiCallbacks::note_nested(uint16_t runtime_cbid, uint16_t driver_cbid) {
  uint32_t pair = static_cast<uint32_t>(runtime_cbid) << 16 | driver_cbid;
  for (int i = 0; i < kMaxPairs; i++) {
    uint32_t v = pairs_[i].load(std::memory_order_relaxed);
    if (v == pair) return;
    if (!v && pairs_[i].compare_exchange_strong(v, pair, std::memory_order_relaxed)) return;
    if (v == pair) return;
  }
}

std::string ApiCallbacks::nested_pairs() const {
  std::string out;
  char buf[32];
  for (int i = 0; i < kMaxPairs; i++) {
    uint32_t v = pairs_[i].load(std::memory_order_relaxed);
    if (!v) break;
    snprintf(buf, sizeof buf, "%s%u>%u", out.empty() ? "" : " ", v >> 16, v & 0xFFFF);
    out += buf;
  }
  return out;
}

namespace {
// (copy kind, src kind, dst kind) from which side is host memory.
void set_direction(bool src_host, bool dst_host, uint8_t* kind) {
  *kind = src_host ? (dst_host ? kCopyHtoH : kCopyHtoD) : (dst_host ? kCopyDtoH : kCopyDtoD);
}
}  // namespace

bool ApiCallbacks::copy_of(const Api& api, const void* params, Copy* c) {
  uintptr_t src = 0, dst = 0;
  int rt_kind = -1;  // a cudaMemcpyKind, or -1: the driver's direction in api.flags
  uint16_t dir = api.flags & kDirMask;
  c->stream = nullptr;
  c->src = c->dst = 0;
  c->bytes = 0;
  switch (api.layout) {
    case Layout::kRtCopy:
    case Layout::kRtCopyAsync: {
      const RtCopy* p = static_cast<const RtCopy*>(params);
      dst = reinterpret_cast<uintptr_t>(p->dst), src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, rt_kind = p->kind;
      if (api.layout == Layout::kRtCopyAsync) c->stream = p->stream;
      break;
    }
    case Layout::kRtCopy2D:
    case Layout::kRtCopy2DAsync: {
      const RtCopy2D* p = static_cast<const RtCopy2D*>(params);
      dst = reinterpret_cast<uintptr_t>(p->dst), src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = static_cast<uint64_t>(p->width) * p->height, rt_kind = p->kind;
      if (api.layout == Layout::kRtCopy2DAsync) c->stream = p->stream;
      break;
    }
    case Layout::kRtCopy3D:
    case Layout::kRtCopy3DAsync: {
      const RtCopy3D* p = static_cast<const RtCopy3D*>(params);
      if (!p->p) return false;
      if (p->p->srcArray || p->p->dstArray) {
        counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      dst = reinterpret_cast<uintptr_t>(p->p->dstPtr.ptr), src = reinterpret_cast<uintptr_t>(p->p->srcPtr.ptr);
      c->bytes = static_cast<uint64_t>(p->p->extent.width) * p->p->extent.height * p->p->extent.depth;
      rt_kind = p->p->kind;
      if (api.layout == Layout::kRtCopy3DAsync) c->stream = p->stream;
      break;
    }
    case Layout::kRtToSymbol:
    case Layout::kRtToSymbolAsync: {
      const RtToSymbol* p = static_cast<const RtToSymbol*>(params);
      src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, rt_kind = p->kind;
      // the destination is a device symbol
      if (rt_kind != kRtHostToDevice && rt_kind != kRtDeviceToDevice) rt_kind = host_pointer(src, &c->src) ? kRtHostToDevice : kRtDeviceToDevice;
      if (api.layout == Layout::kRtToSymbolAsync) c->stream = p->stream;
      break;
    }
    case Layout::kRtFromSymbol:
    case Layout::kRtFromSymbolAsync: {
      const RtFromSymbol* p = static_cast<const RtFromSymbol*>(params);
      dst = reinterpret_cast<uintptr_t>(p->dst);
      c->bytes = p->count, rt_kind = p->kind;
      if (rt_kind != kRtDeviceToHost && rt_kind != kRtDeviceToDevice) rt_kind = host_pointer(dst, &c->dst) ? kRtDeviceToHost : kRtDeviceToDevice;
      if (api.layout == Layout::kRtFromSymbolAsync) c->stream = p->stream;
      break;
    }
    case Layout::kRtPeer:
    case Layout::kRtPeerAsync: {
      const RtPeer* p = static_cast<const RtPeer*>(params);
      c->kind = kCopyPtoP, c->src = kMemDevice, c->dst = kMemDevice, c->bytes = p->count;
      if (api.layout == Layout::kRtPeerAsync) c->stream = p->stream;
      return c->bytes != 0;
    }
    case Layout::kDrCopy:
    case Layout::kDrCopyAsync: {
      const DrCopy* p = static_cast<const DrCopy*>(params);
      dst = p->dst, src = p->src, c->bytes = p->bytes;
      if (api.layout == Layout::kDrCopyAsync) c->stream = p->stream;
      break;
    }
    case Layout::kDrPeer:
    case Layout::kDrPeerAsync: {
      const DrPeer* p = static_cast<const DrPeer*>(params);
      c->kind = kCopyPtoP, c->src = kMemDevice, c->dst = kMemDevice, c->bytes = p->bytes;
      if (api.layout == Layout::kDrPeerAsync) c->stream = p->stream;
      return c->bytes != 0;
    }
    case Layout::kDrCopy2D:
    case Layout::kDrCopy2DAsync:
    case Layout::kDrCopy3D:
    case Layout::kDrCopy3DAsync: {
      const DrCopyND* p = static_cast<const DrCopyND*>(params);
      if (!p->p) return false;
      CUmemorytype st, dt;
      if (api.layout == Layout::kDrCopy2D || api.layout == Layout::kDrCopy2DAsync) {
        const CUDA_MEMCPY2D* m = static_cast<const CUDA_MEMCPY2D*>(p->p);
        st = m->srcMemoryType, dt = m->dstMemoryType;
        src = st == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->srcHost) : m->srcDevice;
        dst = dt == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->dstHost) : m->dstDevice;
        c->bytes = static_cast<uint64_t>(m->WidthInBytes) * m->Height;
      } else {
        const CUDA_MEMCPY3D* m = static_cast<const CUDA_MEMCPY3D*>(p->p);
        st = m->srcMemoryType, dt = m->dstMemoryType;
        src = st == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->srcHost) : m->srcDevice;
        dst = dt == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->dstHost) : m->dstDevice;
        c->bytes = static_cast<uint64_t>(m->WidthInBytes) * m->Height * m->Depth;
      }
      if (api.layout == Layout::kDrCopy2DAsync || api.layout == Layout::kDrCopy3DAsync) c->stream = p->stream;
      if (st == CU_MEMORYTYPE_ARRAY || dt == CU_MEMORYTYPE_ARRAY) {
        counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      bool src_host, dst_host;
      if (st == CU_MEMORYTYPE_UNIFIED) src_host = host_pointer(src, &c->src);
      else if ((src_host = st == CU_MEMORYTYPE_HOST)) c->src = host_side(src);
      else c->src = device_side(src);
      if (dt == CU_MEMORYTYPE_UNIFIED) dst_host = host_pointer(dst, &c->dst);
      else if ((dst_host = dt == CU_MEMORYTYPE_HOST)) c->dst = host_side(dst);
      else c->dst = device_side(dst);
      set_direction(src_host, dst_host, &c->kind);
      return c->bytes != 0;
    }
    default:
      return false;
  }
  if (!c->bytes) return false;  // CUPTI records no zero-byte copy
  bool src_host, dst_host;
  if (rt_kind == kRtHostToDevice || dir == kDirHtod) {
    src_host = true, dst_host = false;
  } else if (rt_kind == kRtDeviceToHost || dir == kDirDtoh) {
    src_host = false, dst_host = true;
  } else if (rt_kind == kRtDeviceToDevice || dir == kDirDtod) {
    src_host = false, dst_host = false;
  } else if (rt_kind == kRtHostToHost) {
    src_host = true, dst_host = true;
  } else {
    // cudaMemcpyDefault and the driver's unified cuMemcpy: where do they point?
    src_host = host_pointer(src, &c->src);
    dst_host = host_pointer(dst, &c->dst);
    set_direction(src_host, dst_host, &c->kind);
    return true;
  }
  // Symbol copies have one side already classified (the symbol is device memory).
  if (api.layout == Layout::kRtToSymbol || api.layout == Layout::kRtToSymbolAsync) {
    if (src_host && !c->src) c->src = host_side(src);
    if (!src_host) c->src = device_side(src);
    c->dst = kMemDevice;
  } else if (api.layout == Layout::kRtFromSymbol || api.layout == Layout::kRtFromSymbolAsync) {
    c->src = kMemDevice;
    c->dst = dst_host ? host_side(dst) : device_side(dst);
  } else {
    c->src = src_host ? host_side(src) : device_side(src);
    c->dst = dst_host ? host_side(dst) : device_side(dst);
  }
  set_direction(src_host, dst_host, &c->kind);
  return true;
}

bool ApiCallbacks::memset_of(const Api& api, const void* params, uint64_t* bytes, uintptr_t* dst, CUstream* stream) {
  uint64_t elem = (api.flags >> 8) & 0x7;
  *stream = nullptr;
  switch (api.layout) {
    case Layout::kRtMemset:
    case Layout::kRtMemsetAsync: {
      const RtMemset* p = static_cast<const RtMemset*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr), *bytes = p->count;
      if (api.layout == Layout::kRtMemsetAsync) *stream = p->stream;
      return true;
    }
    case Layout::kRtMemset2D:
    case Layout::kRtMemset2DAsync: {
      const RtMemset2D* p = static_cast<const RtMemset2D*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr), *bytes = static_cast<uint64_t>(p->width) * p->height;
      if (api.layout == Layout::kRtMemset2DAsync) *stream = p->stream;
      return true;
    }
    case Layout::kRtMemset3D:
    case Layout::kRtMemset3DAsync: {
      const RtMemset3D* p = static_cast<const RtMemset3D*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr.ptr);
      *bytes = static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth;
      if (api.layout == Layout::kRtMemset3DAsync) *stream = p->stream;
      return true;
    }
    case Layout::kDrMemset:
    case Layout::kDrMemsetAsync: {
      const DrMemset* p = static_cast<const DrMemset*>(params);
      *dst = p->dst, *bytes = static_cast<uint64_t>(p->n) * elem;
      if (api.layout == Layout::kDrMemsetAsync) *stream = p->stream;
      return true;
    }
    case Layout::kDrMemset2D:
    case Layout::kDrMemset2DAsync: {
      const DrMemset2D* p = static_cast<const DrMemset2D*>(params);
      *dst = p->dst, *bytes = static_cast<uint64_t>(p->width) * p->height * elem;
      if (api.layout == Layout::kDrMemset2DAsync) *stream = p->stream;
      return true;
    }
    default:
      return false;
  }
}

void ApiCallbacks::record_copy(const Copy& c, uint16_t dev) {
  if (first_copy_hook_ && !first_copy_.load(std::memory_order_relaxed) && !first_copy_.exchange(true))
    first_copy_hook_(first_copy_arg_);
  record(CallTables::kMemcpy, c.kind, c.src, c.dst, dev, 0, c.bytes);
}

void ApiCallbacks::record(CallTables::Kind kind, uint8_t sub, uint8_t src, uint8_t dst, uint16_t dev, uint64_t ns,
                          uint64_t bytes) {
  if (!cfg_.write) return;
  if (tables_ && tables_->add(kind, sub, src, dst, dev, ns, bytes)) return;
  // not tabled (see CallTables::add): this call's own record
  CallTables direct(sink_, estimator_);
  if (kind != CallTables::kSync) ns = direct.estimate(kind, sub, src, dst, 1, bytes);
  direct.write(kind, sub, src, dst, dev, 1, ns, bytes);
}

}  // namespace cupti
}  // namespace graphsignal
