// The hooked entry points (api_table.cpp): for each CUPTI callback id, what
// the call does, which parameter block it passes and its flags.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "api_callbacks.h"
#include "api_params.h"

namespace graphsignal {
namespace cupti {

// Api::flags
constexpr uint16_t kSyncEvent = 1, kSyncWait = 2, kSyncStream = 3, kSyncContext = 4;  // CUPTI sync types
constexpr uint16_t kPinned = kMemPinned, kManaged = kMemManaged;                   // allocation kinds
constexpr uint16_t kLowMask = 0x7;
constexpr uint16_t kDirHtod = 1 << 4, kDirDtoh = 2 << 4, kDirDtod = 3 << 4, kDirUnified = 4 << 4, kDirMask = 7 << 4;
constexpr uint16_t kElem1 = 1 << 8, kElem2 = 2 << 8, kElem4 = 4 << 8;
constexpr uint16_t kPtsz = 1 << 12;  // the per-thread default stream variant (_ptsz / _ptds)

enum class Op : uint8_t { kSync, kCopy, kMemset, kHostAlloc, kHostRegister, kHostFree, kCaptureBegin, kCaptureEnd,
                          kInstantiate, kExecUpdate };

struct ApiCallbacks::Api {
  uint16_t cbid;
  Op op;
  Layout layout;
  uint16_t flags;
};

// By callback id (cupti_runtime_cbid.h, cupti_driver_cbid.h).
extern const ApiCallbacks::Api kRuntimeApis[];
extern const size_t kRuntimeCount;
extern const ApiCallbacks::Api kDriverApis[];
extern const size_t kDriverCount;

}  // namespace cupti
}  // namespace graphsignal
