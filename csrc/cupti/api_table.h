// The hooked entry points (api_table.cpp): for each CUPTI callback id, what
// the call does (Op), which parameter block it passes (Layout, decoded by
// api_params.h) and what the id itself says that the block does not (the
// driver's copy direction, a memset's element size, a sync's type, the
// per-thread default stream). The bottom of the API hooks: no CUDA header
// and nothing above it (host_memory.h only, for the memory kinds), so the
// decoding and the dispatcher (api_callbacks.h) both build on it.
//
// Guards against a table that disagrees with the headers it was spelled
// from: the ids are CUPTI's ABI, spot-checked against the newest headers
// at build time (api_table.cpp), and an id an older CUPTI does not know is
// skipped when callbacks are enabled, never fatal.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "host_memory.h"  // kMemPinned, kMemManaged: what an allocation makes

namespace graphsignal {
namespace cupti {

enum class Op : uint8_t { kSync, kCopy, kMemset, kHostAlloc, kHostRegister, kHostFree, kCaptureBegin, kCaptureEnd,
                          kInstantiate, kExecUpdate };

// Which parameter block an entry point passes (api_params.h mirrors each).
enum class Layout : uint8_t {
  kNoParams, kRtStream, kRtEvent, kRtCopy, kRtCopyAsync, kRtCopy2D, kRtCopy2DAsync, kRtCopy3D, kRtCopy3DAsync,
  kRtToSymbol, kRtToSymbolAsync, kRtFromSymbol, kRtFromSymbolAsync, kRtPeer, kRtPeerAsync, kRtMemset,
  kRtMemsetAsync, kRtMemset2D, kRtMemset2DAsync, kRtMemset3D, kRtMemset3DAsync, kRtOutPtr, kRtPtrSize, kRtPtr,
  kRtInstantiate, kRtExecUpdate, kDrStream, kDrEvent, kDrCopy, kDrCopyAsync, kDrPeer, kDrPeerAsync, kDrCopy2D,
  kDrCopy2DAsync, kDrCopy3D, kDrCopy3DAsync, kDrMemset, kDrMemsetAsync, kDrMemset2D, kDrMemset2DAsync, kDrOutPtr,
  kDrPtrSize, kDrPtr, kDrInstantiate, kDrExecUpdate,
};

// Api::flags
constexpr uint16_t kSyncEvent = 1, kSyncWait = 2, kSyncStream = 3, kSyncContext = 4;  // CUPTI sync types
constexpr uint16_t kPinned = kMemPinned, kManaged = kMemManaged;                   // allocation kinds
constexpr uint16_t kLowMask = 0x7;
constexpr uint16_t kDirHtod = 1 << 4, kDirDtoh = 2 << 4, kDirDtod = 3 << 4, kDirUnified = 4 << 4, kDirMask = 7 << 4;
constexpr uint16_t kElem1 = 1 << 8, kElem2 = 2 << 8, kElem4 = 4 << 8;
constexpr uint16_t kPtsz = 1 << 12;  // the per-thread default stream variant (_ptsz / _ptds)

// One hooked entry point.
struct Api {
  uint16_t cbid;
  Op op;
  Layout layout;
  uint16_t flags;
};

// By callback id (cupti_runtime_cbid.h, cupti_driver_cbid.h).
extern const Api kRuntimeApis[];
extern const size_t kRuntimeCount;
extern const Api kDriverApis[];
extern const size_t kDriverCount;

}  // namespace cupti
}  // namespace graphsignal
