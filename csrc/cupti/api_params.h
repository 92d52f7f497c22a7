// The parameter blocks of the hooked entry points, as the API callbacks read
// them, and what they decode from them: a copy's direction, memory kinds
// and bytes, a memset's bytes (api_params.cpp). No CUPTI calls.
#pragma once

#include <cupti.h>
#include <stddef.h>
#include <stdint.h>

namespace graphsignal {
namespace cupti {

// CUPTI enum values the callbacks write (cupti_activity.h).
constexpr uint8_t kCopyHtoD = 1, kCopyDtoH = 2, kCopyDtoD = 8, kCopyHtoH = 9, kCopyPtoP = 10;
constexpr uint8_t kMemPageable = 1, kMemPinned = 2, kMemDevice = 3, kMemManaged = 5;

// The runtime's cudaMemcpyKind.
constexpr int kRtHostToHost = 0, kRtHostToDevice = 1, kRtDeviceToHost = 2, kRtDeviceToDevice = 3;

// Parameter blocks: the fields the callbacks read, in their order, as in
// generated_cuda_runtime_api_meta.h and generated_cuda_meta.h (which
// cupti.h includes; api_params.cpp holds the mirrors to them). One
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

// Which of the blocks above an entry point passes (ApiCallbacks::Api::layout).
enum class Layout : uint8_t {
  kNoParams, kRtStream, kRtEvent, kRtCopy, kRtCopyAsync, kRtCopy2D, kRtCopy2DAsync, kRtCopy3D, kRtCopy3DAsync,
  kRtToSymbol, kRtToSymbolAsync, kRtFromSymbol, kRtFromSymbolAsync, kRtPeer, kRtPeerAsync, kRtMemset,
  kRtMemsetAsync, kRtMemset2D, kRtMemset2DAsync, kRtMemset3D, kRtMemset3DAsync, kRtOutPtr, kRtPtrSize, kRtPtr,
  kRtInstantiate, kRtExecUpdate, kDrStream, kDrEvent, kDrCopy, kDrCopyAsync, kDrPeer, kDrPeerAsync, kDrCopy2D,
  kDrCopy2DAsync, kDrCopy3D, kDrCopy3DAsync, kDrMemset, kDrMemsetAsync, kDrMemset2D, kDrMemset2DAsync, kDrOutPtr,
  kDrPtrSize, kDrPtr, kDrInstantiate, kDrExecUpdate,
};

}  // namespace cupti
}  // namespace graphsignal
