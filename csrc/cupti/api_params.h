// What the hooked entry points' parameter blocks say: a copy's direction,
// memory kinds, bytes and stream; a memset's; a sync's stream; the range an
// allocation made or a free let go; the graph an instantiation made. Free
// functions of (the entry point's table row, its parameter block, what may
// be asked about an address): no CUPTI call, no state, nothing above them.
// The dispatcher (api_callbacks.h) calls them; tests call them with
// hand-made blocks and a fake MemoryKinds (tests/support/cupti/
// api_params_shim.cpp), no GPU.
//
// Guards against: reading past what an entry point passes (each layout is a
// mirror of the headers' own struct, held to it by offsetof asserts in
// api_params.cpp, and one mirror serves only layouts that agree on the
// fields read); null pointers inside a block (a 3D descriptor, an out
// pointer: nothing counted); copies it cannot describe (CUDA arrays:
// kUnsupported, counted apart); zero-byte copies and memsets (CUPTI
// records none, so neither does this).
#pragma once

#include <cupti.h>
#include <stddef.h>
#include <stdint.h>

#include "api_table.h"
#include "host_memory.h"

namespace graphsignal {
namespace cupti {

// CUpti_ActivityMemcpyKind values (cupti_activity.h).
constexpr uint8_t kCopyHtoD = 1, kCopyDtoH = 2, kCopyDtoD = 8, kCopyHtoH = 9, kCopyPtoP = 10;

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

// What decoding found.
enum class Decoded : uint8_t {
  kYes,          // the out struct holds a call to count
  kNothing,      // nothing to count: no bytes, a missing descriptor, not this op's layout
  kUnsupported,  // a copy this collection cannot describe (CUDA arrays): counted apart
};

struct CopyCall {
  uint8_t kind;      // CUpti_ActivityMemcpyKind
  uint8_t src, dst;  // CUpti_ActivityMemoryKind
  uint64_t bytes;
  CUstream stream;   // nullptr: the default stream (or a synchronous call's)
};

struct MemsetCall {
  uint8_t kind;  // CUpti_ActivityMemoryKind of the memory set
  uint64_t bytes;
  CUstream stream;
};

// An Op::kCopy call.
Decoded decode_copy(const Api& api, const void* params, MemoryKinds& mem, CopyCall* out);
// An Op::kMemset call.
Decoded decode_memset(const Api& api, const void* params, MemoryKinds& mem, MemsetCall* out);
// An Op::kSync call's stream; false when its layout names none (an event, a
// context).
bool sync_stream(const Api& api, const void* params, CUstream* out);
// An Op::kHostAlloc or kHostRegister call's range (kHostFree: its base, size
// 0); false when there is none.
bool host_range(const Api& api, const void* params, uintptr_t* base, size_t* size);
// An Op::kInstantiate or kExecUpdate call's executable graph and source
// graph; false when there is no executable.
bool graph_of(const Api& api, const void* params, CUgraphExec* exec, CUgraph* graph);

}  // namespace cupti
}  // namespace graphsignal
