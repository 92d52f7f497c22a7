// The hooked entry points' rows (api_table.h), by CUPTI callback id;
// the ids spot-checked against the headers that define them.
#include "api_table.h"

#include <cupti.h>  // CUPTI_API_VERSION and the ids, for the spot checks below

namespace graphsignal {
namespace cupti {

// The hooked entry points, by callback id (cupti_runtime_cbid.h,
// cupti_driver_cbid.h; the numbers are CUPTI's ABI, spelled out so that
// older header sets without the newest ids still build).
const Api kRuntimeApis[] = {
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

const Api kDriverApis[] = {
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

const size_t kRuntimeCount = sizeof(kRuntimeApis) / sizeof(kRuntimeApis[0]);
const size_t kDriverCount = sizeof(kDriverApis) / sizeof(kDriverApis[0]);
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

}  // namespace cupti
}  // namespace graphsignal
