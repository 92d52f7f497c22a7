// The CUPTI activity records the translator reads, named once for every
// header version the library is built against.
//
// CUPTI versions its record structs (CUpti_ActivityKernel9 in CUDA 12.0,
// ...Kernel10 in 13.0, ...) and a libcupti of a later minor emits its own
// latest version. New versions only append fields, so the fields read here
// keep their offsets across versions; the static_asserts pin those offsets,
// so a header that ever moved one fails the build instead of misreading
// records at run time. Only fields at or below the asserted offsets may be
// read.
#pragma once

#include <cupti.h>
#include <stddef.h>

namespace graphsignal {
namespace cupti {

#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 KernelRecord;
typedef CUpti_ActivityMemcpy6 MemcpyRecord;
typedef CUpti_ActivityMemcpyPtoP4 PeerCopyRecord;
typedef CUpti_ActivityMemset4 MemsetRecord;
typedef CUpti_ActivitySynchronization2 SyncRecord;
typedef CUpti_ActivityGraphTrace2 GraphRecord;
typedef CUpti_ActivityContext3 ContextRecord;
#else  // CUDA 12.x headers
typedef CUpti_ActivityKernel9 KernelRecord;
typedef CUpti_ActivityMemcpy5 MemcpyRecord;
typedef CUpti_ActivityMemcpyPtoP4 PeerCopyRecord;
typedef CUpti_ActivityMemset4 MemsetRecord;
typedef CUpti_ActivitySynchronization SyncRecord;
typedef CUpti_ActivityGraphTrace GraphRecord;
typedef CUpti_ActivityContext ContextRecord;
#endif

static_assert(offsetof(KernelRecord, start) == 16 && offsetof(KernelRecord, end) == 24, "kernel times");
static_assert(offsetof(KernelRecord, deviceId) == 40 && offsetof(KernelRecord, contextId) == 44, "kernel ids");
static_assert(offsetof(KernelRecord, name) == 104, "kernel name");
static_assert(offsetof(KernelRecord, graphId) == 156, "kernel graphId");

static_assert(offsetof(MemcpyRecord, copyKind) == 4 && offsetof(MemcpyRecord, srcKind) == 5 &&
                  offsetof(MemcpyRecord, dstKind) == 6, "memcpy kinds");
static_assert(offsetof(MemcpyRecord, bytes) == 8 && offsetof(MemcpyRecord, start) == 16 &&
                  offsetof(MemcpyRecord, end) == 24 && offsetof(MemcpyRecord, deviceId) == 32, "memcpy fields");
static_assert(offsetof(MemcpyRecord, graphId) == 72, "memcpy graphId");

static_assert(offsetof(PeerCopyRecord, copyKind) == 4 && offsetof(PeerCopyRecord, srcKind) == 5 &&
                  offsetof(PeerCopyRecord, dstKind) == 6, "peer copy kinds");
static_assert(offsetof(PeerCopyRecord, bytes) == 8 && offsetof(PeerCopyRecord, start) == 16 &&
                  offsetof(PeerCopyRecord, end) == 24 && offsetof(PeerCopyRecord, deviceId) == 32,
              "peer copy fields");

static_assert(offsetof(MemsetRecord, bytes) == 8 && offsetof(MemsetRecord, start) == 16 &&
                  offsetof(MemsetRecord, end) == 24 && offsetof(MemsetRecord, deviceId) == 32, "memset fields");
static_assert(offsetof(MemsetRecord, memoryKind) == 50, "memset memoryKind");

static_assert(offsetof(SyncRecord, type) == 4 && offsetof(SyncRecord, start) == 8 &&
                  offsetof(SyncRecord, end) == 16 && offsetof(SyncRecord, contextId) == 28, "sync fields");

static_assert(offsetof(GraphRecord, start) == 8 && offsetof(GraphRecord, end) == 16 &&
                  offsetof(GraphRecord, deviceId) == 24 && offsetof(GraphRecord, graphId) == 28 &&
                  offsetof(GraphRecord, contextId) == 32, "graph trace fields");

// streamId: lets the library leave out the graphsignal probe reader's own stream
static_assert(offsetof(KernelRecord, streamId) == 48, "kernel streamId");
static_assert(offsetof(MemcpyRecord, streamId) == 40, "memcpy streamId");
static_assert(offsetof(PeerCopyRecord, streamId) == 40, "peer copy streamId");
static_assert(offsetof(MemsetRecord, streamId) == 40, "memset streamId");
static_assert(offsetof(SyncRecord, streamId) == 32, "sync streamId");

static_assert(offsetof(ContextRecord, contextId) == 4 && offsetof(ContextRecord, deviceId) == 8, "context fields");

}  // namespace cupti
}  // namespace graphsignal
